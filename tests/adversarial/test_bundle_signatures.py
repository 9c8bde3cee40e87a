"""Bundle signatures in OPA's format: known answers from OPA's own tests, an independent JWT
implementation (PyJWT) on both sides, and every refusal OPA's reader makes, each with its own
code and message."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import jwt
import pytest
from conftest import DEPLOYMENTS, POLICIES, run_cli
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from kcp_opa.compile.bundle import BundleFile, read_bundle, tarball_bytes
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.compile.signatures import (
    SIGNATURES_NAME,
    Verification,
    VerificationKey,
    file_hash,
    signatures_file,
    verify_members,
)
from kcp_opa.compile.signkeys import load_bundle_signer, load_pem_signer
from kcp_opa.core.errors import BundleSignatureError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

FINANCE = DEPLOYMENTS / "finance"
PYJWT_ALG = {"RS256": "RS256", "PS256": "PS256", "ES256": "ES256", "EdDSA": "EdDSA"}

# OPA v1/bundle bundle_test.go (TestReadWithSignaturesWithBaseDir): a token OPA verifies with
# HS256 key "secret", scope "write", over these three files under base dir /foo/bar.
OPA_TOKEN = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImZvbyJ9.eyJmaWxlcyI6W3sibmFtZSI6ImZvby9iYXIvLm1hbmlmZXN0Iiwia"
    "GFzaCI6IjUwN2EyYzM4YTE0NDFkYjU4ZDJjYjg3OTgyYzQyYWE5MWE0MzQyZWY0MjJhNmI1NDJlZGRlYmVlZjZmMDQxMmYiLCJhbGdvcml"
    "0aG0iOiJTSEEtMjU2In0seyJuYW1lIjoiZm9vL2Jhci9hL2IvYy9kYXRhLmpzb24iLCJoYXNoIjoiYTYxNWVlYWVlMjFkZTUxNzlkZTA4M"
    "GRlOGMzMDUyYzhkYTkwMTEzODQwNmJhNzFjMzhjMDMyODQ1ZjdkNTRmNCIsImFsZ29yaXRobSI6IlNIQS0yNTYifSx7Im5hbWUiOiJmb28"
    "vYmFyL2h0dHAvcG9saWN5L3BvbGljeS5yZWdvIiwiaGFzaCI6ImY2NjQ0NjFlMzAzYjM3YzIwYzVlMGJlMjkwMDg4MTY3OGNkZjhlODYwY"
    "WE0MzNhNWExNGQ0OTRiYTNjNjY2NDkiLCJhbGdvcml0aG0iOiJTSEEtMjU2In1dLCJpYXQiOjE1OTIyNDgwMjcsImlzcyI6IkpXVFNlcnZ"
    "pY2UiLCJzY29wZSI6IndyaXRlIn0.qTHkuBDVuT-Zl5pbJdZ6LoJ9eooFOhhpRdCheauDrlA"
)
OPA_FILES = {
    "foo/bar/.manifest": b'{"revision": "quickbrownfaux"}',
    "foo/bar/a/b/c/data.json": b"[1,2,3]",
    "foo/bar/http/policy/policy.rego": b"package example",
}


def _keys(tmp: Path, kind: str) -> tuple[Path, Path]:
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
    if kind == "rsa":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif kind == "ec":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = ed25519.Ed25519PrivateKey.generate()
    key_path, pub_path = tmp / f"{kind}.pem", tmp / f"{kind}.pub"
    key_path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pub_path.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return key_path, pub_path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("keys")
    return {kind: _keys(tmp, kind) for kind in ("rsa", "ec", "ed", "other")}


def _compile(out: Path, key: Path | None, alg: str | None = None, scope: str = "") -> Path:
    signer = load_pem_signer(key, alg) if key is not None else None
    compile_bundle(
        [FINANCE / "knowledge.yaml"],
        FINANCE / "matrix.yaml",
        POLICIES,
        out,
        options=CompileOptions(signing_key=signer, scope=scope),
    )
    return out


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle, "r:gz") as tar:
        return {i.name: tar.extractfile(i).read() for i in tar if i.isfile()}  # type: ignore[union-attr]


def _repack(path: Path, members: dict[str, bytes]) -> Path:
    path.write_bytes(tarball_bytes([BundleFile(n, c) for n, c in members.items()]))
    return path


def _token(bundle: Path) -> str:
    token = json.loads(_members(bundle)[SIGNATURES_NAME])["signatures"]
    assert isinstance(token, list) and len(token) == 1
    return str(token[0])


def test_file_hashes_match_opas_known_answers() -> None:
    """The three hashes OPA's own test signs (structured .manifest and data.json, raw Rego)."""
    assert file_hash("foo/bar/.manifest", OPA_FILES["foo/bar/.manifest"]) == (
        "507a2c38a1441db58d2cb87982c42aa91a4342ef422a6b542eddebeef6f0412f"
    )
    assert file_hash("a/b/c/data.json", b"[1,2,3]") == (
        "a615eeaee21de5179de080de8c3052c8da901138406ba71c38c032845f7d54f4"
    )
    assert file_hash("x/policy.rego", b"package example") == hashlib.sha256(b"package example").hexdigest()
    # Whitespace and key order do not change a structured hash; numbers hash as written.
    assert file_hash("data.json", b'{ "b": 1, "a": [1, 2.50] }') == file_hash("data.json", b'{"a":[1,2.50],"b":1}')
    assert file_hash("data.json", b"[2.50]") != file_hash("data.json", b"[2.5]")


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_opas_own_signed_token_lists_the_hashes_this_hasher_computes() -> None:
    """A token signed by OPA's test suite: PyJWT checks its HS256 signature, our hasher its files."""
    payload = jwt.decode(OPA_TOKEN, "secret", algorithms=["HS256"], options={"verify_aud": False})
    assert payload["scope"] == "write"
    listed = {f["name"]: f["hash"] for f in payload["files"]}
    assert listed == {name: file_hash(name, content) for name, content in OPA_FILES.items()}


