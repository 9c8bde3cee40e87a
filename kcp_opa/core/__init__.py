"""Shared leaves that every stage may use and that import no stage.

Takes nothing from the pipeline; gives the one error hierarchy (``errors``), the one canonical
JSON encoding (``canonical``), logging set-up (``logsetup``), the group-commit writer shared by the
ledger and the stores (``groupcommit``), what signs and verifies (``keys``: the ``Signer`` and
``Verifier`` protocols, HMAC and Ed25519 keys, the one signed-bytes rule; ``pkcs11``: Ed25519 in an
HSM), where keys come from (``keyring``), ``signing`` importing all three, and the version.
"""
