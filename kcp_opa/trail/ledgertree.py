"""The Merkle tree over a ledger's entries, computed from the ledger as both backends store it.

Leaf ``i`` is the entry at seq ``i + 1``, as its stored bytes: the entry's canonical JSON
(KYA-CJ-1), which is the file ledger's line without its newline and, byte for byte, the line
the PostgreSQL ledger keeps and dumps (``trail.record.LedgerEntry.written`` makes both). The
header is not a leaf (the first entry's ``previous_hash`` already commits to it); the
checkpoint's origin names the ledger instead: ``kcp-opa/<ledger_id>``. A torn last line is not
an entry and not a leaf. This is the whole tree, read from the ledger when a proof is asked for
(the backends keep only its right edge as they append: ``kcp_opa.trail.frontier``). Its
checkpoints carry the consume index of their size as an extension line (``kcp_opa.trail.consumes``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kcp_opa.core.errors import LedgerError
from kcp_opa.stores.protocols import LedgerStore
from kcp_opa.trail.consumes import OUTCOME_TYPES, ConsumeIndex, consume_of
from kcp_opa.trail.merkle import MerkleTree
from kcp_opa.trail.note import Checkpoint, Note, NoteSigner
from kcp_opa.trail.verify import is_header

ORIGIN_PREFIX = "kcp-opa/"


def origin_for(ledger_id: str | None, origin: str | None = None) -> str:
    """The checkpoint origin (and log key name) of a ledger: given, or ``kcp-opa/<ledger_id>``."""
    if origin is not None:
        return origin
    if ledger_id is None:
        raise LedgerError("the ledger has no header naming its ledger_id: give --origin to name its tree")
    return ORIGIN_PREFIX + ledger_id


def ledger_id_of(path: Path) -> str | None:
    """The ledger_id its header names (None for a headerless ledger)."""
    try:
        with path.open("rb") as handle:
            first = handle.readline()
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None
    try:
        header = json.loads(first)
    except ValueError:
        return None
    return str(header["ledger_id"]) if is_header(header) else None


def entry_lines(path: Path) -> Iterator[bytes]:
    """Every entry's stored bytes in seq order (the header and a torn last line skipped)."""
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.endswith(b"\n"):
                    return
                if number == 1 and _header(raw):
                    continue
                yield raw[:-1]
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None


def _outcome_of(line: bytes) -> str | None:
    """The receipt an intent, execution or failure entry is of (None for any other entry)."""
    if b'"receipt_id":' not in line:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    found = entry.get("receipt_id") if isinstance(entry, dict) and entry.get("type") in OUTCOME_TYPES else None
    return found if isinstance(found, str) else None


def _header(raw: bytes) -> bool:
    try:
        return is_header(json.loads(raw))
    except ValueError:
        return False


@dataclass
class LedgerTree:
    """A ledger's tree, with the stored bytes of the entries asked for while it was read.

    ``consumes`` maps each receipt consumed (an intent entry) to the seqs that consume it.
    """

    origin: str
    tree: MerkleTree
    kept: dict[int, bytes] = field(default_factory=dict)
    consumes: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def read(
        cls, path: Path, origin: str | None = None, keep: frozenset[int] = frozenset(), receipt: str | None = None
    ) -> LedgerTree:
        """Read the ledger once; ``keep`` names the seqs whose entry bytes to hold (for proofs), and
        ``receipt`` a receipt whose intent, execution and failure entries to hold too."""
        built = cls(origin_for(ledger_id_of(path), origin), MerkleTree())
        for line in entry_lines(path):
            seq = built.tree.append(line) + 1
            consumed = consume_of(line)
            if consumed is not None:
                built.consumes.setdefault(consumed, []).append(seq)
            if seq in keep or (receipt is not None and _outcome_of(line) == receipt):
                built.kept[seq] = line
        return built

    @classmethod
    def of_store(cls, store: LedgerStore, origin: str | None = None, keep: frozenset[int] = frozenset()) -> LedgerTree:
        """The tree of a running ledger (file or PostgreSQL), from one consistent snapshot of it."""
        with store.snapshot() as snapshot:
            if snapshot is None:
                raise LedgerError(f"{store.location}: the ledger holds no entries: an empty tree proves nothing")
            return cls.read(snapshot.path, origin, keep)

    def checkpoint(self, size: int | None = None) -> Checkpoint:
        """The tree head of ``size`` entries, with the consume index of those entries as its extension line."""
        size = self.tree.size if size is None else size
        return Checkpoint(self.origin, size, self.tree.root(size), (ConsumeIndex(self.consumes, size).extension(),))

    def signed_checkpoint(self, signer: NoteSigner) -> Note:
        """The C2SP checkpoint of the whole tree, signed by the log key (named as the origin)."""
        if signer.name != self.origin:
            raise LedgerError(f"the log key is named {signer.name!r}, not the origin {self.origin!r}")
        if self.tree.size == 0:
            raise LedgerError("the ledger holds no entries: an empty tree proves nothing")
        text = self.checkpoint().text()
        return Note(text, (signer.sign(text),))
