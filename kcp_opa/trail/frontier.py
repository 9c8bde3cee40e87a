"""The right edge of a ledger's RFC 9162 Merkle tree, kept as the chain grows: O(log n) per append.

A tree of ``size`` leaves is, left to right, one complete subtree per set bit of ``size``
(largest first); its head folds those hashes from the right (RFC 9162 §2.1.1 splits at the
largest power of two, which is exactly that). Keeping only those hashes (the compact range,
about 32 bytes times log2 n) is enough to append a leaf and to sign the head without reading
any earlier entry. Proofs still need the interior hashes (``kcp_opa.trail.merkle``).

A :class:`TreeState` names the entry it stands at (seq and entry_hash), so storage keeps it
beside the chain's head and a restarted writer resumes from it only when the chain still ends
(or continues) from that entry; otherwise it is recomputed from the stored entries.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass

from kcp_opa.core.canonical import canonical_json
from kcp_opa.trail.merkle import EMPTY_ROOT, HASH_BYTES, leaf_hash, node_hash

TREE_STATE_FORMAT = "kcp-opa-tree-state/1"


def appended(frontier: tuple[bytes, ...], size: int, leaf: bytes) -> tuple[bytes, ...]:
    """The frontier after adding ``leaf`` (an entry's stored bytes) to a tree of ``size`` leaves."""
    edge, hashed = list(frontier), leaf_hash(leaf)
    while size & 1:
        hashed = node_hash(edge.pop(), hashed)
        size >>= 1
    edge.append(hashed)
    return tuple(edge)


def frontier_root(frontier: tuple[bytes, ...]) -> bytes:
    """The tree head (MTH) of the tree whose right edge is ``frontier``."""
    if not frontier:
        return EMPTY_ROOT
    root = frontier[-1]
    for left in reversed(frontier[:-1]):
        root = node_hash(left, root)
    return root


def encode_root(root: bytes) -> str:
    return base64.b64encode(root).decode("ascii")


@dataclass(frozen=True)
class TreeState:
    """The tree over entries 1..seq (``entry_hash`` the hash of entry ``seq``) as its right edge."""

    seq: int
    entry_hash: str
    frontier: tuple[bytes, ...] = ()

    @classmethod
    def empty(cls, head_hash: str) -> TreeState:
        return cls(0, head_hash, ())

    @classmethod
    def of(cls, lines: Iterable[bytes], head_hash: str) -> TreeState:
        """Recomputed from scratch over every entry's stored bytes (``head_hash`` the last one's)."""
        state = cls.empty(head_hash)
        for line in lines:
            state = state.extended(line, head_hash)
        return state

    def extended(self, line: bytes, entry_hash: str) -> TreeState:
        """This tree with one more entry (its stored bytes ``line``, its hash ``entry_hash``)."""
        return TreeState(self.seq + 1, entry_hash, appended(self.frontier, self.seq, line))

    @property
    def root(self) -> bytes:
        return frontier_root(self.frontier)

    def at(self, seq: int, entry_hash: str) -> bool:
        """Whether this state stands at exactly that entry."""
        return self.seq == seq and self.entry_hash == entry_hash

    def line(self) -> bytes:
        """Canonical JSON (no newline): what storage keeps beside the head."""
        document = {
            "format": TREE_STATE_FORMAT,
            "seq": self.seq,
            "entry_hash": self.entry_hash,
            "frontier": [encode_root(h) for h in self.frontier],
        }
        return canonical_json(document)

    @classmethod
    def parse(cls, raw: bytes | str | None) -> TreeState | None:
        """A kept state, or None when it is absent or damaged (the writer then recomputes it)."""
        if raw is None:
            return None
        try:
            document = json.loads(raw)
            seq, entry_hash = document["seq"], document["entry_hash"]
            if document["format"] != TREE_STATE_FORMAT or not isinstance(seq, int) or not isinstance(entry_hash, str):
                return None
            frontier = tuple(base64.b64decode(h, validate=True) for h in document["frontier"])
        except (ValueError, TypeError, KeyError, binascii.Error):
            return None
        if seq < 0 or len(frontier) != seq.bit_count() or any(len(h) != HASH_BYTES for h in frontier):
            return None
        return cls(seq, entry_hash, frontier)
