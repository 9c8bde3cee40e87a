"""Inclusion and consistency proofs of a ledger as JSON documents an auditor holds and checks offline.

An inclusion proof carries the entry itself (its canonical JSON is the leaf), its seq, the tree
size and origin it was made for, and the RFC 9162 audit path; it verifies against a checkpoint
of that origin and size alone. A consistency proof carries the two sizes and the path that shows
the older tree is a prefix of the newer one. Making a proof first checks that the ledger's tree
at the checkpoint's size has the checkpoint's root: a ledger changed after its checkpoint gives
no proof for it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, TypeVar

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.signing import Keyring
from kcp_opa.core.strictjson import loads
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.merkle import HASH_BYTES, leaf_hash, verify_consistency, verify_inclusion
from kcp_opa.trail.note import Checkpoint, NoteError
from kcp_opa.trail.verify import entry_hash, foreign_entry

INCLUSION_FORMAT = "kcp-opa-inclusion-proof/1"
CONSISTENCY_FORMAT = "kcp-opa-consistency-proof/1"
V = TypeVar("V")


def matching(tree: LedgerTree, checkpoint: Checkpoint) -> None:
    if checkpoint.origin != tree.origin:
        raise LedgerError(f"the checkpoint is for {checkpoint.origin}, this ledger's tree is {tree.origin}")
    if checkpoint.size > tree.tree.size:
        raise LedgerError(
            f"the checkpoint covers {checkpoint.size} entries; the ledger holds {tree.tree.size} (it was cut)"
        )
    if tree.tree.root(checkpoint.size) != checkpoint.root:
        raise LedgerError(
            f"the ledger's first {checkpoint.size} entries do not hash to the checkpoint's root:"
            " an entry was changed, removed or moved after the checkpoint"
        )


def _encoded(hashes: list[bytes]) -> list[str]:
    return [base64.b64encode(h).decode("ascii") for h in hashes]


def inclusion_document(tree: LedgerTree, seq: int, checkpoint: Checkpoint) -> JsonDict:
    """The proof that the entry at ``seq`` is in the tree ``checkpoint`` signs (``seq`` kept by the tree)."""
    matching(tree, checkpoint)
    if not 1 <= seq <= checkpoint.size or seq not in tree.kept:
        raise LedgerError(f"seq {seq} is not among the checkpoint's {checkpoint.size} entries")
    return {
        "format": INCLUSION_FORMAT,
        "origin": checkpoint.origin,
        "tree_size": checkpoint.size,
        "seq": seq,
        "entry": loads(tree.kept[seq]),
        "hashes": _encoded(tree.tree.inclusion_proof(seq - 1, checkpoint.size)),
    }


def consistency_document(tree: LedgerTree, old: Checkpoint, new: Checkpoint) -> JsonDict:
    """The proof that ``old``'s tree is a prefix of ``new``'s, both checked against the ledger first."""
    matching(tree, old)
    matching(tree, new)
    if old.size > new.size:
        raise LedgerError(f"the old checkpoint ({old.size} entries) is larger than the new one ({new.size})")
    if old.size == 0:
        raise LedgerError("the old checkpoint is of the empty tree: every tree extends it, there is nothing to prove")
    return {
        "format": CONSISTENCY_FORMAT,
        "origin": new.origin,
        "old_size": old.size,
        "new_size": new.size,
        "hashes": _encoded(tree.tree.consistency_proof(old.size, new.size)),
    }


def _field(document: JsonObject, name: str, kind: type[V]) -> V:
    value = document.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise NoteError(f"the proof's {name} is missing or not a {kind.__name__}")
    return value


def _hashes(document: JsonObject) -> list[bytes]:
    values = _field(document, "hashes", list)
    out = []
    for value in values:
        try:
            raw = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != HASH_BYTES:
            raise NoteError("the proof's hashes are base64 SHA-256 hashes")
        out.append(raw)
    return out


def _proof(document: object, expected: str, origin: str) -> JsonObject:
    if not isinstance(document, Mapping) or document.get("format") != expected:
        raise NoteError(f"not a proof of format {expected}")
    if _field(document, "origin", str) != origin:
        raise NoteError(f"the proof is for the log {document['origin']!r}, the checkpoint for {origin!r}")
    return document


def verify_inclusion_document(
    document: object, checkpoint: Checkpoint, keyring: Keyring | None = None, writer: str | None = None
) -> Mapping[str, Any]:
    """The entry the proof carries, once its canonical bytes are proven at its seq in ``checkpoint``'s tree.

    The entry's ``entry_hash`` must be its own; with ``keyring`` and ``writer`` (the kid the
    auditor expects) its writer signature must verify under that key, as ``audit verify`` checks.
    """
    proof = _proof(document, INCLUSION_FORMAT, checkpoint.origin)
    size, seq = _field(proof, "tree_size", int), _field(proof, "seq", int)
    if size != checkpoint.size:
        raise NoteError(f"the proof is for a tree of {size} entries, the checkpoint's has {checkpoint.size}")
    entry = proof.get("entry")
    if not isinstance(entry, Mapping):
        raise NoteError("the proof's entry is missing or not a Mapping")
    if entry.get("seq") != seq:
        raise NoteError(f"the entry says seq {entry.get('seq')!r}, the proof places it at seq {seq}")
    hashed = leaf_hash(canonical_json(entry))
    if not verify_inclusion(hashed, seq - 1, size, _hashes(proof), checkpoint.root):
        raise NoteError(f"the inclusion proof does not verify: this entry is not seq {seq} of the checkpoint's tree")
    if entry_hash(entry) != entry.get("entry_hash"):
        raise NoteError(f"seq {seq}: entry_hash does not match the entry (the writer logged a changed entry)")
    if keyring is not None and writer is not None:
        key = keyring.verifier(writer)
        if key is None:
            raise NoteError(f"writer key {writer} is not in the keyring (or is retired)")
        problem = foreign_entry(entry, {"kid": writer, "alg": key.alg}, keyring)
        if problem is not None:
            raise NoteError(problem)
    return entry


def verify_consistency_document(document: object, old: Checkpoint, new: Checkpoint) -> None:
    """Raises unless the proof shows ``old``'s tree is a prefix of ``new``'s (same origin, no fork)."""
    if old.origin != new.origin:
        raise NoteError(f"the checkpoints are of two logs: {old.origin!r} and {new.origin!r}")
    proof = _proof(document, CONSISTENCY_FORMAT, new.origin)
    sizes = (_field(proof, "old_size", int), _field(proof, "new_size", int))
    if sizes != (old.size, new.size):
        raise NoteError(
            f"the proof is from size {sizes[0]} to {sizes[1]}, the checkpoints are {old.size} and {new.size}"
        )
    if not verify_consistency(old.size, new.size, old.root, new.root, _hashes(proof)):
        raise NoteError(
            f"the consistency proof does not verify: the tree of {new.size} does not extend the tree of {old.size}"
            " (a fork, or a rewritten history)"
        )
