"""Signing, in one import: the protocols and keys (``keys``), HSM keys (``pkcs11``) and where
keys come from (``keyring``: keyring files, environment variables, ``pkcs11:`` URIs).

Kept as the module the rest of the project and its users import from; it defines nothing.
Which module to change for what: docs/architecture.md, "Where to add a signer".
"""

from __future__ import annotations

from kcp_opa.core.keyring import (
    Keyring,
    hmac_key_from_env,
    load_keyring,
    load_signing_key,
    load_signing_keyring,
)
from kcp_opa.core.keys import (
    ALGORITHMS,
    ED25519,
    ED25519_SIGNATURE_BYTES,
    HMAC_SHA256,
    MIN_SECRET_BYTES,
    Ed25519Key,
    HmacKey,
    Key,
    Signer,
    Verifier,
    document_verifies,
    generate_ed25519,
    hmac_key,
    seal,
    seal_holds,
    sign_document,
    signed_bytes,
    strict_b64url,
)
from kcp_opa.core.pkcs11 import PKCS11_SCHEME, Pkcs11Key, Pkcs11Uri, create_pkcs11_ed25519, open_pkcs11_key

__all__ = [
    "ALGORITHMS",
    "ED25519",
    "ED25519_SIGNATURE_BYTES",
    "HMAC_SHA256",
    "MIN_SECRET_BYTES",
    "PKCS11_SCHEME",
    "Ed25519Key",
    "HmacKey",
    "Key",
    "Keyring",
    "Pkcs11Key",
    "Pkcs11Uri",
    "Signer",
    "Verifier",
    "create_pkcs11_ed25519",
    "document_verifies",
    "generate_ed25519",
    "hmac_key",
    "hmac_key_from_env",
    "load_keyring",
    "load_signing_key",
    "load_signing_keyring",
    "open_pkcs11_key",
    "seal",
    "seal_holds",
    "sign_document",
    "signed_bytes",
    "strict_b64url",
]
