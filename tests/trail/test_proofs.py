"""Proof documents: what an inclusion proof checks beyond the tree (the entry's own hash, its writer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.signing import Ed25519Key, Keyring, generate_ed25519
from kcp_opa.trail.ledger import AuditLedger
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.note import NoteError
from kcp_opa.trail.proofs import inclusion_document, verify_inclusion_document

WRITER = generate_ed25519("writer")


def _public(key: Ed25519Key) -> Keyring:
    return Keyring({key.kid: Ed25519Key(key.kid, public_key=key.public_key)})


def _tree(path: Path) -> LedgerTree:
    ledger = AuditLedger(path, checkpoint_key=WRITER)
    for n in range(5):
        ledger.append({"type": "decision", "decision_id": f"dec_{n}"})
    return LedgerTree.read(path, keep=frozenset({2}))


def test_the_writer_signature_is_checked_under_the_auditors_key(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "ledger.jsonl")
    proof = inclusion_document(tree, 2, tree.checkpoint())
    assert verify_inclusion_document(proof, tree.checkpoint(), _public(WRITER), "writer")["seq"] == 2
    impostor = generate_ed25519("writer")  # same kid, another key
    with pytest.raises(NoteError, match="writer signature does not verify"):
        verify_inclusion_document(proof, tree.checkpoint(), _public(impostor), "writer")
    with pytest.raises(NoteError, match="not by the header's writer 'someone'"):
        verify_inclusion_document(proof, tree.checkpoint(), Keyring({"someone": impostor}), "someone")


def test_an_entry_whose_hash_is_not_its_own_fails_though_the_tree_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _tree(path)
    lines = path.read_bytes().split(b"\n")
    entry = json.loads(lines[2])
    entry["decision_id"] = "dec_changed"  # entry_hash left as it was: the tree is then built over the change
    lines[2] = canonical_json(entry)
    path.write_bytes(b"\n".join(lines))
    tree = LedgerTree.read(path, keep=frozenset({2}))
    with pytest.raises(NoteError, match="entry_hash does not match"):
        verify_inclusion_document(inclusion_document(tree, 2, tree.checkpoint()), tree.checkpoint())
