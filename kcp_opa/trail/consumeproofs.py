"""Consume proofs made from a ledger and checked without it (the index itself: ``kcp_opa.trail.consumes``).

Making one first checks that the ledger's tree at the checkpoint's size has the checkpoint's
root and that the consume index the checkpoint signs is the one the ledger's entries give: a
ledger changed after its checkpoint, or a checkpoint whose index hides a consume, gives no
proof (:func:`index_problem` is the monitor's check). Checking one needs only the proof, the
checkpoint and the keys.
"""

from __future__ import annotations

from collections.abc import Mapping

from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.signing import Keyring
from kcp_opa.trail.consumes import (
    CONSUME_TYPE,
    OUTCOME_TYPES,
    ConsumeIndex,
    consumed_at,
    consumed_document,
    extension_of,
)
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.note import Checkpoint, NoteError
from kcp_opa.trail.proofs import inclusion_document, matching, verify_inclusion_document


def index_problem(tree: LedgerTree, checkpoint: Checkpoint) -> str | None:
    """Why the consume index ``checkpoint`` signs is not the one the ledger's first entries give (None: it is)."""
    try:
        count, root = extension_of(checkpoint)
    except NoteError as exc:
        return str(exc)
    index = ConsumeIndex(tree.consumes, checkpoint.size)
    if (count, root) != (index.tree.size, index.tree.root()):
        return (
            f"the consume index the checkpoint signs ({count} receipts) is not the one the ledger's first"
            f" {checkpoint.size} entries give ({index.tree.size} receipts): a consume was hidden, added or changed"
        )
    return None


def prove_consumed(tree: LedgerTree, receipt_id: str, checkpoint: Checkpoint) -> JsonDict:
    """The consume proof of ``receipt_id`` (the tree read with ``receipt=receipt_id``) against ``checkpoint``."""
    matching(tree, checkpoint)
    problem = index_problem(tree, checkpoint)
    if problem is not None:
        raise LedgerError(f"{problem}; not proving against it")
    index = ConsumeIndex(tree.consumes, checkpoint.size)
    seqs = sorted(seq for seq in tree.kept if seq <= checkpoint.size)
    entries = [inclusion_document(tree, seq, checkpoint) for seq in seqs]
    return consumed_document(checkpoint.origin, checkpoint.size, receipt_id, index, entries)


def verify_consumed(
    document: object, checkpoint: Checkpoint, receipt_id: str, keyring: Keyring | None = None, writer: str | None = None
) -> JsonDict:
    """What the proof shows of ``receipt_id`` up to ``checkpoint``; NoteError unless it was consumed at most once.

    Every consume the signed index names must be shown as R's intent entry at that seq, and no
    intent of R may be shown that the index lacks; the outcomes (execution, failure) shown are
    proven entries of R.
    """
    if not isinstance(document, Mapping) or document.get("tree_size") != checkpoint.size:
        raise NoteError(f"the consume proof is not for the checkpoint's tree of {checkpoint.size} entries")
    if document.get("origin") != checkpoint.origin:
        raise NoteError(f"the consume proof is for the log {document.get('origin')!r}, not {checkpoint.origin!r}")
    seqs = consumed_at(document, checkpoint, receipt_id)
    shown = document.get("entries")
    if not isinstance(shown, list):
        raise NoteError("the consume proof carries no entries")
    entries = [dict(verify_inclusion_document(item, checkpoint, keyring, writer)) for item in shown]
    for entry in entries:
        if entry.get("receipt_id") != receipt_id or entry.get("type") not in OUTCOME_TYPES:
            raise NoteError(f"seq {entry.get('seq')} is not an intent, execution or failure of {receipt_id}")
    intents = sorted(int(e["seq"]) for e in entries if e.get("type") == CONSUME_TYPE)
    if intents != seqs:
        raise NoteError(f"the index names consumes at seqs {seqs}; the proof shows intents at {intents}")
    if len(seqs) > 1:
        at = ", ".join(str(s) for s in seqs)
        raise NoteError(f"receipt {receipt_id} was consumed {len(seqs)} times up to seq {checkpoint.size} (seqs {at})")
    outcomes = [
        {"seq": e["seq"], "type": e["type"], "outcome": e.get("outcome")} for e in entries if e["type"] != CONSUME_TYPE
    ]
    return {
        "receipt_id": receipt_id,
        "tree_size": checkpoint.size,
        "consumed": len(seqs),
        "consume_seq": seqs[0] if seqs else None,
        "outcomes": sorted(outcomes, key=lambda o: int(o["seq"])),
    }
