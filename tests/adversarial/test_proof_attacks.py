"""Attacks on the ledger's Merkle proofs and witnessed checkpoints.

The attacker holds the writer's key: it can rewrite the ledger so that its hash chain and every
entry signature verify again (``_rechained``). What it cannot do is make a proof against a
checkpoint signed, and witnessed, before the rewrite: an entry edited, removed or moved has no
inclusion proof to it; a fork (another tree of the same log) is refused by a witness that saw
the first; a checkpoint only the writer signed does not count where witnesses are required;
and a proof made for one tree size does not verify against another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kcp_opa.audit.witness import Witness, WitnessRefusal
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Ed25519Key, generate_ed25519, sign_document
from kcp_opa.trail.ledger import AuditLedger, verify_ledger
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.note import ED25519_COSIGNATURE, Checkpoint, Note, NoteError, NoteSigner, open_checkpoint
from kcp_opa.trail.proofs import (
    consistency_document,
    inclusion_document,
    verify_consistency_document,
    verify_inclusion_document,
)
from kcp_opa.trail.record import LedgerEntry
from kcp_opa.trail.verify import ENTRY_SIGNATURE

WRITER = generate_ed25519("writer")
W1 = NoteSigner("witness.example/w1", generate_ed25519("w1"), ED25519_COSIGNATURE)
W2 = NoteSigner("witness.example/w2", generate_ed25519("w2"), ED25519_COSIGNATURE)


def _ledger(path: Path, count: int, key: Ed25519Key = WRITER) -> Path:
    ledger = AuditLedger(path, checkpoint_key=key)
    for n in range(count):
        ledger.append({"type": "decision", "decision_id": f"dec_{n}", "amount": n})
    return path


def _events(path: Path) -> tuple[bytes, list[dict[str, Any]]]:
    header, *lines = path.read_bytes().split(b"\n")[:-1]
    chain = {"seq", "previous_hash", "entry_hash", ENTRY_SIGNATURE}
    return header, [{k: v for k, v in json.loads(line).items() if k not in chain} for line in lines]


def _rechained(path: Path, events: list[dict[str, Any]], header: bytes) -> Path:
    """The ledger rewritten by the writer's key holder: chain and signatures valid again."""
    previous, out = canonical_hash(json.loads(header)), [header]
    for seq, event in enumerate(events, start=1):
        entry, line = LedgerEntry.written(
            event, seq, previous, lambda body: sign_document(body, WRITER, ENTRY_SIGNATURE)
        )
        previous = entry.entry_hash
        out.append(line)
    path.write_bytes(b"\n".join(out) + b"\n")
    assert verify_ledger(path, writer="writer", keyring=None).ok
    return path


def _signed(path: Path) -> tuple[LedgerTree, Note]:
    tree = LedgerTree.read(path, keep=frozenset(range(1, 100)))
    return tree, tree.signed_checkpoint(NoteSigner(tree.origin, WRITER))


def _log(tree: LedgerTree) -> Any:
    return NoteSigner(tree.origin, WRITER).verifier()


def _forged_proof(tree: LedgerTree, seq: int, size: int) -> dict[str, Any]:
    """What the rewritten ledger's tree proves for ``seq`` (its own root), presented for the old checkpoint."""
    return inclusion_document(tree, seq, tree.checkpoint(size))


@pytest.fixture
def honest(tmp_path: Path) -> tuple[Path, LedgerTree, Note]:
    path = _ledger(tmp_path / "ledger.jsonl", 8)
    tree, note = _signed(path)
    return path, tree, note


def _rewrite(path: Path, change: str) -> Path:
    header, events = _events(path)
    if change == "edited":
        events[2]["amount"] = 1_000_000
    elif change == "removed":
        del events[2]
        events.append({"type": "decision", "decision_id": "dec_pad", "amount": 0})  # same size again
    else:
        events[2], events[3] = events[3], events[2]
    return _rechained(path, events, header)


