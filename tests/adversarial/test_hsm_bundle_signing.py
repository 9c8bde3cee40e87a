"""A bundle signed by a key that never leaves a SoftHSM2 token (PKCS#11, CKM_EDDSA) verifies by
OPA's rules, and a tampered one does not.

OPA's rules, checked three ways: kcp-opa's reader (OPA's verify.go: one JWT, the key by ``kid``,
every file listed and hashed); OPA's own Go JWT library (``io.jwt.verify_eddsa`` on the Go engine
kcp-opa cross-checks with) plus its SHA-256 over each member, structured files hashed as OPA
hashes documents; and PyJWT, an implementation independent of both. The same signer type signs
receipts and checkpoints (tests/core/test_pkcs11_signer.py): one Signer for everything that signs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any

import jwt
import pytest
from conftest import DEPLOYMENTS, POLICIES, run_cli
from cryptography.hazmat.primitives import serialization

from kcp_opa.compile.bundle import BundleFile, read_bundle, tarball_bytes
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.compile.signatures import SIGNATURES_NAME, Verification
from kcp_opa.core.errors import BundleSignatureError
from kcp_opa.core.signing import Pkcs11Key, create_pkcs11_ed25519, generate_ed25519

FINANCE = DEPLOYMENTS / "finance"
KID = "bundles-2026"
MODULE = "kcp/controls/evidence.rego"

#: What OPA's bundle reader checks of a signed bundle, written on OPA's Go engine: the JWT verifies
#: under the configured key (OPA's JWT library), names that key, and lists exactly the bundle's
#: files with their SHA-256 (data.json and .manifest hashed as documents: keys sorted, compact).
OPA_RULES = """
package bundlecheck

import rego.v1

parts := io.jwt.decode(input.token)

listed := {f.name: f.hash | some f in parts[1].files; f.algorithm == "SHA-256"}

computed := {name: file_hash(name, content) | some name, content in input.files}

structured(name) if endswith(name, "data.json")

structured(".manifest")

file_hash(name, content) := crypto.sha256(unescaped(json.marshal(json.unmarshal(content)))) if structured(name)

file_hash(name, content) := crypto.sha256(content) if not structured(name)

# OPA's bundle hasher writes strings with SetEscapeHTML(false); json.marshal escapes <, > and &.
unescaped(text) := replace(replace(replace(text, "\\\\u003c", "<"), "\\\\u003e", ">"), "\\\\u0026", "&")

verdict := {
    "signature": io.jwt.verify_eddsa(input.token, input.public_key),
    "kid": parts[0].kid,
    "alg": parts[0].alg,
    "files_match": listed == computed,
}
"""


def _opa_verdict(bundle: Path, public_pem: str) -> dict[str, Any]:
    """OPA's rules on OPA's Go engine (opa-golib-python-bindings) over the bundle's members."""
    from opa_bindings import OpaEngine

    members = _members(bundle)
    token = json.loads(members.pop(SIGNATURES_NAME))["signatures"][0]
    engine = OpaEngine()
    try:
        engine.add_policy("bundlecheck.rego", OPA_RULES)
        files = {name: content.decode("utf-8") for name, content in members.items()}
        result = engine.eval_query(
            "x := data.bundlecheck.verdict", {"token": token, "public_key": public_pem, "files": files}
        )
    finally:
        engine.close()
    assert result, "the OPA rules are undefined"
    verdict: dict[str, Any] = result[0]["x"]
    return verdict


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle, "r:gz") as tar:
        return {i.name: tar.extractfile(i).read() for i in tar if i.isfile()}  # type: ignore[union-attr]


def _repack(path: Path, members: dict[str, bytes]) -> Path:
    path.write_bytes(tarball_bytes([BundleFile(n, c) for n, c in members.items()]))
    return path


def _pem(key: Pkcs11Key) -> str:
    return key.public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


@pytest.fixture(scope="module")
def hsm_key(softhsm_token: Any) -> Pkcs11Key:
    return create_pkcs11_ed25519(softhsm_token.uri(KID))


