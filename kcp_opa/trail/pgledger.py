"""The audit ledger in PostgreSQL: one chain per deployment, shared by every ``kcp-opa serve`` replica.

The chain (header, seq, previous_hash, writer signature, entry_hash, checkpoints, admission) is
``kcp_opa.trail.chain``'s, as for a file; this module only keeps it, as the same canonical JSON
lines. Dumped in seq order after the header, the database *is* a ledger file, so ``audit
verify/replay/query/export/case`` read it through :func:`kcp_opa.trail.locations.readable`.

An append runs in one transaction that locks the chain head (``kcp_opa.stores.postgres.ledger``):
replicas take turns, so the chain never forks, and concurrent decisions in one process share a
transaction (group commit). The head is checked against its last entry before it is extended
(a tampered head or tail is refused, not built on). A database that is down, failing or
read-only raises :class:`~kcp_opa.core.errors.LedgerUnavailableError` (a ``store_unavailable``
fault): the gate raises it rather than answer, and nothing a caller saw fail is committed. A
writer key binds the chain as it binds a file: the header names the key, every entry is signed,
a checkpoint is committed with the first entry and every ``checkpoint_every`` entries, and a
writer extends only a chain whose last entry its key signed, verified once in full
against its last checkpoint.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError, LedgerUnavailableError, StoreError, StoreUnavailableError
from kcp_opa.core.signing import Key
from kcp_opa.stores.postgres.base import PostgresDatabase
from kcp_opa.stores.postgres.ledger import ChainHead, ChainRow, EntryAt, LinesAfter, PostgresChain
from kcp_opa.stores.sql import answers
from kcp_opa.stores.storedtypes import LedgerSnapshot
from kcp_opa.trail.chain import Batch, Chain, Genesis, Head, checkpoint_line, parse
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoint
from kcp_opa.trail.frontier import TreeState
from kcp_opa.trail.record import LedgerEntry
from kcp_opa.trail.verify import is_header

T = TypeVar("T")
Built = tuple[list[ChainRow], str | None, str | None]


class PostgresChainStorage:
    """A chain in the ``ledger_*`` tables: the head row locked per batch, entries and checkpoint in one transaction."""

    kind = "ledger database"

    def __init__(self, chain: PostgresChain) -> None:
        self.chain = chain
        self.location = chain.location

    def extend(self, genesis: Genesis | None, build: Callable[[Head], Batch]) -> Batch | None:
        """One transaction: lock the head row (inserting ``genesis`` if none), add the batch's rows and checkpoint."""
        header = None if genesis is None else (genesis.ledger_id, genesis.line.decode("utf-8"), genesis.head_hash)
        kept: list[Batch] = []

        def rows(found: ChainHead, entry_at: EntryAt, after: LinesAfter) -> Built:
            kept.clear()
            head = replace(
                self._head(found, entry_at),
                kept_tree=lambda: TreeState.parse(found.tree),
                lines_after=lambda seq: (line.encode("utf-8") for line in after(seq)),
            )
            kept.append(build(head))
            batch = kept[0]
            lines = [(entry.seq, entry.entry_hash, line.decode("utf-8")) for entry, line in batch.entries]
            mark = None if batch.checkpoint is None else checkpoint_line(batch.checkpoint).decode("utf-8")
            return lines, mark, None if batch.tree is None else batch.tree.line().decode("ascii")

        _call(lambda: self.chain.extend(header, rows))
        return kept[0] if kept else None

    def last_checkpoint(self) -> Checkpoint:
        lines = _call(self.chain.checkpoints)
        if not lines:
            raise LedgerError(
                f"{self.location}: this keyed ledger has entries but no checkpoint: its cut could not be detected"
            )
        return read_checkpoint(parse(lines[-1]), f"{self.location}: the last checkpoint")

    @contextlib.contextmanager
    def readable(self) -> Iterator[Path]:
        """The chain dumped from one REPEATABLE READ snapshot into a private file."""
        with tempfile.TemporaryDirectory(prefix="kcp-opa-ledger-") as tmp:
            path = Path(tmp) / "ledger.jsonl"
            with path.open("wb") as sink:
                _call(lambda: self.chain.dump(sink))
            yield path

    def place(self, line: int) -> str:
        return f"{self.location}: seq {line - 1}"

    def _head(self, head: ChainHead, entry_at: EntryAt) -> Head:
        """The locked head row, checked against the header and the entry it names (a tampered row is refused)."""
        parsed = parse(head.header)
        if not is_header(parsed) or canonical_json(parsed).decode("utf-8") != head.header:
            raise LedgerError(f"{self.location}: the ledger header is not a kcp-opa ledger header; run `audit verify`")
        if parsed["ledger_id"] != head.ledger_id:
            raise LedgerError(f"{self.location}: the chain head names another ledger than its header")
        last = parse(head.last) if head.last is not None else None
        if head.seq == 0:
            expected = canonical_hash(parsed)
        elif not isinstance(last, dict) or head.last != canonical_json(last).decode("utf-8"):
            raise LedgerError(f"{self.location}: the chain head's entry seq {head.seq} is missing or not canonical")
        else:
            try:
                typed = LedgerEntry.from_dict(last)
            except LedgerError as exc:
                raise LedgerError(f"{self.location}: the chain head's entry: {exc}") from None
            expected = typed.entry_hash
            if not typed.hash_holds() or typed.seq != head.seq:
                raise LedgerError(f"{self.location}: the entry at seq {head.seq} does not carry its own hash")
        if head.head_hash != expected:
            raise LedgerError(
                f"{self.location}: the chain head ({head.seq}:{head.head_hash}) is not its last entry's hash;"
                " refusing to extend it (run `kcp-opa audit verify`)"
            )

        def holds(seq: int, entry_hash: str) -> bool:
            found = parse(entry_at(seq) or "null")
            return isinstance(found, dict) and found.get("entry_hash") == entry_hash

        at_head = last if isinstance(last, dict) else None  # at seq 0 there is no entry
        return Head(parsed, head.ledger_id, head.seq, head.head_hash, at_head, head.created, holds)


