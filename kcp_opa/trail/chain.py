"""The ledger's chain, written once for every backend: header, seq, signing, checkpoints, admission.

A :class:`Chain` decides what the ledger holds; a :class:`ChainStorage` (a JSON Lines file,
``kcp_opa.trail.ledger``; a PostgreSQL database, ``kcp_opa.trail.pgledger``) only keeps it: it
locks the chain's end, hands it to the chain as a :class:`Head`, and writes the :class:`Batch` the
chain returns all at once or not at all. So an entry, a header and a checkpoint have one shape on
every backend, and a database dumped after its header *is* a ledger file.

A batch is admitted, then built, in :meth:`Chain._build`: admission (a keyed writer extends only
its own chain, verified once in full against its last checkpoint, never past a cut) reads the
head; building chains each entry after the previous one (signed by the writer key, if any) and
signs a checkpoint of the new head when one is due (the chain's first batch, and every
``checkpoint_every`` entries). The RFC 9162 Merkle tree over the entries is kept there too, as
its right edge (``kcp_opa.trail.frontier``): each entry's stored bytes are a leaf, an append
costs O(log n), a checkpoint carries the tree's root without reading the chain again, and the
storage keeps the edge beside the head, so a restarted writer resumes it (recomputing it from
the stored entries only when the kept one does not stand at the head).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import KeyringError, LedgerError
from kcp_opa.core.groupcommit import GroupCommit
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.signing import Key, Keyring, sign_document
from kcp_opa.trail.checkpoint import Checkpoint
from kcp_opa.trail.frontier import TreeState, encode_root
from kcp_opa.trail.record import LedgerEntry
from kcp_opa.trail.verify import (
    AUTH_KEY,
    ENTRY_SIGNATURE,
    HEADER_KEY,
    binding_problem,
    declared_writer,
    foreign_entry,
    verify_ledger,
)

DURABILITIES = frozenset({"fsync", "group"})


@dataclass(frozen=True)
class Genesis:
    """The header a chain starts with: its canonical line (no newline), ledger_id and hash."""

    line: bytes
    ledger_id: str
    head_hash: str

    @classmethod
    def new(cls, key: Key | None) -> Genesis:
        """A fresh header; with a writer key it names the key (``entry_auth``), binding the ledger to it."""
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        header: JsonDict = {HEADER_KEY: 1, "ledger_id": uuid.uuid4().hex, "created_at": stamp}
        if key is not None:
            header[AUTH_KEY] = {"alg": key.alg, "kid": key.kid}
        return cls(canonical_json(header), str(header["ledger_id"]), canonical_hash(header))


@dataclass(frozen=True)
class Head:
    """The chain's end as the storage found it, locked until the batch is written.

    ``header`` is the first line parsed (a header, or the genesis entry of a ledger written
    before headers existed); ``last`` the last entry parsed (None at seq 0); ``created`` says
    this batch writes the header too; ``holds(seq, entry_hash)`` whether the chain still has
    that entry there (a storage that cannot look back cheaply answers for its last entry);
    ``kept_tree()`` the tree state the storage kept beside the head (None if none or unreadable);
    ``lines_after(seq)`` the stored bytes of the entries after ``seq``, in order.
    """

    header: object
    ledger_id: str | None
    seq: int
    head_hash: str
    last: JsonObject | None
    created: bool
    holds: Callable[[int, str], bool]
    kept_tree: Callable[[], TreeState | None] = lambda: None
    lines_after: Callable[[int], Iterator[bytes]] = lambda seq: iter(())


@dataclass(frozen=True)
class Batch:
    """What to write after the head of ``ledger_id``: entries with their lines (no newline), a checkpoint or None.

    ``tree`` is the tree state at the new head, kept beside it (None: leave the kept one).
    """

    ledger_id: str | None
    entries: tuple[tuple[LedgerEntry, bytes], ...]
    checkpoint: Checkpoint | None
    tree: TreeState | None = None


class ChainStorage(Protocol):
    """Where a chain is kept: I/O, locking and the storage's own consistency, nothing of the chain's logic."""

    #: What a keyed writer starts instead of extending a foreign chain ("ledger file", "ledger database").
    kind: str

    @property
    def location(self) -> str: ...

    def extend(self, genesis: Genesis | None, build: Callable[[Head], Batch]) -> Batch | None:
        """Lock the chain's end, hand it to ``build`` and write the batch it returns.

        An empty store starts with ``genesis`` (with None it stays empty and None is returned).
        The batch's entries and its checkpoint are written together or not at all (LedgerError,
        or LedgerUnavailableError when the store does not answer), its tree state with them or
        after them (a state that does not stand at the head is recomputed, so it may lag
        behind a crash); a storage may call ``build`` again when it retries. Returns the batch written.
        """
        ...

    def last_checkpoint(self) -> Checkpoint:
        """The newest checkpoint kept with the chain; LedgerError naming what to restore when there is none."""
        ...

    def readable(self) -> contextlib.AbstractContextManager[Path]:
        """The chain as a ledger file (header, then entries by seq), for a full verification."""
        ...

    def place(self, line: int) -> str:
        """Where line ``line`` of :meth:`readable` is, as an error names it."""
        ...


class Chain:
    """Append entries to a chain kept by ``storage``; ``durability`` "fsync" (one write per entry) or "group".

    With ``checkpoint_key`` (the writer's key) every entry is signed, a signed checkpoint of the
    head is kept with the chain's first batch, every ``checkpoint_every`` entries and on
    :meth:`close`, and only a chain this key wrote is extended or checkpointed.
    """

    def __init__(
        self, storage: ChainStorage, *, durability: str, checkpoint_key: Key | None, checkpoint_every: int
    ) -> None:
        if durability not in DURABILITIES:
            raise ValueError("durability is 'fsync' or 'group'")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every is at least 1")
        self.storage = storage
        self.durability = durability
        self.checkpoint_key = checkpoint_key
        self.checkpoint_every = checkpoint_every
        self._trusted = Keyring({checkpoint_key.kid: checkpoint_key}) if checkpoint_key is not None else None
        self._verified = checkpoint_key is None
        self._head: tuple[str | None, int, str] | None = None  # (ledger_id, seq, hash) this writer last wrote
        self._last_checkpoint: Checkpoint | None = None
        self._tree: tuple[str | None, TreeState] | None = None  # the tree at the head this writer last saw
        self._lock = threading.Lock()
        self._group = GroupCommit(self._write_batch, max_batch=512)

    @property
    def location(self) -> str:
        """Where the chain is kept (the ``LedgerStore`` protocol's location)."""
        return self.storage.location

    def append(self, entry: JsonObject) -> JsonDict:
        """Chain and durably write one entry; returns it with seq, previous_hash and entry_hash.

        Raises :class:`LedgerError` if it is not kept (the caller must fail closed).
        """
        if self.durability == "fsync":
            with self._lock:
                return self._write_batch([dict(entry)])[0]
        return self._group.submit(dict(entry))

    def close(self) -> JsonDict | None:
        """With a writer key, keep a signed checkpoint of the current head; returns its wire form (None if empty).

        The head is admitted as for an append, under the same lock: a writer never signs a head
        it would not extend.
        """
        if self.checkpoint_key is None:
            return None
        kept: list[Checkpoint] = []

        def build(head: Head) -> Batch:
            kept.clear()
            self._admit(head)
            last, mark = self._last_checkpoint, (head.ledger_id, head.seq, head.head_hash)
            if head.seq and last is not None and (last.ledger_id, last.seq, last.entry_hash) == mark:
                kept.append(last)  # this head is checkpointed already
            elif head.seq:
                tree = self._tree_at(head)
                kept.append(self._sign_checkpoint(*mark, tree))
                return Batch(head.ledger_id, (), kept[0], tree)
            return Batch(head.ledger_id, (), None)

        with self._lock:
            self.storage.extend(None, build)
        if not kept:
            return None
        self._last_checkpoint = kept[0]
        return kept[0].to_dict()

    def tree_head(self) -> TreeState | None:
        """The Merkle tree at the chain's head (None while it is empty), without reading the chain when it is kept.

        The state is kept beside the head as it stands (so the next writer, or a restart, resumes it).
        """
        found: list[TreeState] = []

        def build(head: Head) -> Batch:
            found.clear()
            if head.seq == 0:
                return Batch(head.ledger_id, (), None)
            found.append(self._tree_at(head))
            return Batch(head.ledger_id, (), None, found[0])

        with self._lock:
            batch = self.storage.extend(None, build)
        if batch is None or not found:
            return None
        self._tree = (batch.ledger_id, found[0])
        return found[0]

    def _write_batch(self, entries: list[JsonDict]) -> list[JsonDict]:
        batch = self.storage.extend(Genesis.new(self.checkpoint_key), lambda head: self._build(head, entries))
        assert batch is not None  # a genesis is given: the storage always builds
        written = [entry.to_dict() for entry, _ in batch.entries]
        last = batch.entries[-1][0]
        self._head = (batch.ledger_id, last.seq, last.entry_hash)
        if batch.tree is not None:
            self._tree = (batch.ledger_id, batch.tree)
        if batch.checkpoint is not None:
            self._last_checkpoint = batch.checkpoint
        return written

    def _build(self, head: Head, events: list[JsonDict]) -> Batch:
        """Admit the head, chain ``events`` after it (and into the tree), and sign a checkpoint when one is due."""
        self._admit(head)
        previous, seq, tree = head.head_hash, head.seq, self._tree_at(head)
        sign = self._sign if self.checkpoint_key is not None else None
        entries = []
        for event in events:
            seq += 1
            entry, line = LedgerEntry.written(event, seq, previous, sign)
            previous, tree = entry.entry_hash, tree.extended(line, entry.entry_hash)
            entries.append((entry, line))
        due = head.created or head.seq // self.checkpoint_every != seq // self.checkpoint_every
        signed = self._sign_checkpoint(head.ledger_id, seq, previous, tree) if self.checkpoint_key and due else None
        return Batch(head.ledger_id, tuple(entries), signed, tree)

    def _tree_at(self, head: Head) -> TreeState:
        """The tree at the head: this writer's own, else the one kept with the chain, else recomputed.

        A state behind the head (another writer appended since, or a crash came between the
        entries and the kept state) is brought forward over the entries after it; one that does
        not lead to the head is dropped, and at worst the tree is recomputed from every entry.
        """
        mine = self._tree[1] if self._tree is not None and self._tree[0] == head.ledger_id else None
        if head.seq == 0:
            return TreeState.empty(head.head_hash)
        if mine is not None and mine.at(head.seq, head.head_hash):
            return mine
        kept = head.kept_tree()
        if kept is not None and kept.at(head.seq, head.head_hash):
            return kept
        for start in (mine, kept, TreeState.empty(head.head_hash)):
            resumed = _replayed(head, start) if start is not None and start.seq < head.seq else None
            if resumed is not None:
                return resumed
        raise LedgerError(
            f"{self.location}: the stored entries do not lead to the chain's head; run `kcp-opa audit verify`"
        )

    def _admit(self, head: Head) -> None:
        """A keyed writer extends and signs only its own chain: its header, its entries, its cut.

        The first time, the whole chain is verified against this writer's last checkpoint (a
        chain with entries and no checkpoint is refused: its cut could not be seen); every time,
        the last entry must carry this writer's signature and the chain must still hold the
        entry this writer last wrote.
        """
        key = self.checkpoint_key
        if key is None or head.created:
            self._verified = True
            return
        where = self.location
        unbound = binding_problem(declared_writer(head.header), key.kid, key.alg)
        if unbound is not None:
            raise LedgerError(f"{where}: {unbound}; a keyed writer starts its own {self.storage.kind}")
        writer = declared_writer(head.header)
        problem = foreign_entry(head.last, writer, self._trusted) if head.last is not None else None
        if problem is not None:
            raise LedgerError(f"{where}: {problem}; refusing to extend or checkpoint it (run `kcp-opa audit verify`)")
        mine = self._head
        if mine is not None and mine[0] == head.ledger_id and (head.seq < mine[1] or not head.holds(mine[1], mine[2])):
            cut = f"ends at seq {head.seq} but this writer wrote seq {mine[1]}"
            changed = f"no longer holds seq {mine[1]} as this writer wrote it"
            raise LedgerError(
                f"{where}: the chain {cut if head.seq < mine[1] else changed}: the ledger was cut or rewritten;"
                " refusing to extend or checkpoint it (run `kcp-opa audit verify`)"
            )
        if not self._verified and head.seq:
            self._verify_once()
        self._verified = True

    def _verify_once(self) -> None:
        """A keyed writer's first write: the whole chain verifies against its own last checkpoint."""
        assert self._trusted is not None and self.checkpoint_key is not None
        anchor = self.storage.last_checkpoint()
        anchor.verify(self._trusted)
        with self.storage.readable() as path:
            report = verify_ledger(
                path,
                anchors=[(anchor.seq, anchor.entry_hash)],
                ledger_id=anchor.ledger_id,
                keyring=self._trusted,
                writer=self.checkpoint_key.kid,
            )
        if not report.ok:
            found = report.problems[0]
            raise LedgerError(f"{self.storage.place(found.line)}: {found.message}; refusing to extend or checkpoint it")

    def _sign(self, entry: JsonDict) -> JsonDict:
        assert self.checkpoint_key is not None
        try:
            return sign_document(entry, self.checkpoint_key, ENTRY_SIGNATURE)
        except KeyringError as exc:  # an HSM that does not answer: the entry is not written
            raise LedgerError(f"{self.location}: cannot sign the entry: {exc}") from None

    def _sign_checkpoint(self, ledger_id: str | None, seq: int, head_hash: str, tree: TreeState) -> Checkpoint:
        assert self.checkpoint_key is not None and tree.at(seq, head_hash)
        try:
            return Checkpoint.sign(ledger_id, seq, head_hash, self.checkpoint_key, tree_root=encode_root(tree.root))
        except KeyringError as exc:
            raise LedgerError(f"{self.location}: cannot sign the checkpoint: {exc}") from None


def _replayed(head: Head, start: TreeState) -> TreeState | None:
    """``start`` brought forward over the stored entries after it; None unless they chain from it to the head."""
    state = start
    for line in head.lines_after(start.seq):
        entry = parse(line)
        if not isinstance(entry, dict) or entry.get("seq") != state.seq + 1:
            return None
        if state.seq and entry.get("previous_hash") != state.entry_hash:
            return None
        state = state.extended(line, str(entry.get("entry_hash")))
        if state.seq == head.seq:
            break
    return state if state.at(head.seq, head.head_hash) else None


def parse(line: bytes | str) -> object:
    """One stored line as JSON, or None when it is not JSON (a torn or foreign line)."""
    try:
        return json.loads(line)
    except ValueError:
        return None


def checkpoint_line(checkpoint: Checkpoint) -> bytes:
    """A checkpoint as every storage keeps it: one canonical JSON line (no newline)."""
    return canonical_json(checkpoint.to_dict())