@pytest.mark.parametrize("change", ["edited", "removed", "reordered"])
def test_an_entry_changed_after_the_checkpoint_fails_its_inclusion_proof(
    honest: tuple[Path, LedgerTree, Note], change: str
) -> None:
    path, _, note = honest
    checkpoint = open_checkpoint(note.encode(), _log(LedgerTree.read(path))).checkpoint
    rewritten = LedgerTree.read(_rewrite(path, change), keep=frozenset(range(1, 9)))
    assert rewritten.tree.size == 8  # the same size: only the content differs
    with pytest.raises(LedgerError, match="do not hash to the checkpoint's root"):
        inclusion_document(rewritten, 3, checkpoint)
    for seq in (3, 4):
        forged = _forged_proof(rewritten, seq, 8)
        with pytest.raises(NoteError, match="does not verify"):
            verify_inclusion_document(forged, checkpoint)


def test_an_honest_proof_carrying_an_edited_entry_fails(honest: tuple[Path, LedgerTree, Note]) -> None:
    _, tree, note = honest
    checkpoint = open_checkpoint(note.encode(), _log(tree)).checkpoint
    proof = inclusion_document(tree, 3, checkpoint)
    assert verify_inclusion_document(proof, checkpoint)["amount"] == 2
    proof["entry"] = {**proof["entry"], "amount": 1_000_000}
    with pytest.raises(NoteError, match="does not verify"):
        verify_inclusion_document(proof, checkpoint)
    moved = inclusion_document(tree, 4, checkpoint)
    moved["seq"], moved["entry"] = 3, {**moved["entry"], "seq": 3}  # seq 4's path offered for seq 3
    with pytest.raises(NoteError, match="does not verify"):
        verify_inclusion_document(moved, checkpoint)


def _fork(path: Path, keep: int, extra: int) -> Path:
    """Another ledger of the same log (same header, same writer key): the first ``keep`` entries, then others."""
    header, events = _events(path)
    forked = [*events[:keep], *({"type": "decision", "decision_id": f"fork_{n}", "amount": -n} for n in range(extra))]
    return _rechained(path.with_name("fork.jsonl"), forked, header)


def test_a_fork_shown_to_a_witness_is_refused(honest: tuple[Path, LedgerTree, Note], tmp_path: Path) -> None:
    path, tree, note = honest
    witness = Witness(tmp_path / "w1.state", W1, {tree.origin: _log(tree)})
    witness.cosign(note.encode(), None, now=1_800_000_000)

    fork_tree, fork_note = _signed(_fork(path, 5, 3))
    assert fork_tree.origin == tree.origin and fork_tree.tree.size == 8 and fork_tree.tree.root() != tree.tree.root()
    with pytest.raises(WitnessRefusal, match="fork"):
        witness.cosign(fork_note.encode(), None)

    longer_tree, longer_note = _signed(_fork(path, 5, 6))  # grown past the cosigned size, with its own proof
    own_proof = consistency_document(longer_tree, longer_tree.checkpoint(8), longer_tree.checkpoint())
    with pytest.raises(WitnessRefusal, match="fork"):
        witness.cosign(longer_note.encode(), own_proof)

    _shorter_tree, shorter_note = _signed(_fork(path, 5, 0))
    with pytest.raises(WitnessRefusal, match="shrank"):
        witness.cosign(shorter_note.encode(), None)
    assert Witness.read_state(tmp_path / "w1.state")[tree.origin].root == tree.tree.root()


