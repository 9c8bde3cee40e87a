"""What signs and what verifies: the ``Signer`` and ``Verifier`` protocols and the software keys.

Receipts, control attestations, decision documents and ledger checkpoints are all signed the
same way: ``signature {alg, kid, value}`` where ``value`` covers the KYA-CJ-1 canonical JSON of
the document with only ``signature.value`` removed (:func:`signed_bytes`, the one place that
rule is written). Whatever holds the private part (a key in memory, an HSM through PKCS#11, a
cloud KMS) is a :class:`Signer`; whatever checks is a :class:`Verifier`. Keys know nothing of
files or the environment: loading them is ``kcp_opa.core.keyring``'s job.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import KeyringError
from kcp_opa.core.jsonread import JsonDict, JsonObject

HMAC_SHA256 = "HMAC-SHA256"
ED25519 = "Ed25519"
ALGORITHMS = (HMAC_SHA256, ED25519)
MIN_SECRET_BYTES = 32
ED25519_SIGNATURE_BYTES = 64
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Named(Protocol):
    """What a signature names: ``kid`` (looked up in a keyring) and ``alg`` (the wire name)."""

    @property
    def kid(self) -> str: ...

    @property
    def alg(self) -> str: ...


@runtime_checkable
class Verifier(Named, Protocol):
    """Checks a signature value over a message; never raises for a bad signature (False)."""

    def verify(self, message: bytes, value: str) -> bool: ...


@runtime_checkable
class Signer(Named, Protocol):
    """Whatever signs: receipts, attestations, decision documents, ledger entries and checkpoints,
    and bundles (a key in memory, in an HSM through PKCS#11, in a cloud KMS).

    ``sign`` returns the wire value: lowercase hex for HMAC-SHA256, and for every asymmetric
    ``alg`` (Ed25519, or a bundle's ES256 as r||s, RS256, PS256) the unpadded base64url of the raw
    signature, which is also a JWS signature segment, so one signer signs a bundle as OPA reads it.
    """

    def sign(self, message: bytes) -> str: ...


class Key(Signer, Verifier, Protocol):
    """A keyring entry: it verifies, it may sign (``can_sign``), it may be retired."""

    @property
    def retired(self) -> bool: ...

    @property
    def can_sign(self) -> bool: ...

    def public(self) -> Key | None:
        """The same key without its private part, or None when it has no public half (HMAC)."""
        ...

    def retire(self) -> Key:
        """The same key, retired: it stops verifying and signing (rotation)."""
        ...


def signed_bytes(document: JsonObject, at: str = "signature") -> bytes:
    """The bytes a signature covers: the document with only ``<at>.value`` removed."""
    body = dict(document)
    signature = body.get(at)
    if isinstance(signature, Mapping):
        body[at] = {k: v for k, v in signature.items() if k != "value"}
    return canonical_json(body)


def sign_document(document: JsonObject, signer: Signer, at: str = "signature") -> JsonDict:
    """``document`` with ``<at> {alg, kid, value}`` added (``alg`` and ``kid`` are signed too)."""
    stamp = {"alg": signer.alg, "kid": signer.kid}
    signed: JsonDict = {**document, at: stamp}
    stamp["value"] = signer.sign(signed_bytes(signed, at))
    return signed


def document_verifies(document: JsonObject, verifier: Verifier, at: str = "signature") -> bool:
    """True when ``<at>.value`` is ``verifier``'s signature over :func:`signed_bytes`."""
    signature = document.get(at)
    value = signature.get("value") if isinstance(signature, Mapping) else None
    return isinstance(value, str) and verifier.verify(signed_bytes(document, at), value)


def seal(secret: bytes, value: object) -> str:
    """HMAC-SHA256 (hex) over the canonical JSON of ``value``: the seal a gate or a control desk puts
    on what it hands out and checks when it comes back (the secret never leaves the process)."""
    return hmac.new(secret, canonical_json(value), hashlib.sha256).hexdigest()


def seal_holds(secret: bytes, value: object, presented: object) -> bool:
    """Constant-time: ``presented`` is ``value``'s seal (any other type or text, non-ASCII too, is not)."""
    if not isinstance(presented, str):
        return False
    return hmac.compare_digest(presented.encode("utf-8"), seal(secret, value).encode("ascii"))


def b64url(raw: bytes) -> str:
    """Unpadded base64url: how an asymmetric signature, a JWS segment and a content hash travel."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def b64url_decode(text: str) -> bytes:
    """Base64url, padded or not (as JWS readers accept it); ValueError when it is not base64url."""
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def strict_b64url(value: str) -> bytes | None:
    """Unpadded base64url, accepted only in its one canonical spelling (the one ``sign`` writes).

    No padding, no whitespace, no other alphabet, no trailing garbage, no non-zero spare bits:
    a signature has exactly one accepted encoding, so it cannot be varied while still verifying.
    """
    if not _B64URL.fullmatch(value):
        return None
    try:
        raw = b64url_decode(value)
    except ValueError:  # binascii.Error: a length no base64 has (4n+1 characters)
        return None
    return raw if b64url(raw) == value else None


def verify_ed25519(public: Ed25519PublicKey | None, message: bytes, value: str) -> bool:
    """An Ed25519 signature in its one canonical spelling (64 bytes); constant-time in the library."""
    raw = strict_b64url(value)
    if public is None or raw is None or len(raw) != ED25519_SIGNATURE_BYTES:
        return False
    try:
        public.verify(raw, message)
    except InvalidSignature:
        return False
    return True


def cannot_sign(kid: str) -> KeyringError:
    return KeyringError(f"key {kid} cannot sign (it holds no secret or private key)", "cannot_sign")


@dataclass(frozen=True)
class HmacKey:
    """HMAC-SHA256 (the KYA reference): the same secret signs and verifies, so it never leaves the gate."""

    kid: str
    secret: bytes = field(repr=False)
    retired: bool = False
    alg: ClassVar[str] = HMAC_SHA256
    #: An HMAC key has no asymmetric half; read as None so a keyring entry needs no isinstance.
    private_key: ClassVar[None] = None
    public_key: ClassVar[None] = None

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise KeyringError(
                f"HMAC secret for {self.kid} is {len(self.secret)} bytes; at least {MIN_SECRET_BYTES} are required",
                "weak_secret",
            )

    @property
    def can_sign(self) -> bool:
        return True

    def sign(self, message: bytes) -> str:
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def verify(self, message: bytes, value: str) -> bool:
        """Constant-time; only lowercase hex of 32 bytes is a signature."""
        if not _HEX64.fullmatch(value):
            return False
        return hmac.compare_digest(self.sign(message).encode("ascii"), value.encode("ascii"))

    def public(self) -> Key | None:
        return None

    def retire(self) -> Key:
        return dataclasses.replace(self, retired=True)


@dataclass(frozen=True)
class Ed25519Key:
    """Ed25519 in memory: with ``private_key`` it signs; with only ``public_key`` it verifies."""

    kid: str
    private_key: Ed25519PrivateKey | None = field(default=None, repr=False)
    public_key: Ed25519PublicKey | None = None
    retired: bool = False
    alg: ClassVar[str] = ED25519
    secret: ClassVar[None] = None

    @property
    def can_sign(self) -> bool:
        return self.private_key is not None

    def sign(self, message: bytes) -> str:
        if self.private_key is None:
            raise cannot_sign(self.kid)
        return b64url(self.private_key.sign(message))

    def verify(self, message: bytes, value: str) -> bool:
        public = self.public_key or (self.private_key.public_key() if self.private_key else None)
        return verify_ed25519(public, message, value)

    def public(self) -> Key | None:
        if self.public_key is None:
            return None
        return Ed25519Key(self.kid, public_key=self.public_key, retired=self.retired)

    def retire(self) -> Key:
        return dataclasses.replace(self, retired=True)


def hmac_key(kid: str, secret: bytes) -> HmacKey:
    return HmacKey(kid, secret)


def generate_ed25519(kid: str) -> Ed25519Key:
    private = Ed25519PrivateKey.generate()
    return Ed25519Key(kid, private_key=private, public_key=private.public_key())
