"""Shared leaves that every stage may use and that import no stage.

Takes nothing from the pipeline; gives the one error hierarchy (``errors``), the one canonical
JSON encoding (``canonical``), logging set-up (``logsetup``), the group-commit writer shared by the
ledger and the stores (``groupcommit``), signing keys and keyrings (``signing``: receipts, and later
ledger checkpoints and attestations, sign with them) and the version.
"""
