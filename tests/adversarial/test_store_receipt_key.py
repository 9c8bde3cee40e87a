"""The service's store-derived receipt key (no --keyring): an attacker cannot mint receipts
another store would honour, nor get the key from what a store shows.

A receipt signed under one store's key must not verify under another store's (a restored or
copied database is a different key only if its secret differs); the key must not be the seal key
itself (the desk seals records with it as an HMAC secret) and must not be guessable from the pid
or the time, as the per-start key it replaces was named.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from kcp_opa.service.receiptkey import store_receipt_keyring
from kcp_opa.stores.opening import open_stores


def test_one_store_one_key_across_opens_and_another_store_another_key(tmp_path: Path) -> None:
    first = open_stores(tmp_path / "a.db").decisions.seal_key()
    again = open_stores(tmp_path / "a.db").decisions.seal_key()  # a restart
    other = open_stores(tmp_path / "b.db").decisions.seal_key()
    a, a2, b = store_receipt_keyring(first), store_receipt_keyring(again), store_receipt_keyring(other)
    assert a.signing_kid == a2.signing_kid and a.signing_kid != b.signing_kid
    message = b"receipt payload"
    signature = a.signer().sign(message)
    assert a2.signer().verify(message, signature)  # honoured after the restart
    forged_for = b.verifier(a.signing_kid or "")
    assert forged_for is None  # the other store does not even know the kid
    assert not b.signer().verify(message, signature)  # nor does its key accept the signature


def test_the_receipt_key_is_not_the_seal_secret_nor_derived_from_public_facts() -> None:
    secret = secrets.token_bytes(32)
    keyring = store_receipt_keyring(secret)
    key = keyring.signer()
    private = getattr(key, "private_key", None)
    assert private is not None
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    raw = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    assert raw != secret and raw not in secret
    assert (keyring.signing_kid or "").startswith("kcp-opa-serve-")
    # One bit of the secret changes the key: it is keyed by all of it.
    flipped = bytes([secret[0] ^ 1]) + secret[1:]
    assert store_receipt_keyring(flipped).signing_kid != keyring.signing_kid