class PostgresLedger(Chain):
    """Append entries to the chain in one PostgreSQL database; ``durability`` "group" (default) or "fsync".

    Both commit before ``append`` returns ("fsync": one transaction per entry; "group": one per
    batch of the entries waiting in this process). The location takes no password (libpq reads
    ``PGPASSWORD`` or a ``PGPASSFILE``).
    """

    def __init__(
        self,
        location: str,
        *,
        durability: str = "group",
        checkpoint_key: Key | None = None,
        checkpoint_every: int = 1000,
        database: PostgresDatabase | None = None,
    ) -> None:
        try:
            self.database = database or PostgresDatabase(location)
            self.chain = PostgresChain(self.database)
        except StoreUnavailableError as exc:
            raise LedgerUnavailableError(str(exc)) from None
        except StoreError as exc:
            raise LedgerError(str(exc)) from None
        super().__init__(
            PostgresChainStorage(self.chain),
            durability=durability,
            checkpoint_key=checkpoint_key,
            checkpoint_every=checkpoint_every,
        )

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LedgerSnapshot | None]:
        """The chain dumped from one REPEATABLE READ snapshot into a private file, as `audit dump` writes it.

        None while the database holds no chain; LedgerUnavailableError when it cannot be read.
        """
        with PostgresChainStorage(self.chain).readable() as path:
            held = path.stat().st_size > 0
            yield LedgerSnapshot(path, self.location, "the PostgreSQL ledger", by_seq=True) if held else None

    def healthy(self) -> bool:
        """Whether the database answers (an append may still fail: it then raises, and the gate denies)."""
        return answers(lambda: self.database.run(lambda c: c.execute("SELECT 1"), "ledger health check"))

    def release(self) -> None:
        """Close the connection pool (a process that is done with the ledger)."""
        self.database.close()


def _call(work: Callable[[], T]) -> T:
    try:
        return work()
    except StoreUnavailableError as exc:  # the database, not the chain: a fault the caller must not dress as a DENY
        raise LedgerUnavailableError(str(exc)) from None
    except StoreError as exc:
        raise LedgerError(str(exc)) from None