@pytest.fixture(scope="module")
def signed(hsm_key: Pkcs11Key, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hsm-bundle") / "finance.tar.gz"
    compile_bundle(
        [FINANCE / "knowledge.yaml"],
        FINANCE / "matrix.yaml",
        POLICIES,
        out,
        options=CompileOptions(signing_key=hsm_key),
    )
    return out


def test_a_bundle_signed_in_the_hsm_verifies_by_opas_rules(signed: Path, hsm_key: Pkcs11Key, tmp_path: Path) -> None:
    public = tmp_path / "bundles.pub"
    public.write_text(_pem(hsm_key))
    loaded = read_bundle(signed, verification=Verification.from_specs([f"{KID}={public}"]))
    assert loaded.signer == KID and loaded.signature is not None and loaded.signature.algorithm == "EdDSA"
    assert _opa_verdict(signed, _pem(hsm_key)) == {
        "signature": True,
        "kid": KID,
        "alg": "EdDSA",
        "files_match": True,
    }
    token = json.loads(_members(signed)[SIGNATURES_NAME])["signatures"][0]
    payload = jwt.decode(token, hsm_key.public_key, algorithms=["EdDSA"])
    assert payload["keyid"] == KID and len(payload["files"]) == len(_members(signed)) - 1


def test_a_tampered_hsm_signed_bundle_is_refused(signed: Path, hsm_key: Pkcs11Key, tmp_path: Path) -> None:
    public = tmp_path / "bundles.pub"
    public.write_text(_pem(hsm_key))
    verification = Verification.from_specs([f"{KID}={public}"])
    members = _members(signed)
    edited = _repack(tmp_path / "edited.tar.gz", {**members, MODULE: members[MODULE] + b"\n# allow all\n"})
    with pytest.raises(BundleSignatureError) as caught:
        read_bundle(edited, verification=verification)
    assert caught.value.code == "file_modified"
    assert _opa_verdict(edited, _pem(hsm_key))["files_match"] is False
    # A payload rewritten to list the edited file's hash, under the HSM's old signature.
    header, payload, signature = json.loads(members[SIGNATURES_NAME])["signatures"][0].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    for item in claims["files"]:
        if item["name"] == MODULE:
            item["hash"] = hashlib.sha256(members[MODULE] + b"\n# allow all\n").hexdigest()
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    forged = json.dumps({"signatures": [f"{header}.{forged_payload}.{signature}"]}).encode()
    relisted = _repack(tmp_path / "relisted.tar.gz", {**_members(edited), SIGNATURES_NAME: forged})
    with pytest.raises(BundleSignatureError) as caught:
        read_bundle(relisted, verification=verification)
    assert caught.value.code == "signature_invalid"
    verdict = _opa_verdict(relisted, _pem(hsm_key))
    assert verdict["signature"] is False and verdict["files_match"] is True
    # Another key's public half does not verify the genuine bundle.
    other = generate_ed25519("other").public_key
    assert other is not None
    other_pem = other.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert _opa_verdict(signed, other_pem.decode("ascii"))["signature"] is False


def test_compile_signs_with_a_pkcs11_uri_and_bundle_verify_accepts_it(
    hsm_key: Pkcs11Key, softhsm_token: Any, tmp_path: Path
) -> None:
    """`kcp-opa compile --signing-key pkcs11:...` as other commands take it: the PIN from the
    environment, never argv; a --signing-alg the HSM key cannot sign under is one line, exit 2."""
    public = tmp_path / "bundles.pub"
    public.write_text(_pem(hsm_key))
    out = tmp_path / "cli.tar.gz"
    base = [str(FINANCE / "knowledge.yaml"), "--matrix", str(FINANCE / "matrix.yaml"), "--policies", str(POLICIES)]
    uri = softhsm_token.uri(KID)
    proc = run_cli("compile", *base, "-o", str(out), "--signing-key", uri, "--no-engine-check", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    ok = run_cli("bundle", "verify", str(out), "--verification-key", f"{KID}={public}", "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["signature"] == {"keyid": KID, "algorithm": "EdDSA", "scope": ""}
    wrong = run_cli("compile", *base, "-o", str(tmp_path / "x.tar.gz"), "--signing-key", uri, "--signing-alg", "ES256")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert f"--signing-alg ES256 does not fit key {KID} (it signs EdDSA)" in wrong.stderr
    assert softhsm_token.pin not in proc.stderr + ok.stderr + wrong.stderr
