"""Where keys come from: keyrings (JSON files), environment variables and ``pkcs11:`` URIs.

A keyring maps kids to keys. One kid signs; every kid that is not retired verifies, so a key
rotates without downtime: add the new key, make it the signer, retire the old one once its
receipts have expired. An executor given only Ed25519 public keys can verify but never mint.
Secrets come from the environment or from files, never from argv, and never reach logs. A
keyring entry may name a key held in an HSM (``"pkcs11": "pkcs11:token=...;object=..."``): the
file then holds its public key and the URI, never the private part. The keys themselves are in
``kcp_opa.core.keys`` and ``kcp_opa.core.pkcs11``.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kcp_opa.core import strictjson
from kcp_opa.core.errors import KeyringError
from kcp_opa.core.files import read_regular
from kcp_opa.core.keys import ALGORITHMS, HMAC_SHA256, Ed25519Key, HmacKey, Key
from kcp_opa.core.pkcs11 import PKCS11_SCHEME, Pkcs11Key, open_pkcs11_key


@dataclass(frozen=True)
class Keyring:
    """Keys by kid, and the kid that signs new receipts."""

    keys: Mapping[str, Key]
    signing_kid: str | None = None

    def signer(self) -> Key:
        if self.signing_kid is None or self.signing_kid not in self.keys:
            raise KeyringError("the keyring names no signing key", "no_signing_key")
        key = self.keys[self.signing_kid]
        if key.retired or not key.can_sign:
            raise KeyringError(f"key {key.kid} is retired or holds no private part", "cannot_sign")
        return key

    def verifier(self, kid: str) -> Key | None:
        key = self.keys.get(kid)
        return None if key is None or key.retired else key

    def public(self) -> Keyring:
        """The same keyring with public keys only (HMAC keys, being secrets, are dropped)."""
        keys = {kid: half for kid, key in self.keys.items() if (half := key.public()) is not None}
        return Keyring(keys, None)

    def to_file_dict(self, *, include_private: bool) -> dict[str, Any]:
        """A keyring file: Ed25519 keys inline (base64 raw bytes); HMAC secrets by env var only;
        an HSM key by its ``pkcs11:`` URI (its private part never leaves the token)."""
        entries = []
        for kid, key in sorted(self.keys.items()):
            if key.alg == HMAC_SHA256:
                continue  # secrets never go into files written by us; name them with secret_env
            entry: dict[str, object] = {"kid": kid, "alg": key.alg, "retired": key.retired}
            public = key.public()
            if isinstance(public, Ed25519Key) and public.public_key is not None:
                entry["public_key"] = _b64(
                    public.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
                )
            if include_private and isinstance(key, Ed25519Key) and key.private_key is not None:
                entry["private_key"] = _b64(
                    key.private_key.private_bytes(
                        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
                    )
                )
            if include_private and isinstance(key, Pkcs11Key):
                entry["pkcs11"] = key.uri
            entries.append(entry)
        return {"signing_kid": self.signing_kid if include_private else None, "keys": entries}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise KeyringError(f"{what} is not base64", "malformed_key") from None


def hmac_key_from_env(kid: str, variable: str = "KYA_RECEIPT_SECRET") -> HmacKey:
    """The HMAC secret from an environment variable (UTF-8 bytes, as the KYA reference uses it)."""
    value = os.environ.get(variable)
    if not value:
        raise KeyringError(f"environment variable {variable} is not set (it holds the receipt secret)", "no_secret")
    return HmacKey(kid, value.encode("utf-8"))


def load_keyring(path: str | Path) -> Keyring:
    """Read a keyring file (JSON). HMAC keys name their secret's environment variable (``secret_env``)."""
    try:
        raw = strictjson.loads(read_regular(path))  # a FIFO or device: refused, never waited on
    except OSError as exc:
        raise KeyringError(f"{path}: cannot read keyring: {exc.strerror or exc}", "no_keyring") from None
    except json.JSONDecodeError as exc:
        raise KeyringError(f"{path}: keyring is not JSON ({exc})", "malformed_key") from None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("keys"), list):
        raise KeyringError(f"{path}: a keyring is {{'signing_kid': kid, 'keys': [...]}}", "malformed_key")
    keys: dict[str, Key] = {}
    for entry in raw["keys"]:
        key = _key_from_entry(entry, str(path))
        if key.kid in keys:
            raise KeyringError(f"{path}: kid {key.kid} appears twice", "malformed_key")
        keys[key.kid] = key
    signing = raw.get("signing_kid")
    return Keyring(keys, signing if isinstance(signing, str) else None)


def load_signing_key(spec: str) -> Key:
    """``--signing-key``: a ``pkcs11:`` URI (the key stays in the HSM) or a keyring file (its signer)."""
    if spec.startswith(PKCS11_SCHEME):
        return open_pkcs11_key(spec)
    return load_keyring(spec).signer()


def load_signing_keyring(spec: str) -> Keyring:
    """A keyring whose signer is ``spec`` (a ``pkcs11:`` URI), or the keyring file ``spec`` names."""
    if spec.startswith(PKCS11_SCHEME):
        key = open_pkcs11_key(spec)
        return Keyring({key.kid: key}, key.kid)
    return load_keyring(spec)


def _key_from_entry(entry: object, source: str) -> Key:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("kid"), str) or entry.get("alg") not in ALGORITHMS:
        raise KeyringError(f"{source}: each key needs a kid and alg ({' or '.join(ALGORITHMS)})", "malformed_key")
    kid, retired = entry["kid"], bool(entry.get("retired", False))
    if entry["alg"] == HMAC_SHA256:
        variable = entry.get("secret_env")
        if not isinstance(variable, str):
            raise KeyringError(f"{source}: HMAC key {kid} must name its secret with secret_env", "malformed_key")
        return HmacKey(kid, hmac_key_from_env(kid, variable).secret, retired)
    if isinstance(entry.get("pkcs11"), str):
        held = open_pkcs11_key(entry["pkcs11"], kid=kid, retired=retired)
        listed = entry.get("public_key")
        raw = held.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        if listed is not None and (not isinstance(listed, str) or _unb64(listed, f"{kid} public_key") != raw):
            raise KeyringError(f"{source}: {kid} public_key is not the public key of its pkcs11 key", "malformed_key")
        return held
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
    return Ed25519Key(kid, private_key=private, public_key=public, retired=retired)
