"""Receipt signing keys: HMAC-SHA256 (KYA-compatible) and Ed25519, looked up by ``kid``.

A keyring maps kids to keys. One kid signs; every kid that is not retired verifies, so a key
rotates without downtime: add the new key, make it the signer, retire the old one once its
receipts have expired. An executor given only Ed25519 public keys can verify but never mint.
Secrets come from the environment or from files, never from argv, and never reach logs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kcp_opa.core import strictjson
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import KeyringError

HMAC_SHA256 = "HMAC-SHA256"
ED25519 = "Ed25519"
ALGORITHMS = (HMAC_SHA256, ED25519)
MIN_SECRET_BYTES = 32
ED25519_SIGNATURE_BYTES = 64
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ReceiptKey:
    """One key. ``secret`` (HMAC) or ``private_key`` (Ed25519) can sign; ``public_key`` only verifies."""

    kid: str
    alg: str
    secret: bytes | None = field(default=None, repr=False)
    private_key: Ed25519PrivateKey | None = field(default=None, repr=False)
    public_key: Ed25519PublicKey | None = None
    retired: bool = False

    @property
    def can_sign(self) -> bool:
        return self.secret is not None or self.private_key is not None

    def sign(self, message: bytes) -> str:
        if self.alg == HMAC_SHA256 and self.secret is not None:
            return hmac.new(self.secret, message, hashlib.sha256).hexdigest()
        if self.alg == ED25519 and self.private_key is not None:
            return base64.urlsafe_b64encode(self.private_key.sign(message)).decode("ascii").rstrip("=")
        raise KeyringError(f"key {self.kid} cannot sign (it holds no secret or private key)", "cannot_sign")

    def verify(self, message: bytes, value: str) -> bool:
        """Constant-time for HMAC; Ed25519 verification is constant-time in the library."""
        if self.alg == HMAC_SHA256 and self.secret is not None:
            expected = hmac.new(self.secret, message, hashlib.sha256).hexdigest()
            if not _HEX64.fullmatch(value):  # lowercase hex of 32 bytes, nothing else
                return False
            return hmac.compare_digest(expected.encode("ascii"), value.encode("ascii"))
        if self.alg == ED25519:
            public = self.public_key or (self.private_key.public_key() if self.private_key else None)
            if public is None:
                return False
            raw = strict_b64url(value)
            if raw is None or len(raw) != ED25519_SIGNATURE_BYTES:
                return False
            try:
                public.verify(raw, message)
            except InvalidSignature:
                return False
            return True
        return False


def signed_bytes(item: Mapping[str, Any]) -> bytes:
    """What an issuer signs: the item with only ``signature.value`` removed (control evidence
    and attested context facts alike, so there is one signature scheme)."""
    body = dict(item)
    signature = body.get("signature")
    if isinstance(signature, Mapping):
        body["signature"] = {k: v for k, v in signature.items() if k != "value"}
    return canonical_json(body)


def strict_b64url(value: str) -> bytes | None:
    """Unpadded base64url, accepted only in its one canonical spelling (the one ``sign`` writes).

    No padding, no whitespace, no other alphabet, no trailing garbage, no non-zero spare bits:
    a signature has exactly one accepted encoding, so it cannot be varied while still verifying.
    """
    if not _B64URL.fullmatch(value):
        return None
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except ValueError:  # binascii.Error: a length no base64 has (4n+1 characters)
        return None
    return raw if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") == value else None


def hmac_key(kid: str, secret: bytes) -> ReceiptKey:
    if len(secret) < MIN_SECRET_BYTES:
        raise KeyringError(
            f"HMAC secret for {kid} is {len(secret)} bytes; at least {MIN_SECRET_BYTES} are required", "weak_secret"
        )
    return ReceiptKey(kid=kid, alg=HMAC_SHA256, secret=secret)


def hmac_key_from_env(kid: str, variable: str = "KYA_RECEIPT_SECRET") -> ReceiptKey:
    """The HMAC secret from an environment variable (UTF-8 bytes, as the KYA reference uses it)."""
    value = os.environ.get(variable)
    if not value:
        raise KeyringError(f"environment variable {variable} is not set (it holds the receipt secret)", "no_secret")
    return hmac_key(kid, value.encode("utf-8"))


def generate_ed25519(kid: str) -> ReceiptKey:
    private = Ed25519PrivateKey.generate()
    return ReceiptKey(kid=kid, alg=ED25519, private_key=private, public_key=private.public_key())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise KeyringError(f"{what} is not base64", "malformed_key") from None


@dataclass(frozen=True)
class Keyring:
    """Keys by kid, and the kid that signs new receipts."""

    keys: Mapping[str, ReceiptKey]
    signing_kid: str | None = None

    def signer(self) -> ReceiptKey:
        if self.signing_kid is None or self.signing_kid not in self.keys:
            raise KeyringError("the keyring names no signing key", "no_signing_key")
        key = self.keys[self.signing_kid]
        if key.retired or not key.can_sign:
            raise KeyringError(f"key {key.kid} is retired or holds no private part", "cannot_sign")
        return key

    def verifier(self, kid: str) -> ReceiptKey | None:
        key = self.keys.get(kid)
        return None if key is None or key.retired else key

    def public(self) -> Keyring:
        """The same keyring with Ed25519 public keys only (HMAC keys, being secrets, are dropped)."""
        keys = {
            kid: ReceiptKey(kid=kid, alg=ED25519, public_key=key.public_key, retired=key.retired)
            for kid, key in self.keys.items()
            if key.alg == ED25519 and key.public_key is not None
        }
        return Keyring(keys, None)

    def to_file_dict(self, *, include_private: bool) -> dict[str, Any]:
        """A keyring file: Ed25519 keys inline (base64 raw bytes); HMAC secrets by env var only."""
        from cryptography.hazmat.primitives import serialization

        entries = []
        for kid, key in sorted(self.keys.items()):
            entry: dict[str, Any] = {"kid": kid, "alg": key.alg, "retired": key.retired}
            if key.alg == ED25519 and key.public_key is not None:
                entry["public_key"] = _b64(
                    key.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
                )
                if include_private and key.private_key is not None:
                    entry["private_key"] = _b64(
                        key.private_key.private_bytes(
                            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
                        )
                    )
            elif key.alg == HMAC_SHA256:
                continue  # secrets never go into files written by us; name them with secret_env
            entries.append(entry)
        return {"signing_kid": self.signing_kid if include_private else None, "keys": entries}


def load_keyring(path: str | Path) -> Keyring:
    """Read a keyring file (JSON). HMAC keys name their secret's environment variable (``secret_env``)."""
    try:
        raw = strictjson.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise KeyringError(f"{path}: cannot read keyring: {exc.strerror or exc}", "no_keyring") from None
    except json.JSONDecodeError as exc:
        raise KeyringError(f"{path}: keyring is not JSON ({exc})", "malformed_key") from None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("keys"), list):
        raise KeyringError(f"{path}: a keyring is {{'signing_kid': kid, 'keys': [...]}}", "malformed_key")
    keys: dict[str, ReceiptKey] = {}
    for entry in raw["keys"]:
        key = _key_from_entry(entry, str(path))
        if key.kid in keys:
            raise KeyringError(f"{path}: kid {key.kid} appears twice", "malformed_key")
        keys[key.kid] = key
    signing = raw.get("signing_kid")
    return Keyring(keys, signing if isinstance(signing, str) else None)


