"""The service's own receipt key when no ``--keyring`` or ``--signing-key`` is given.

It is derived from the store's secret (the one the desk seals its records with, made once per
store), so it lives exactly as long as the store and is protected like it: a restart, or a
replica on the same store, signs and verifies with the same key, and receipts issued before a
restart stay valid. Whoever can read the store can sign receipts, as whoever can write it can
already rewrite consumed receipts; keep the key out of the store with --keyring or an HSM.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kcp_opa.core.keys import Ed25519Key
from kcp_opa.core.signing import Keyring

_INFO = b"kcp-opa service receipt signing key v1"


def store_receipt_keyring(store_secret: bytes) -> Keyring:
    """The Ed25519 receipt keyring derived from ``store_secret`` (HKDF-SHA256, its own label)."""
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(store_secret)
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key()
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    kid = f"kcp-opa-serve-{hashlib.sha256(raw).hexdigest()[:16]}"
    key = Ed25519Key(kid, private_key=private, public_key=public)
    return Keyring({kid: key}, kid)
