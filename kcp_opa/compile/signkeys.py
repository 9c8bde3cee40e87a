"""The keys that sign and verify bundles: PEM files (RSA, EC P-256, Ed25519), never key material in argv.

A key id defaults to the public key's fingerprint, so a signer and a verifier agree on it
without configuration; JWS signatures use the encodings OPA's JWT library expects (ES256 as
r||s, deterministic per RFC 6979).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from kcp_opa.core.errors import BundleSignatureError

ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
_MAX_KEY_BYTES = 64 * 1024

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


def key_fingerprint(key: PublicKey) -> str:
    """A key id derived from the public key: the default when none is given (``kcp-`` + 16 hex)."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "kcp-" + hashlib.sha256(der).hexdigest()[:16]


def _read_pem(path: Path, what: str) -> bytes:
    if "-----BEGIN" in str(path) or "\n" in str(path):
        raise BundleSignatureError(f"the {what} is given by its file path, never its contents", "key_in_argv")
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise BundleSignatureError(f"{path}: cannot read the {what}: {exc.strerror or exc}", "key_unreadable") from None
    if len(raw) > _MAX_KEY_BYTES:
        raise BundleSignatureError(f"{path}: the {what} is larger than 64 KiB", "key_unreadable")
    return raw


def _algorithms_for(key: PrivateKey | PublicKey) -> tuple[str, ...]:
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return ("RS256", "PS256")
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return ("ES256",) if isinstance(key.curve, ec.SECP256R1) else ()
    return ("EdDSA",)


@dataclass(frozen=True)
class SigningKey:
    """A private key read from a PEM file, with the algorithm and key id it signs under."""

    key: PrivateKey = field(repr=False)
    algorithm: str
    key_id: str

    @classmethod
    def load(cls, path: str | Path, algorithm: str | None = None, key_id: str | None = None) -> SigningKey:
        raw = _read_pem(Path(path), "signing key")
        try:
            key = serialization.load_pem_private_key(raw, password=None)
        except (ValueError, TypeError) as exc:
            raise BundleSignatureError(f"{path}: not an unencrypted PEM private key ({exc})", "key_invalid") from None
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise BundleSignatureError(f"{path}: only RSA, EC P-256 and Ed25519 keys sign bundles", "key_invalid")
        allowed = _algorithms_for(key)
        chosen = algorithm or (allowed[0] if allowed else "")
        if chosen not in ALGORITHMS or chosen not in allowed:
            raise BundleSignatureError(
                f"{path}: --signing-alg {chosen or '?'} does not fit this key "
                f"(it signs {', '.join(allowed) or 'nothing'})",
                "key_invalid",
            )
        return cls(key, chosen, key_id or key_fingerprint(key.public_key()))

    def sign(self, message: bytes) -> bytes:
        key = self.key
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key.sign(message)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256(), deterministic_signing=True)))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
        if self.algorithm == "PS256":
            pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)
            return key.sign(message, pss, hashes.SHA256())
        return key.sign(message, padding.PKCS1v15(), hashes.SHA256())


@dataclass(frozen=True)
class VerificationKey:
    key_id: str
    key: PublicKey = field(repr=False)

    @classmethod
    def load(cls, spec: str) -> VerificationKey:
        """``PATH`` or ``KEYID=PATH`` (a PEM public key); without KEYID the id is the key's fingerprint."""
        key_id, sep, path = spec.partition("=")
        if not sep:
            key_id, path = "", spec
        raw = _read_pem(Path(path), "verification key")
        try:
            key = serialization.load_pem_public_key(raw)
        except (ValueError, TypeError) as exc:
            raise BundleSignatureError(f"{path}: not a PEM public key ({exc})", "key_invalid") from None
        if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey):
            raise BundleSignatureError(f"{path}: only RSA, EC P-256 and Ed25519 keys verify bundles", "key_invalid")
        return cls(key_id or key_fingerprint(key), key)

    def verify(self, algorithm: str, message: bytes, signature: bytes) -> bool:
        key = self.key
        if algorithm not in _algorithms_for(key):
            return False
        try:
            if isinstance(key, ed25519.Ed25519PublicKey):
                key.verify(signature, message)
            elif isinstance(key, ec.EllipticCurvePublicKey):
                if len(signature) != 64:
                    return False
                der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
                key.verify(der, message, ec.ECDSA(hashes.SHA256()))
            elif algorithm == "PS256":
                pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.AUTO)
                key.verify(signature, message, pss, hashes.SHA256())
            else:
                key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return False
        return True


def generate_signing_key(path: str | Path, algorithm: str = "EdDSA") -> str:
    """A new private key at ``path`` (PEM, 0600, never overwriting) and its public key at ``path``.pub; its key id."""
    private: PrivateKey
    if algorithm == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    target = Path(path)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise BundleSignatureError(
            f"{target}: cannot create the key: {exc.strerror or exc}", "key_unreadable"
        ) from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    Path(f"{target}.pub").write_bytes(public)
    return key_fingerprint(private.public_key())