def _key_from_entry(entry: Any, source: str) -> ReceiptKey:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("kid"), str) or entry.get("alg") not in ALGORITHMS:
        raise KeyringError(f"{source}: each key needs a kid and alg ({' or '.join(ALGORITHMS)})", "malformed_key")
    kid, retired = entry["kid"], bool(entry.get("retired", False))
    if entry["alg"] == HMAC_SHA256:
        variable = entry.get("secret_env")
        if not isinstance(variable, str):
            raise KeyringError(f"{source}: HMAC key {kid} must name its secret with secret_env", "malformed_key")
        key = hmac_key_from_env(kid, variable)
        return ReceiptKey(kid=kid, alg=HMAC_SHA256, secret=key.secret, retired=retired)
    private = public = None
    if isinstance(entry.get("private_key"), str):
        try:
            private = Ed25519PrivateKey.from_private_bytes(_unb64(entry["private_key"], f"{kid} private_key"))
        except ValueError:
            raise KeyringError(f"{source}: {kid} private_key is not a raw Ed25519 key", "malformed_key") from None
        public = private.public_key()
    if isinstance(entry.get("public_key"), str):
        try:
            public = Ed25519PublicKey.from_public_bytes(_unb64(entry["public_key"], f"{kid} public_key"))
        except ValueError:
            raise KeyringError(f"{source}: {kid} public_key is not a raw Ed25519 key", "malformed_key") from None
    if public is None:
        raise KeyringError(f"{source}: Ed25519 key {kid} has neither public_key nor private_key", "malformed_key")
    return ReceiptKey(kid=kid, alg=ED25519, private_key=private, public_key=public, retired=retired)
