"""What ``--signing-key`` names, as a key: a ``pkcs11:`` URI or a keyring file (the option itself
is ``kcp_opa.cli.options.signing_key_option``).

A URI names a key held in an HSM (RFC 7512: ``pkcs11:token=T;object=LABEL``, the PIN from
``pin-source`` or ``$KCP_OPA_PKCS11_PIN``, never argv); a path names a keyring file whose
signing kid signs. Either way the command holds a :class:`~kcp_opa.core.keys.Signer`.
"""

from __future__ import annotations

from pathlib import Path

from kcp_opa.core.errors import KeyringError
from kcp_opa.core.signing import Key, load_keyring, load_signing_key


def signer_from(signing_key: str | None, keyring_path: Path | None, *, what: str = "--keyring") -> Key:
    """The key that signs: ``--signing-key`` or the keyring's signer; exactly one must be given."""
    if signing_key is not None and keyring_path is not None:
        raise KeyringError(f"give --signing-key or {what}, not both", "usage")
    if signing_key is not None:
        return load_signing_key(signing_key)
    if keyring_path is None:
        raise KeyringError(f"a signing key is needed: --signing-key URI|KEYRING or {what}", "no_signing_key")
    return load_keyring(keyring_path).signer()