@pytest.mark.parametrize(("kind", "alg"), [("rsa", "RS256"), ("rsa", "PS256"), ("ec", "ES256"), ("ed", "EdDSA")])
def test_signed_bundle_verifies_here_and_under_pyjwt(
    tmp_path: Path, keys: dict[str, tuple[Path, Path]], kind: str, alg: str
) -> None:
    key, pub = keys[kind]
    bundle = _compile(tmp_path / "b.tar.gz", key, alg, scope="prod")
    public = serialization.load_pem_public_key(pub.read_bytes())
    token = _token(bundle)
    payload = jwt.decode(token, public, algorithms=[PYJWT_ALG[alg]])  # type: ignore[arg-type]
    header = jwt.get_unverified_header(token)
    assert header["alg"] == alg and header["kid"] == payload["keyid"] == load_pem_signer(key, alg).kid
    assert payload["scope"] == "prod"
    members = _members(bundle)
    # Every member but the signature itself is listed, hashed by an implementation independent of
    # ours (sha256 of the bytes; of the re-serialized JSON for structured files).
    expected = {}
    for name, content in members.items():
        if name == SIGNATURES_NAME:
            continue
        if name.endswith("data.json") or name == ".manifest":
            content = json.dumps(
                json.loads(content), sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()
        expected[name] = hashlib.sha256(content).hexdigest()
    assert {f["name"]: f["hash"] for f in payload["files"]} == expected
    assert {f["algorithm"] for f in payload["files"]} == {"SHA-256"}
    loaded = read_bundle(bundle, verification=Verification.from_specs([str(pub)], "prod"))
    assert loaded.signer == header["kid"]
    if alg != "PS256":  # PSS salts each signature; the others are deterministic (RFC 6979 for ES256)
        assert _compile(tmp_path / "again.tar.gz", key, alg, scope="prod").read_bytes() == bundle.read_bytes()


def test_a_bundle_signed_by_pyjwt_in_opas_documented_format_verifies(
    tmp_path: Path, keys: dict[str, tuple[Path, Path]]
) -> None:
    """Hand-built as OPA documents it (no kcp-opa signing code): a JWT from PyJWT over the file list."""
    unsigned = _members(_compile(tmp_path / "u.tar.gz", None))
    files = []
    for name, content in sorted(unsigned.items()):
        canonical = content
        if name.endswith("data.json") or name == ".manifest":
            canonical = json.dumps(
                json.loads(content), sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()
        files.append({"name": name, "hash": hashlib.sha256(canonical).hexdigest(), "algorithm": "SHA-256"})
    private = serialization.load_pem_private_key(keys["rsa"][0].read_bytes(), password=None)
    token = jwt.encode({"files": files, "keyid": "ci"}, private, algorithm="RS256", headers={"kid": "ci"})  # type: ignore[arg-type]
    signed = _repack(tmp_path / "s.tar.gz", {**unsigned, SIGNATURES_NAME: json.dumps({"signatures": [token]}).encode()})
    loaded = read_bundle(signed, verification=Verification.from_specs([f"ci={keys['rsa'][1]}"]))
    assert loaded.signer == "ci"


def _refusal(path: Path, verification: Verification | None) -> BundleSignatureError:
    with pytest.raises(BundleSignatureError) as caught:
        read_bundle(path, verification=verification)
    assert "\n" not in str(caught.value)
    return caught.value


def test_every_refusal_has_its_own_code_and_message(tmp_path: Path, keys: dict[str, tuple[Path, Path]]) -> None:
    key, pub = keys["rsa"]
    good = Verification.from_specs([str(pub)])
    signed = _compile(tmp_path / "signed.tar.gz", key)
    members = _members(signed)
    module = "kcp/controls/evidence.rego"
    kid, other = load_pem_signer(key).kid, str(keys["other"][1])
    cases: dict[str, tuple[Path, Verification | None]] = {
        "file_modified": (
            _repack(tmp_path / "t.tar.gz", {**members, module: members[module] + b"\n# edited\n"}),
            good,
        ),
        "file_added": (_repack(tmp_path / "a.tar.gz", {**members, "kcp/extra.rego": b"package kcp.extra\n"}), good),
        "file_removed": (
            _repack(tmp_path / "r.tar.gz", {n: c for n, c in members.items() if n != module}),
            good,
        ),
        "unknown_key": (signed, Verification.from_specs([str(keys["other"][1])])),
        "signature_invalid": (signed, Verification({kid: VerificationKey(kid, VerificationKey.load(other).key)})),
        "scope_mismatch": (signed, Verification.from_specs([str(pub)], "prod")),
        "unsigned": (_compile(tmp_path / "plain.tar.gz", None), good),
        "key_not_configured": (signed, None),
    }
    messages = {}
    for code, (path, verification) in cases.items():
        refusal = _refusal(path, verification)
        assert refusal.code == code, (code, str(refusal))
        messages[code] = str(refusal).split(": ", 1)[1]
    assert len(set(messages.values())) == len(messages), messages
    assert read_bundle(signed, verification=good).signer == load_pem_signer(key).kid


def test_gate_from_bundle_verifies_and_decisions_name_the_signer(
    tmp_path: Path, keys: dict[str, tuple[Path, Path]]
) -> None:
    key, pub = keys["ed"]
    bundle = _compile(tmp_path / "b.tar.gz", key)
    with pytest.raises(BundleSignatureError, match="no verification key"):
        Gate.from_bundle(bundle)
    gate = Gate.from_bundle(bundle, config=GateConfig(verification=Verification.from_specs([str(pub)])))
    action = json.loads((DEPLOYMENTS.parent / "kya-supplier-payment-action.json").read_text())
    decision = gate.decide(action, now="2026-11-29T10:00:00Z").to_dict()
    assert decision["bundle_sha256"] == hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert decision["bundle_signer"] == load_pem_signer(key).kid
    assert gate.status()["bundle"]["verified"] is True


def test_cli_signs_verifies_and_never_takes_key_material(tmp_path: Path, keys: dict[str, tuple[Path, Path]]) -> None:
    key, pub = keys["ec"]
    out = tmp_path / "cli.tar.gz"
    base = [str(FINANCE / "knowledge.yaml"), "--matrix", str(FINANCE / "matrix.yaml"), "--policies", str(POLICIES)]
    proc = run_cli("compile", *base, "-o", str(out), "--signing-key", str(key), "--scope", "prod", "--no-engine-check")
    assert proc.returncode == 0, proc.stderr
    ok = run_cli("bundle", "verify", str(out), "--verification-key", str(pub), "--verification-scope", "prod")
    assert ok.returncode == 0 and json.loads(ok.stdout)["signature"]["keyid"].startswith("kcp-"), ok.stderr
    for args, expected in [
        ((), "no verification key is configured"),
        (("--verification-key", str(pub)), "scope mismatch"),
        (
            ("--verification-key", str(keys["other"][1]), "--verification-scope", "prod"),
            "not a configured verification key",
        ),
    ]:
        refused = run_cli("bundle", "verify", str(out), *args)
        assert refused.returncode == 2 and expected in refused.stderr and refused.stderr.count("\n") == 1, (
            refused.stderr
        )
    inspected = run_cli(
        "inspect", str(out), "--verification-key", str(pub), "--verification-scope", "prod", "--format", "json"
    )
    assert json.loads(inspected.stdout)["signature"]["algorithm"] == "ES256"
    # A key's contents in place of its path is refused as an unreadable file, never parsed from argv.
    pem = key.read_text()
    bad = run_cli("compile", *base, "-o", str(tmp_path / "x.tar.gz"), "--signing-key", pem)
    assert bad.returncode == 2 and "BEGIN" not in bad.stderr


def test_one_signer_type_signs_bundles_and_an_hmac_secret_never_does(
    tmp_path: Path, keys: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle is signed by any core Signer whose algorithm a public key verifies: the same Ed25519
    key from a PEM file or from a keyring file writes the same bytes; an HMAC secret is refused."""
    pem, pub = keys["ed"]
    from_pem = load_pem_signer(pem, key_id="ed-1")
    ring = tmp_path / "ring.json"
    ring.write_text(json.dumps(Keyring({"ed-1": from_pem}, "ed-1").to_file_dict(include_private=True)))  # type: ignore[dict-item]
    from_ring = load_bundle_signer(str(ring))
    files = [("kcp/x.rego", b"package kcp.x\n"), ("data.json", b'{"a": 1}')]
    signed = signatures_file(files, from_ring)
    assert signed == signatures_file(files, from_pem)
    members = {**dict(files), SIGNATURES_NAME: signed}
    verified = verify_members(members, Verification.from_specs([f"ed-1={pub}"]), "b.tar.gz")
    assert verified is not None and (verified.key_id, verified.algorithm) == ("ed-1", "EdDSA")
    monkeypatch.setenv("BUNDLE_HMAC", "s" * 32)
    hmac_ring = tmp_path / "hmac.json"
    hmac_ring.write_text(
        json.dumps({"signing_kid": "h", "keys": [{"kid": "h", "alg": "HMAC-SHA256", "secret_env": "BUNDLE_HMAC"}]})
    )
    for refused in (
        lambda: load_bundle_signer(str(hmac_ring)),
        lambda: signatures_file(files, hmac_key("h", b"s" * 32)),
    ):
        with pytest.raises(BundleSignatureError) as caught:
            refused()
        assert caught.value.code == "key_invalid" and "cannot sign a bundle" in str(caught.value)
    with pytest.raises(BundleSignatureError, match="a keyring names its own kid"):
        load_bundle_signer(str(ring), key_id="other")
