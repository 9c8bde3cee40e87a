"""trust.content_integrity (KCP §3.2): a declared manifest hash and detached EdDSA JWS are
verified before a manifest compiles (kcp_opa/declare/integrity.py). Each attack below compiled
a bundle before the check existed: content_integrity was accepted and never read."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from conftest import run_cli
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import ManifestIntegrityError

_MATRIX = Path(__file__).parents[1] / "deployments" / "spec-examples" / "matrix.yaml"
_POLICIES = Path(__file__).parents[2] / "policies"

# The spec's §3.2 example block (verification_url, key_id), on a minimal manifest.
_TEMPLATE = """kcp_version: "0.30"
project: signed-example
version: "1.0.0"
trust:
  content_integrity:
{hash}    signing: {{enabled: true, method: {method}, key_id: "acme-org-2026",
              verification_url: "https://acme.com/.well-known/kcp-signing-key"}}
compliance: {{sensitivity: internal}}
units:
  - id: gerber-output
    path: src/gerber.md
    intent: "How is the Gerber output produced?"
    scope: project
    audience: [agent]
"""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _jws(raw: bytes, key: Ed25519PrivateKey, header: dict[str, object] | None = None) -> str:
    head = _b64url(json.dumps(header or {"alg": "EdDSA", "kid": "acme-org-2026"}).encode())
    signature = key.sign(f"{head}.{_b64url(raw)}".encode("ascii"))
    return f"{head}..{_b64url(signature)}"


def _publish(tmp_path: Path, key: Ed25519PrivateKey, *, hashed: bool = True, method: str = "jws") -> Path:
    """Write the manifest the way a publisher would: hash with an empty value, fill it in, sign."""
    block = '    manifest_hash: {{algorithm: sha256, value: "{}"}}\n' if hashed else ""
    raw = _TEMPLATE.format(hash=block.format(""), method=method).encode()
    if hashed:
        digest = hashlib.sha256(raw).hexdigest()
        raw = _TEMPLATE.format(hash=block.format(digest), method=method).encode()
    path = tmp_path / "knowledge.yaml"
    path.write_bytes(raw)
    (tmp_path / "knowledge.yaml.sig").write_text(_jws(raw, key) + "\n")
    return path


def _pem(tmp_path: Path, key: Ed25519PrivateKey, name: str = "publisher.pem") -> Path:
    out = tmp_path / name
    out.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return out


def _compile(manifest: Path, *keys: Ed25519PrivateKey) -> None:
    public = [k.public_key() for k in keys]
    compile_bundle(
        [manifest], _MATRIX, _POLICIES, manifest.parent / "b.tar.gz", options=CompileOptions(manifest_keys=public)
    )


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def test_signed_manifest_compiles_through_the_cli(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    proc = run_cli(
        "compile", str(manifest), "--matrix", str(_MATRIX), "--manifest-key", str(_pem(tmp_path, key)),
        "-o", str(tmp_path / "b.tar.gz"), "--no-engine-check",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("validate", str(manifest), "--manifest-key", str(_pem(tmp_path, key)))
    assert proc.returncode == 0, proc.stdout
    assert json.loads(proc.stdout)["warnings"] == []


def test_tampered_byte_is_a_compile_error_with_one_line(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    manifest.write_bytes(manifest.read_bytes().replace(b"Gerber output", b"Gerber 0utput"))
    proc = run_cli(
        "compile", str(manifest), "--matrix", str(_MATRIX), "--manifest-key", str(_pem(tmp_path, key)),
        "-o", str(tmp_path / "b.tar.gz"), "--no-engine-check",
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "manifest_hash mismatch" in proc.stderr, proc.stderr
    assert not (tmp_path / "b.tar.gz").exists()


def test_tampered_byte_in_a_comment_is_caught(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    manifest.write_bytes(manifest.read_bytes() + b"# appended\n")
    with pytest.raises(ManifestIntegrityError, match="manifest_hash mismatch"):
        _compile(manifest, key)


def test_tampered_hash_value_is_caught(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    """An attacker who edits the file and recomputes the hash still fails the signature."""
    manifest = _publish(tmp_path, key)
    raw = manifest.read_bytes()
    old = raw.split(b'value: "')[1].split(b'"')[0]
    edited = raw.replace(old, b"").replace(b"Gerber output", b"Gerber 0utput")
    manifest.write_bytes(edited.replace(b'value: ""', b'value: "' + hashlib.sha256(edited).hexdigest().encode() + b'"'))
    with pytest.raises(ManifestIntegrityError, match="does not verify"):
        _compile(manifest, key)


def test_signature_only_manifest_tampered(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key, hashed=False)
    _compile(manifest, key)
    manifest.write_bytes(manifest.read_bytes().replace(b"internal", b"public  "))
    with pytest.raises(ManifestIntegrityError, match="does not verify"):
        _compile(manifest, key)


def test_wrong_key_refused(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    with pytest.raises(ManifestIntegrityError, match="does not verify under any --manifest-key"):
        _compile(manifest, Ed25519PrivateKey.generate())
    _compile(manifest, Ed25519PrivateKey.generate(), key)  # one of several keys is enough


@pytest.mark.parametrize("alg", ["none", "HS256", "RS256", "ES256", "Ed25519", "eddsa"])
def test_algorithm_confusion_refused(tmp_path: Path, key: Ed25519PrivateKey, alg: str) -> None:
    manifest = _publish(tmp_path, key)
    raw = manifest.read_bytes()
    head = _b64url(json.dumps({"alg": alg, "kid": "acme-org-2026"}).encode())
    # HS256 keyed with the public key's bytes: the classic confusion attack; alg none: no signature.
    secret = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    mac = hmac.new(secret, f"{head}.{_b64url(raw)}".encode(), hashlib.sha256).digest()
    for signature in (mac + mac, b"\0" * 64):
        (tmp_path / "knowledge.yaml.sig").write_text(f"{head}..{_b64url(signature)}")
        with pytest.raises(ManifestIntegrityError, match="only EdDSA"):
            _compile(manifest, key)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "not a detached compact JWS"),
        ("abc.def", "not a detached compact JWS"),
        ("{head}.{payload}.{sig}", "not a detached compact JWS"),  # attached payload
        ("{head}..", "not a detached compact JWS"),
        ("{head}..!!!!", "not base64url"),
        ("{head}..{sig}=", "not base64url"),
        ("{head}..AAAA", "not an Ed25519 signature"),
        ("bm90IGpzb24..{sig}", "header is not JSON"),
        ("WzFd..{sig}", "not a JSON object"),
        ("{crit}..{sig}", "crit/b64"),
    ],
)
def test_malformed_jws_refused(tmp_path: Path, key: Ed25519PrivateKey, token: str, message: str) -> None:
    manifest = _publish(tmp_path, key)
    good = (tmp_path / "knowledge.yaml.sig").read_text().strip()
    head, _, sig = good.split(".")
    crit = _b64url(json.dumps({"alg": "EdDSA", "kid": "acme-org-2026", "b64": False, "crit": ["b64"]}).encode())
    text = token.format(head=head, sig=sig, payload=_b64url(manifest.read_bytes()), crit=crit)
    (tmp_path / "knowledge.yaml.sig").write_text(text)
    with pytest.raises(ManifestIntegrityError, match=message):
        _compile(manifest, key)


def test_missing_signature_when_declared(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    (tmp_path / "knowledge.yaml.sig").unlink()
    with pytest.raises(ManifestIntegrityError, match=r"detached JWS .* is missing"):
        _compile(manifest, key)


def test_declared_signature_needs_a_key(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    with pytest.raises(ManifestIntegrityError, match="--manifest-key"):
        _compile(manifest)


def test_kid_must_match_declared_key_id(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    (tmp_path / "knowledge.yaml.sig").write_text(_jws(manifest.read_bytes(), key, {"alg": "EdDSA", "kid": "other"}))
    with pytest.raises(ManifestIntegrityError, match="not the declared key_id"):
        _compile(manifest, key)


def test_http_signature_cannot_be_verified_on_a_file(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key, method="http_signature")
    with pytest.raises(ManifestIntegrityError, match="cannot be verified on a file"):
        _compile(manifest, key)


def test_validate_reports_mismatch_and_unverified_signature(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    proc = run_cli("validate", str(manifest))
    assert proc.returncode == 0, proc.stdout
    assert [w["code"] for w in json.loads(proc.stdout)["warnings"]] == ["signature_unverified"]
    manifest.write_bytes(manifest.read_bytes().replace(b"Gerber output", b"Gerber 0utput"))
    proc = run_cli("validate", str(manifest))
    assert proc.returncode == 1
    assert [e["code"] for e in json.loads(proc.stdout)["errors"]] == ["content_integrity"]


def test_bad_manifest_key_file_is_one_line_exit_1(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    manifest = _publish(tmp_path, key)
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    proc = run_cli("compile", str(manifest), "--matrix", str(_MATRIX), "--manifest-key", str(bad))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not an Ed25519 public key" in proc.stderr


@pytest.mark.parametrize("block", ["true", '"signed"', "[jws]"])
def test_malformed_block_is_refused_not_skipped(tmp_path: Path, block: str) -> None:
    manifest = tmp_path / "knowledge.yaml"
    full = _TEMPLATE.format(hash="", method="jws")
    before, after = full.split("trust:")[0], full.split("compliance:", 1)[1]
    manifest.write_text(f"{before}trust:\n  content_integrity: {block}\ncompliance:{after}")
    with pytest.raises(ManifestIntegrityError, match="must be a mapping"):
        _compile(manifest)