def test_a_fork_shown_to_two_witnesses_gets_no_quorum(honest: tuple[Path, LedgerTree, Note], tmp_path: Path) -> None:
    """Each witness sees one view; no checkpoint carries both cosignatures, and each refuses the other view."""
    path, tree, note = honest
    _fork_tree, fork_note = _signed(_fork(path, 5, 3))
    logs = {tree.origin: _log(tree)}
    one, two = Witness(tmp_path / "w1.state", W1, logs), Witness(tmp_path / "w2.state", W2, logs)
    seen_by_one = one.cosign(note.encode(), None).note
    seen_by_two = two.cosign(fork_note.encode(), None).note
    for shown in (seen_by_one, seen_by_two):
        with pytest.raises(NoteError, match="1 valid witness cosignature"):
            open_checkpoint(shown.encode(), _log(tree), [W1.verifier(), W2.verifier()], 2)
    with pytest.raises(WitnessRefusal, match="fork"):
        two.cosign(seen_by_one.encode(), None)
    with pytest.raises(WitnessRefusal, match="fork"):
        one.cosign(seen_by_two.encode(), None)


def test_a_checkpoint_signed_only_by_the_writer_fails_when_witnesses_are_required(
    honest: tuple[Path, LedgerTree, Note],
) -> None:
    _, tree, note = honest
    with pytest.raises(NoteError, match="0 valid witness cosignature"):
        open_checkpoint(note.encode(), _log(tree), [W1.verifier()], 1)
    # The writer cosigns under the witness's name with its own key: not the witness's key ID, ignored.
    posing = NoteSigner(W1.name, WRITER, ED25519_COSIGNATURE)
    faked = note.with_signature(posing.sign(note.text, 1_800_000_000))
    with pytest.raises(NoteError, match="0 valid witness cosignature"):
        open_checkpoint(faked.encode(), _log(tree), [W1.verifier()], 1)
    # The witness's real cosignature, moved onto another checkpoint, does not verify there.
    cosigned = note.with_signature(W1.sign(note.text, 1_800_000_000))
    other = Note(tree.checkpoint(7).text(), (NoteSigner(tree.origin, WRITER).sign(tree.checkpoint(7).text()),))
    moved = other.with_signature(cosigned.signatures[-1])
    with pytest.raises(NoteError, match="does not verify"):
        open_checkpoint(moved.encode(), _log(tree), [W1.verifier()], 1)
    assert open_checkpoint(cosigned.encode(), _log(tree), [W1.verifier()], 1).cosigned


def test_a_proof_for_the_wrong_tree_size_fails(honest: tuple[Path, LedgerTree, Note]) -> None:
    _path, tree, _ = honest
    small, large = tree.checkpoint(5), tree.checkpoint(8)
    proof = inclusion_document(tree, 3, small)
    assert verify_inclusion_document(proof, small)
    with pytest.raises(NoteError, match="tree of 5 entries, the checkpoint's has 8"):
        verify_inclusion_document(proof, large)
    relabelled = {**proof, "tree_size": 8}
    with pytest.raises(NoteError, match="does not verify"):
        verify_inclusion_document(relabelled, large)
    grown = consistency_document(tree, tree.checkpoint(3), small)
    with pytest.raises(NoteError, match="from size 3 to 5"):
        verify_consistency_document(grown, tree.checkpoint(3), large)
    with pytest.raises(NoteError, match="does not verify"):
        verify_consistency_document({**grown, "new_size": 8}, tree.checkpoint(3), large)


def test_another_consume_index_for_the_same_tree_is_refused_by_a_witness(
    honest: tuple[Path, LedgerTree, Note], tmp_path: Path
) -> None:
    """Same size, same root, another consume index line: two views of which receipts were consumed."""
    _path, tree, note = honest
    witness = Witness(tmp_path / "w1.state", W1, {tree.origin: _log(tree)})
    witness.cosign(note.encode(), None, now=1_800_000_000)
    head = tree.checkpoint()
    other = Checkpoint(head.origin, head.size, head.root, ("kcp-opa-consumes 1 " + "A" * 43 + "=",))
    assert other.root == head.root and other.extensions != head.extensions
    shown = Note(other.text(), (NoteSigner(tree.origin, WRITER).sign(other.text()),))
    with pytest.raises(WitnessRefusal, match="another consume index"):
        witness.cosign(shown.encode(), None)
    assert witness.cosign(note.encode(), None).size == head.size  # the view it cosigned is still cosigned
