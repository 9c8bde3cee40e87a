"""Which receipts were consumed, committed in the tree checkpoint: "R was consumed at most once up to C".

A receipt is consumed in the ledger by its ``intent`` entry (written once the receipt is
consumed and the execution claimed, before the side effect runs). The consume index of a tree
of N entries has one leaf per receipt consumed in entries 1..N, sorted by receipt_id: the
canonical JSON ``{"receipt_id": R, "seqs": [the seqs of R's intent entries]}``. Its RFC 9162
root is an extension line of the C2SP checkpoint (``kcp-opa-consumes <count> <base64 root>``),
so the log key signs it and witnesses cosign it with the tree head.

A consume proof for R carries R's leaf and its neighbours (for a receipt never consumed, the
two leaves around where R would be), each with an inclusion proof in the index; and every
intent, execution and failure entry of R with an inclusion proof in the log tree. Verifying it
shows: the index the log signed lists R with exactly the consumes shown (at most one, or the
proof fails), each is R's intent entry at that seq of the signed tree, the leaves beside it are
other receipts, and the outcomes shown are in the tree. It does not show that the index is
sorted and complete everywhere: that the log signer built it from the log is trusted, and a
monitor holding the ledger checks it (:func:`index_problem`, ``audit verify-consumes``).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Mapping, Sequence

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.trail.frontier import encode_root
from kcp_opa.trail.merkle import MerkleTree, leaf_hash, verify_inclusion
from kcp_opa.trail.note import Checkpoint, NoteError

EXTENSION = "kcp-opa-consumes"
CONSUMED_FORMAT = "kcp-opa-consume-proof/1"
CONSUME_TYPE = "intent"
OUTCOME_TYPES = ("intent", "execution", "failure")
_INTENT = b'"type":"intent"'


def consume_of(line: bytes) -> str | None:
    """The receipt an entry's stored bytes consume (an intent entry's receipt_id), else None."""
    if _INTENT not in line:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    receipt = entry.get("receipt_id") if isinstance(entry, dict) and entry.get("type") == CONSUME_TYPE else None
    return receipt if isinstance(receipt, str) else None


def index_leaf(receipt_id: str, seqs: Sequence[int]) -> bytes:
    return canonical_json({"receipt_id": receipt_id, "seqs": list(seqs)})


class ConsumeIndex:
    """The index of a tree of ``size`` entries: sorted receipts, their leaves, and the tree over them."""

    def __init__(self, consumes: Mapping[str, Sequence[int]], size: int) -> None:
        held = {r: [s for s in seqs if s <= size] for r, seqs in consumes.items()}
        self.receipts = sorted(r for r, seqs in held.items() if seqs)
        self.leaves = [index_leaf(r, held[r]) for r in self.receipts]
        self.tree = MerkleTree.of(self.leaves)

    def extension(self) -> str:
        return f"{EXTENSION} {self.tree.size} {encode_root(self.tree.root())}"

    def _leaf(self, position: int) -> JsonDict:
        return {
            "position": position,
            "leaf": json.loads(self.leaves[position]),
            "hashes": [encode_root(h) for h in self.tree.inclusion_proof(position)],
        }

    def neighbourhood(self, receipt_id: str) -> list[JsonDict]:
        """R's leaf and the leaves on each side of it (or of where it would be), with their proofs."""
        at = bisect.bisect_left(self.receipts, receipt_id)
        held = at < len(self.receipts) and self.receipts[at] == receipt_id
        first, last = at - 1, at + 1 if held else at
        return [self._leaf(p) for p in range(max(first, 0), min(last, len(self.receipts) - 1) + 1)]


def extension_of(checkpoint: Checkpoint) -> tuple[int, bytes]:
    """The index size and root a checkpoint commits to; NoteError when it names none."""
    lines = [line for line in checkpoint.extensions if line.startswith(EXTENSION + " ")]
    if len(lines) != 1:
        raise NoteError(f"the checkpoint commits to no consume index (no single {EXTENSION} line)")
    try:
        _, count, root = lines[0].split(" ")
        raw = base64.b64decode(root, validate=True)
        if not count.isdigit() or len(raw) != 32:
            raise ValueError
    except (ValueError, binascii.Error):
        raise NoteError(f"the checkpoint's {EXTENSION} line is malformed") from None
    return int(count), raw


def _position(item: object, count: int, root: bytes) -> tuple[int, str, list[int]]:
    """An index leaf the proof carries, once its inclusion proof verifies: (position, receipt_id, seqs)."""
    try:
        if not isinstance(item, Mapping):
            raise TypeError  # as indexing a list, a string or null would
        position, leaf = int(item["position"]), item["leaf"]
        receipt, seqs = leaf["receipt_id"], [int(s) for s in leaf["seqs"]]
        hashes = [base64.b64decode(h, validate=True) for h in item["hashes"]]
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise NoteError("the consume proof's index leaves are malformed") from None
    if not isinstance(receipt, str) or not seqs or seqs != sorted(set(seqs)):
        raise NoteError("an index leaf names no receipt or no consume")
    if not verify_inclusion(leaf_hash(index_leaf(receipt, seqs)), position, count, hashes, root):
        raise NoteError(f"index leaf {position} ({receipt}) is not in the consume index the checkpoint signs")
    return position, receipt, seqs


def consumed_at(document: object, checkpoint: Checkpoint, receipt_id: str) -> list[int]:
    """The seqs at which the signed index says ``receipt_id`` was consumed, once the neighbourhood proves it.

    The leaves must be consecutive positions, strictly sorted, with R's leaf (if any) between
    two others or at an end of the index; a receipt never consumed needs the two leaves around
    where it would be (or the end it would be past).
    """
    if not isinstance(document, Mapping) or document.get("format") != CONSUMED_FORMAT:
        raise NoteError(f"not a proof of format {CONSUMED_FORMAT}")
    if document.get("receipt_id") != receipt_id:
        raise NoteError(f"the proof is for receipt {document.get('receipt_id')!r}, not {receipt_id!r}")
    count, root = extension_of(checkpoint)
    items = document.get("index")
    if not isinstance(items, list) or (count and not items) or len(items) > 3:
        raise NoteError("the consume proof carries no index neighbourhood")
    found = [_position(item, count, root) for item in items]
    positions, receipts = [p for p, _, _ in found], [r for _, r, _ in found]
    if found and positions != list(range(positions[0], positions[0] + len(found))):
        raise NoteError("the index leaves are not consecutive")
    if receipts != sorted(set(receipts)):
        raise NoteError("the index leaves are not strictly sorted: the index is not a consume index")
    below = [p for p, r, _ in found if r < receipt_id]
    above = [p for p, r, _ in found if r > receipt_id]
    if (not below and found and positions[0] != 0) or (not above and found and positions[-1] != count - 1):
        raise NoteError(f"the leaves shown do not close around {receipt_id}: another leaf for it could be beside them")
    return next((seqs for _, r, seqs in found if r == receipt_id), [])


def consumed_document(
    origin: str, size: int, receipt_id: str, index: ConsumeIndex, entries: Sequence[JsonObject]
) -> JsonDict:
    """The proof for ``receipt_id`` against the checkpoint of ``size``: its index neighbourhood and entries."""
    return {
        "format": CONSUMED_FORMAT,
        "origin": origin,
        "tree_size": size,
        "receipt_id": receipt_id,
        "index": index.neighbourhood(receipt_id),
        "entries": list(entries),
    }
