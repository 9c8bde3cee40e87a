"""The keys that sign and verify bundles, never key material in argv.

Every :class:`~kcp_opa.core.keys.Signer` signs a bundle whose ``alg`` OPA verifies with a public
key: a PEM file (RSA, EC P-256, Ed25519), an Ed25519 key in an HSM (``pkcs11:`` URI) or in a
keyring, a cloud KMS key behind the same Protocol. A PEM key's id defaults to the public key's
fingerprint, so a signer and a verifier agree on it without configuration; JWS signatures use
the encodings OPA's JWT library expects (ES256 as r||s, deterministic per RFC 6979).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from kcp_opa.core.errors import BundleSignatureError
from kcp_opa.core.keyring import load_keyring
from kcp_opa.core.keys import ED25519, Ed25519Key, Signer, b64url
from kcp_opa.core.pkcs11 import PKCS11_SCHEME, open_pkcs11_key

ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
#: The JWS name of a core signing algorithm that also signs bundles.
JWS_NAMES = {ED25519: "EdDSA"}
_MAX_KEY_BYTES = 64 * 1024

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


def key_fingerprint(key: PublicKey) -> str:
    """A key id derived from the public key: the default when none is given (``kcp-`` + 16 hex)."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "kcp-" + hashlib.sha256(der).hexdigest()[:16]


def read_pem(path: Path, what: str) -> bytes:
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


def algorithms_for(key: PrivateKey | PublicKey) -> tuple[str, ...]:
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return ("RS256", "PS256")
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return ("ES256",) if isinstance(key.curve, ec.SECP256R1) else ()
    return ("EdDSA",)


@dataclass(frozen=True)
class PemSigner:
    """An RSA or EC P-256 private key read from a PEM file: a :class:`~kcp_opa.core.keys.Signer`
    whose ``alg`` is its JWS algorithm (an Ed25519 PEM key loads as the core ``Ed25519Key``)."""

    kid: str
    alg: str
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = field(repr=False)

    def sign(self, message: bytes) -> str:
        key = self.key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256(), deterministic_signing=True)))
            return b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        if self.alg == "PS256":
            pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)
            return b64url(key.sign(message, pss, hashes.SHA256()))
        return b64url(key.sign(message, padding.PKCS1v15(), hashes.SHA256()))


def bundle_algorithm(signer: Signer) -> str:
    """The JWS ``alg`` a signer signs a bundle under; refused when OPA could not verify it with a public key."""
    algorithm = JWS_NAMES.get(signer.alg, signer.alg)
    if algorithm not in ALGORITHMS:
        raise BundleSignatureError(
            f"key {signer.kid} is {signer.alg}, which cannot sign a bundle: use an RS256, PS256, ES256 or "
            "Ed25519 key (OPA verifies a bundle with a public key)",
            "key_invalid",
        )
    return algorithm


def load_pem_signer(path: str | Path, algorithm: str | None = None, key_id: str | None = None) -> Signer:
    """The private key in a PEM file (RSA, EC P-256 or Ed25519), under ``algorithm`` (default: the key's first)."""
    raw = read_pem(Path(path), "signing key")
    try:
        key = serialization.load_pem_private_key(raw, password=None)
    except (ValueError, TypeError) as exc:
        raise BundleSignatureError(f"{path}: not an unencrypted PEM private key ({exc})", "key_invalid") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        raise BundleSignatureError(f"{path}: only RSA, EC P-256 and Ed25519 keys sign bundles", "key_invalid")
    allowed = algorithms_for(key)
    chosen = algorithm or (allowed[0] if allowed else "")
    if chosen not in ALGORITHMS or chosen not in allowed:
        raise BundleSignatureError(
            f"{path}: --signing-alg {chosen or '?'} does not fit this key (it signs {', '.join(allowed) or 'nothing'})",
            "key_invalid",
        )
    kid = key_id or key_fingerprint(key.public_key())
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return Ed25519Key(kid, private_key=key, public_key=key.public_key())
    return PemSigner(kid, chosen, key)


def load_bundle_signer(spec: str, algorithm: str | None = None, key_id: str | None = None) -> Signer:
    """``compile --signing-key``: a ``pkcs11:`` URI (the key stays in the HSM), a PEM private key
    file, or a keyring file (its signing kid), as every other ``--signing-key`` takes one."""
    signer: Signer
    if spec.startswith(PKCS11_SCHEME):
        signer = open_pkcs11_key(spec, kid=key_id)
    elif b"-----BEGIN" in read_pem(Path(spec), "signing key"):
        return load_pem_signer(spec, algorithm, key_id)
    else:
        if key_id is not None:
            raise BundleSignatureError(f"{spec}: a keyring names its own kid; drop --signing-key-id", "key_invalid")
        signer = load_keyring(spec).signer()
    chosen = bundle_algorithm(signer)
    if algorithm is not None and algorithm != chosen:
        raise BundleSignatureError(
            f"--signing-alg {algorithm} does not fit key {signer.kid} (it signs {chosen})", "key_invalid"
        )
    return signer


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
