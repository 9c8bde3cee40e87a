"""``trust.content_integrity`` (KCP §3.2): a declared manifest hash and detached JWS, checked
before a manifest compiles, so a bundle is never built from a manifest its publisher did not sign.

The spec does not define the "canonical manifest bytes" nor where the detached JWS lives
(docs/kcp-spec-digest.md, "Where the spec leaves a choice"); kcp-opa's rules (docs/manifest-rules.md,
"Content integrity"):

- ``manifest_hash``: the digest of the manifest file's raw bytes with the declared hex ``value``
  removed (the publisher hashes the file with ``value: ""`` and then fills the value in). The
  value must appear exactly once in the file.
- ``signing`` (``enabled: true``, ``method: jws``): a detached compact JWS (RFC 7515 App. F:
  ``header..signature``) in the sibling file ``<manifest>.sig`` (the KCP tooling's convention),
  over the manifest file's raw bytes as the payload. Only ``alg: EdDSA`` (Ed25519, the spec's
  mandatory algorithm) is accepted: ``none``, HMAC and every other algorithm are refused, so no
  algorithm confusion can turn a public key into a shared secret. A declared ``key_id`` must be
  the header's ``kid``. The verification key comes from the consumer (``--manifest-key``), never
  from the manifest or its ``verification_url``: a key fetched from where the manifest points
  proves nothing about who published it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from kcp_opa.core.errors import ManifestIntegrityError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.keys import b64url, b64url_decode

HASHES = {"sha256": 64, "sha384": 96, "sha512": 128}
SIGNATURE_SUFFIX = ".sig"
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_HEX = re.compile(r"[0-9a-fA-F]+")
_MAX_SIG_BYTES = 16384


def declared(data: JsonObject) -> object:
    """The manifest's content_integrity value as written, or None when it declares none."""
    trust = data.get("trust")
    return trust.get("content_integrity") if isinstance(trust, Mapping) else None


def verify_manifest(path: Path, raw: bytes, data: JsonObject, keys: Sequence[Ed25519PublicKey] | None) -> list[str]:
    """Check what the manifest declares; return what was verified. ``keys=None`` (validate without
    a key) checks the signature's form only and says so; an empty sequence refuses a signature.

    Keys given pin the publisher: the manifest must then carry a signature that verifies under one
    of them. A manifest whose ``content_integrity`` was deleted, nulled or set to ``enabled:
    false`` is refused, never compiled unsigned: whoever can edit the file can edit that block.
    ``enabled`` must be a YAML boolean: ``yes``, ``"true"`` or ``1`` are refused, not skipped.
    """
    file = str(path)
    pinned = bool(keys)
    block = declared(data)
    if block is None:
        if pinned:
            raise ManifestIntegrityError(f"{file}: {_PINNED} but it declares no trust.content_integrity")
        return []
    if not isinstance(block, Mapping):
        # Declared but unreadable: refused, never skipped as if nothing were declared.
        raise ManifestIntegrityError(f"{file}: trust.content_integrity must be a mapping")
    done: list[str] = []
    if "manifest_hash" in block:
        done.append(_check_hash(file, raw, block["manifest_hash"]))
    signing = block.get("signing")
    if signing is not None and not isinstance(signing, Mapping):
        raise ManifestIntegrityError(f"{file}: trust.content_integrity.signing must be a mapping")
    enabled = signing.get("enabled", False) if isinstance(signing, Mapping) else False
    if not isinstance(enabled, bool):
        raise ManifestIntegrityError(
            f"{file}: trust.content_integrity.signing.enabled must be true or false (a YAML boolean), "
            f"not {enabled!r}: a value that is no boolean is refused, never read as 'not enabled'"
        )
    if enabled and isinstance(signing, Mapping):
        done.append(_check_signature(path, raw, signing, keys))
    elif pinned:
        raise ManifestIntegrityError(f"{file}: {_PINNED} but its signing is not enabled")
    return done


_PINNED = "--manifest-key was given, so the manifest must carry a signature that verifies under it,"


def _check_hash(file: str, raw: bytes, spec: object) -> str:
    if not isinstance(spec, Mapping):
        raise ManifestIntegrityError(f"{file}: manifest_hash must be a mapping with algorithm and value")
    algorithm, value = spec.get("algorithm"), spec.get("value")
    if not isinstance(algorithm, str) or algorithm not in HASHES:
        raise ManifestIntegrityError(f"{file}: manifest_hash.algorithm {algorithm!r} is not sha256, sha384 or sha512")
    if not isinstance(value, str) or len(value) != HASHES[algorithm] or not _HEX.fullmatch(value):
        raise ManifestIntegrityError(f"{file}: manifest_hash.value is not a {algorithm} hex digest")
    needle = value.encode("ascii")
    if raw.count(needle) != 1:
        raise ManifestIntegrityError(f"{file}: manifest_hash.value must appear exactly once in the file")
    actual = hashlib.new(algorithm, raw.replace(needle, b"", 1)).hexdigest()
    if not hmac.compare_digest(actual, value.lower()):
        raise ManifestIntegrityError(f"{file}: manifest_hash mismatch: the file is not the one its publisher hashed")
    return f"manifest_hash {algorithm} verified"


