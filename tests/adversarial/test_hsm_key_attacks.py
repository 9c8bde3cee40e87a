"""Attacks on an HSM-held signing key: try to get the private key out of a real SoftHSM2 token.

The gate's key pair is generated on the token by ``create_pkcs11_ed25519``. An attacker with
the PIN and a session (everything the gate itself has) tries to read the private value, to wrap
(encrypt-export) it under a key of their own, and to flip it extractable first; each must fail.
A key that could leave the token is refused as a signing key. Every test fails if the key can
be exported.
"""

from __future__ import annotations

from typing import Any

import pytest

from kcp_opa.core.errors import KeyringError
from kcp_opa.core.pkcs11 import ED25519_OID, Pkcs11Uri, create_pkcs11_ed25519, open_pkcs11_key, open_session


def _private(token: Any, label: str) -> tuple[Any, Any]:
    from pkcs11 import ObjectClass

    session = open_session(Pkcs11Uri.parse(token.uri(label)), rw=True)
    return session, session.get_key(ObjectClass.PRIVATE_KEY, label=label)


def test_the_private_key_cannot_be_read_wrapped_or_made_extractable(softhsm_token: Any) -> None:
    from pkcs11 import Attribute, KeyType, Mechanism, exceptions

    key = create_pkcs11_ed25519(softhsm_token.uri("gate-export-1"))
    session, private = _private(softhsm_token, "gate-export-1")
    assert private[Attribute.EXTRACTABLE] is False and private[Attribute.NEVER_EXTRACTABLE] is True
    assert private[Attribute.SENSITIVE] is True and private[Attribute.ALWAYS_SENSITIVE] is True
    with pytest.raises(exceptions.AttributeSensitive):
        exported = private[Attribute.VALUE]
        pytest.fail(f"the private key was read out of the token ({len(exported)} bytes)")
    wrapping = session.generate_key(
        KeyType.AES,
        256,
        store=False,
        label="attacker-wrap",
        template={Attribute.WRAP: True, Attribute.EXTRACTABLE: True},
    )
    with pytest.raises(exceptions.PKCS11Error):
        wrapped = wrapping.wrap_key(private, mechanism=Mechanism.AES_KEY_WRAP_PAD)
        pytest.fail(f"the private key was wrapped out of the token ({len(wrapped)} bytes)")
    with pytest.raises(exceptions.PKCS11Error):
        private[Attribute.EXTRACTABLE] = True  # PKCS#11: extractable can only go from true to false
    assert private[Attribute.EXTRACTABLE] is False
    with pytest.raises(exceptions.PKCS11Error):
        private[Attribute.SENSITIVE] = False  # and sensitive only from false to true
    assert private[Attribute.SENSITIVE] is True
    message = b"still signs on the token"
    assert key.verify(message, key.sign(message))


def test_a_key_that_could_leave_the_token_is_refused_as_a_signing_key(softhsm_token: Any) -> None:
    from pkcs11 import Attribute, KeyType, Mechanism
    from pkcs11.util.ec import encode_named_curve_parameters

    session = open_session(Pkcs11Uri.parse(softhsm_token.uri("weak")), rw=True)
    for label, extractable, sensitive in (("weak-extractable", True, True), ("weak-plain", False, False)):
        session.generate_keypair(
            KeyType.EC_EDWARDS,
            store=True,
            label=label,
            mechanism=Mechanism.EC_EDWARDS_KEY_PAIR_GEN,
            public_template={Attribute.EC_PARAMS: encode_named_curve_parameters(ED25519_OID)},
            private_template={Attribute.EXTRACTABLE: extractable, Attribute.SENSITIVE: sensitive},
        )
        with pytest.raises(KeyringError) as caught:
            open_pkcs11_key(softhsm_token.uri(label))
        assert caught.value.code == "weak_key", label


def test_a_token_key_that_is_not_ed25519_is_refused(softhsm_token: Any) -> None:
    """ECDSA P-256 is not a receipt algorithm (the contract allows HMAC-SHA256 and Ed25519)."""
    from pkcs11 import Attribute, KeyType
    from pkcs11.util.ec import encode_named_curve_parameters

    session = open_session(Pkcs11Uri.parse(softhsm_token.uri("p256")), rw=True)
    session.generate_keypair(
        KeyType.EC,
        store=True,
        label="p256",
        public_template={Attribute.EC_PARAMS: encode_named_curve_parameters("secp256r1")},
        private_template={Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True},
    )
    with pytest.raises(KeyringError) as caught:
        open_pkcs11_key(softhsm_token.uri("p256"))
    assert caught.value.code == "unsupported_key"
