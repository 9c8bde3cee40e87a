"""An RFC 9162 Merkle tree: tree heads, inclusion and consistency proofs, and their verifiers.

A leaf's hash is ``SHA-256(0x00 || leaf)`` and an interior node's ``SHA-256(0x01 || left ||
right)`` (RFC 9162 §2.1.1), so a leaf can never pass for a node. The tree keeps, per height, the
hashes of its complete subtrees as one flat byte string (32 bytes each, about 64 bytes per leaf
in all): appending is amortised O(1), the head of any prefix of the log is O(log n), and a proof
is O(log² n) hashes at worst, so proving against a log of millions of entries needs no pass over
it. Verification (§2.1.3.2, §2.1.4.2) is O(log n) and needs only the proof, the sizes and the
roots: an auditor holds no tree.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

HASH_BYTES = 32
#: The head of the empty tree: the hash of the empty string (RFC 9162 §2.1.1).
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``: the tree's hash of one log entry."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two smaller than ``size`` (``size`` >= 2): where RFC 9162 splits a tree."""
    return 1 << ((size - 1).bit_length() - 1)


class MerkleTree:
    """The tree over a log's leaves, appended in order; proofs for any size it has reached."""

    def __init__(self) -> None:
        # _levels[h] holds the hashes of the complete subtrees of height h, left to right.
        self._levels: list[bytearray] = [bytearray()]
        self._size = 0

    @classmethod
    def of(cls, leaves: Iterable[bytes]) -> MerkleTree:
        """The tree whose leaves are ``leaves``, in order."""
        tree = cls()
        for leaf in leaves:
            tree.append(leaf)
        return tree

    @property
    def size(self) -> int:
        return self._size

    def append(self, leaf: bytes) -> int:
        """Add a leaf; returns its index."""
        return self.append_hash(leaf_hash(leaf))

    def append_hash(self, hashed: bytes) -> int:
        """Add a leaf by its leaf hash; returns its index. Completes every subtree it closes."""
        if len(hashed) != HASH_BYTES:
            raise ValueError(f"a leaf hash is {HASH_BYTES} bytes, not {len(hashed)}")
        index = self._size
        self._levels[0] += hashed
        self._size += 1
        height, count = 0, self._size
        while count % 2 == 0:
            below = self._levels[height]
            if height + 1 == len(self._levels):
                self._levels.append(bytearray())
            self._levels[height + 1] += hashlib.sha256(b"\x01" + below[-2 * HASH_BYTES :]).digest()
            height, count = height + 1, count // 2
        return index

    def root(self, size: int | None = None) -> bytes:
        """The tree head over the first ``size`` leaves (all of them when None)."""
        size = self._size if size is None else size
        self._check_size(size)
        return EMPTY_ROOT if size == 0 else self._subtree(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 PATH(index, D[0:size]): the siblings from the leaf up to the root."""
        size = self._size if size is None else size
        self._check_size(size)
        if not 0 <= index < size:
            raise ValueError(f"leaf {index} is not in a tree of {size}")
        top_down: list[bytes] = []
        start, width, at = 0, size, index
        while width > 1:
            k = _split(width)
            if at < k:
                top_down.append(self._subtree(start + k, width - k))
                width = k
            else:
                top_down.append(self._subtree(start, k))
                start, width, at = start + k, width - k, at - k
        return top_down[::-1]

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 PROOF(old, D[0:new]): what proves the tree of ``old`` is a prefix of ``new``."""
        new = self._size if new is None else new
        self._check_size(new)
        if not 0 < old <= new:
            raise ValueError(f"no consistency proof from size {old} to size {new}")
        top_down: list[bytes] = []
        start, width, m, whole = 0, new, old, True
        while m != width:
            k = _split(width)
            if m <= k:
                top_down.append(self._subtree(start + k, width - k))
                width = k
            else:
                top_down.append(self._subtree(start, k))
                start, width, m, whole = start + k, width - k, m - k, False
        if not whole:
            top_down.append(self._subtree(start, width))
        return top_down[::-1]

    def _subtree(self, start: int, width: int) -> bytes:
        """MTH(D[start:start+width]) for a range RFC 9162's recursion produces (start aligned to its split)."""
        if width & (width - 1) == 0:
            height = width.bit_length() - 1
            at = (start >> height) * HASH_BYTES
            return bytes(self._levels[height][at : at + HASH_BYTES])
        k = _split(width)
        return node_hash(self._subtree(start, k), self._subtree(start + k, width - k))

    def _check_size(self, size: int) -> None:
        if not 0 <= size <= self._size:
            raise ValueError(f"the tree has {self._size} leaves, not {size}")


def _well_formed(hashes: Sequence[bytes]) -> bool:
    return all(isinstance(h, bytes) and len(h) == HASH_BYTES for h in hashes)


def root_from_inclusion(hashed_leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes | None:
    """RFC 9162 §2.1.3.2: the root an inclusion proof leads to, or None when it is malformed."""
    if not 0 <= index < size or not _well_formed([hashed_leaf, *proof]):
        return None
    fn, sn, r = index, size - 1, hashed_leaf
    for p in proof:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r if sn == 0 else None


def verify_inclusion(hashed_leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """Whether ``proof`` shows the leaf hashed ``hashed_leaf`` at ``index`` in the tree of ``size`` with ``root``."""
    found = root_from_inclusion(hashed_leaf, index, size, proof)
    return found is not None and hmac.compare_digest(found, root)


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2: whether ``proof`` shows the tree (old_size, old_root) is a prefix of (new_size, new_root).

    A proof from the empty tree proves nothing and is refused; equal sizes need an empty proof
    and equal roots.
    """
    if not 0 < old_size <= new_size or not _well_formed([old_root, new_root, *proof]):
        return False
    if old_size == new_size:
        return not proof and hmac.compare_digest(old_root, new_root)
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and hmac.compare_digest(fr, old_root) and hmac.compare_digest(sr, new_root)