def _check_signature(path: Path, raw: bytes, signing: JsonObject, keys: Sequence[Ed25519PublicKey] | None) -> str:
    file = str(path)
    if signing.get("method") != "jws":
        raise ManifestIntegrityError(
            f"{file}: signing method {signing.get('method')!r} cannot be verified on a file (kcp-opa verifies jws)"
        )
    sig_path = path.with_name(path.name + SIGNATURE_SUFFIX)
    try:
        with sig_path.open("rb") as handle:
            token = handle.read(_MAX_SIG_BYTES + 1)
    except OSError:
        raise ManifestIntegrityError(f"{file}: signing is enabled but the detached JWS {sig_path} is missing") from None
    header_b64, signature = _parse_detached(file, token)
    header = _header(file, header_b64)
    key_id = signing.get("key_id")
    if isinstance(key_id, str) and header.get("kid") != key_id:
        raise ManifestIntegrityError(f"{file}: the JWS kid {header.get('kid')!r} is not the declared key_id {key_id!r}")
    if keys is None:
        return "signature well-formed, not verified (no --manifest-key)"
    if not keys:
        raise ManifestIntegrityError(f"{file}: signing is enabled; give the publisher's key with --manifest-key")
    signing_input = header_b64 + b"." + b64url(raw).encode("ascii")
    for key in keys:
        try:
            key.verify(signature, signing_input)
        except InvalidSignature:
            continue
        return "signature EdDSA verified"
    raise ManifestIntegrityError(f"{file}: the manifest signature does not verify under any --manifest-key")


def _parse_detached(file: str, token: bytes) -> tuple[bytes, bytes]:
    if len(token) > _MAX_SIG_BYTES:
        raise ManifestIntegrityError(f"{file}: the JWS is larger than {_MAX_SIG_BYTES} bytes")
    parts = token.strip().split(b".")
    if len(parts) != 3 or parts[1] != b"" or not parts[0] or not parts[2]:
        raise ManifestIntegrityError(f"{file}: the .sig is not a detached compact JWS (header..signature)")
    signature = _b64url_decode(file, parts[2], "signature")
    if len(signature) != 64:
        raise ManifestIntegrityError(f"{file}: the JWS signature is not an Ed25519 signature (64 bytes)")
    return parts[0], signature


def _header(file: str, header_b64: bytes) -> JsonObject:
    try:
        header = json.loads(_b64url_decode(file, header_b64, "header").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ManifestIntegrityError(f"{file}: the JWS header is not JSON") from None
    if not isinstance(header, dict):
        raise ManifestIntegrityError(f"{file}: the JWS header is not a JSON object")
    if header.get("alg") != "EdDSA":
        raise ManifestIntegrityError(f"{file}: JWS alg {header.get('alg')!r} refused: only EdDSA (Ed25519) is accepted")
    if "crit" in header or "b64" in header:
        raise ManifestIntegrityError(f"{file}: the JWS header has crit/b64 extensions kcp-opa does not process")
    return header


def _b64url_decode(file: str, text: bytes, what: str) -> bytes:
    """Unpadded base64url only (the compact JWS spelling)."""
    spelled = text.decode("ascii", "replace")
    if _B64URL.fullmatch(spelled):
        try:
            return b64url_decode(spelled)
        except ValueError:  # a length no base64 has (4n+1 characters)
            pass
    raise ManifestIntegrityError(f"{file}: the JWS {what} is not base64url")


def load_manifest_key(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (``openssl pkey -pubout``) or one line of raw base64."""
    try:
        content = path.read_bytes()[:_MAX_SIG_BYTES]
    except OSError as exc:
        raise ManifestIntegrityError(f"--manifest-key {path}: cannot read: {exc.strerror or exc}") from None
    try:
        if b"-----BEGIN" in content:
            key = load_pem_public_key(content)
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(content.strip(), validate=True))
    except (ValueError, TypeError, binascii.Error):
        raise ManifestIntegrityError(f"--manifest-key {path}: not an Ed25519 public key (PEM or base64)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ManifestIntegrityError(f"--manifest-key {path}: not an Ed25519 public key (PEM or base64)")
    return key
