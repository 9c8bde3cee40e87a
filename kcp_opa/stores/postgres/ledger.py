"""The audit ledger's rows in PostgreSQL: one chain per database, extended by every replica on it.

This is storage only: which bytes an entry has is the trail's business (``kcp_opa.trail.pgledger``);
here an entry is a canonical JSON line kept verbatim (``line``), so what an auditor reads back is
byte for byte what a file ledger would hold. ``ledger_chain`` is a single row (the header line and
the head: last seq and hash). An append locks that row (``SELECT ... FOR UPDATE``) in the same
transaction that inserts the entries and moves the head, so two writers on any machines take
turns: the next seq and previous hash always come from the committed head, and the chain never
forks. ``ledger_entries.seq`` is the primary key as a second wall: a fork would be a duplicate.
``ledger_chain.tree`` keeps, in the same row and transaction, the trail's Merkle tree state at the head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import psycopg

from kcp_opa.core.errors import StoreError, StoreUnavailableError
from kcp_opa.stores.postgres.base import Connection, PostgresBase, check_location

_TABLES = (
    """CREATE TABLE IF NOT EXISTS ledger_chain (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    ledger_id TEXT NOT NULL,
    header TEXT NOT NULL,
    seq BIGINT NOT NULL CHECK (seq >= 0),
    head_hash TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS ledger_entries (
    seq BIGINT PRIMARY KEY CHECK (seq >= 1),
    entry_hash TEXT NOT NULL,
    line TEXT NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT now()
)""",
    """CREATE TABLE IF NOT EXISTS ledger_checkpoints (
    id BIGSERIAL PRIMARY KEY,
    seq BIGINT NOT NULL,
    line TEXT NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT now()
)""",
)
_TREE = ("ALTER TABLE ledger_chain ADD COLUMN IF NOT EXISTS tree TEXT",)


@dataclass(frozen=True)
class ChainHead:
    """The locked head: the header line, the last seq and hash, the last entry's line (None at 0)."""

    ledger_id: str
    header: str
    seq: int
    head_hash: str
    last: str | None
    created: bool
    tree: str | None = None


#: One entry to insert: its seq, hash and canonical line (without the newline).
ChainRow = tuple[int, str, str]
#: The line of the entry at a seq, read inside the append transaction (the head row is locked).
EntryAt = Callable[[int], str | None]
#: The lines of the entries after a seq, in order, read inside the append transaction.
LinesAfter = Callable[[int], Iterator[str]]
#: (the locked head, readers inside the transaction) -> rows to add, a checkpoint line or None, a tree state or None.
Builder = Callable[[ChainHead, EntryAt, LinesAfter], tuple[list[ChainRow], str | None, str | None]]


class PostgresChain(PostgresBase):
    """The ``ledger_chain``, ``ledger_entries`` and ``ledger_checkpoints`` tables."""

    component = "ledger"
    steps = (_TABLES, _TREE)
    failure = "audit ledger failed"

    def extend(self, header: tuple[str, str, str] | None, build: Builder) -> list[ChainRow]:
        """Lock the head (creating it from ``header`` = (ledger_id, line, hash) if none), add what ``build`` gives.

        With no ``header`` and no chain, nothing is written and ``build`` is not called.

        One transaction: the rows, the new head and the checkpoint ``build`` returns commit
        together or not at all. ``build`` may raise to refuse the batch (nothing is written).
        """

        def work(connection: Connection) -> list[ChainRow]:
            head = _locked(connection)
            created = head is None
            if head is None:
                if header is None:
                    return []
                connection.execute(
                    "INSERT INTO ledger_chain (id, ledger_id, header, seq, head_hash) VALUES (1, %s, %s, 0, %s)"
                    " ON CONFLICT (id) DO NOTHING",
                    header,
                )
                head = _locked(connection)
                assert head is not None
            ledger_id, line, seq, head_hash, tree = head

            def entry_at(wanted: int) -> str | None:
                row = connection.execute("SELECT line FROM ledger_entries WHERE seq = %s", (wanted,)).fetchone()
                return None if row is None else str(row[0])

            def lines_after(after: int) -> Iterator[str]:
                query = "SELECT line FROM ledger_entries WHERE seq > %s ORDER BY seq"
                for (found,) in connection.execute(query, (after,)):
                    yield str(found)

            last = entry_at(seq) if seq else None
            found = ChainHead(ledger_id, line, seq, head_hash, last, created, tree)
            rows, checkpoint, kept = build(found, entry_at, lines_after)
            if rows:
                with connection.cursor() as cursor:
                    cursor.executemany("INSERT INTO ledger_entries (seq, entry_hash, line) VALUES (%s, %s, %s)", rows)
                connection.execute(
                    "UPDATE ledger_chain SET seq = %s, head_hash = %s, tree = %s WHERE id = 1", (*rows[-1][:2], kept)
                )
            elif kept is not None:
                connection.execute("UPDATE ledger_chain SET tree = %s WHERE id = 1", (kept,))
            if checkpoint is not None:
                connection.execute(
                    "INSERT INTO ledger_checkpoints (seq, line) VALUES (%s, %s)",
                    (rows[-1][0] if rows else seq, checkpoint),
                )
            return rows

        return self._run(work, "audit write failed")

    def head(self) -> tuple[str, str, int, str] | None:
        """(ledger_id, header line, seq, head hash), or None before the first entry."""
        return self._run(_head, "cannot read the ledger head")

    def checkpoints(self) -> list[str]:
        """Every checkpoint line, oldest first."""
        rows = self._run(lambda c: c.execute("SELECT line FROM ledger_checkpoints ORDER BY id").fetchall())
        return [str(row[0]) for row in rows]

    def dump(self, sink: IO[bytes]) -> int:
        """Write the ledger as JSON Lines (header, then entries by seq) from one snapshot; the entry count."""
        try:
            with self.database.pool.connection() as connection:
                return _dump(connection, sink).entries
        except psycopg.Error as exc:
            raise StoreUnavailableError(f"{self.location}: cannot read the ledger: {_reason(exc)}") from None


@dataclass(frozen=True)
class Dumped:
    """What a dump read besides the lines: the entry count, the checkpoint lines, the kept tree state."""

    entries: int
    checkpoints: list[str]
    tree: str | None


def read_chain(location: str, sink: IO[bytes], *, timeout_s: int = 5) -> Dumped:
    """Dump the ledger at ``location`` to ``sink`` on one read-only connection, with its checkpoints and tree.

    What an auditor runs: no pool, no schema change, so a read-only database role suffices.
    """
    shown = check_location(location)
    try:
        with psycopg.connect(location, connect_timeout=timeout_s, application_name="kcp-opa-audit") as connection:
            return _dump(connection, sink)
    except psycopg.Error as exc:
        raise StoreError(f"{shown}: cannot read the ledger: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _exists(connection: Connection, table: str) -> bool:
    row = connection.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row and row[0])


def _dump(connection: Connection, sink: IO[bytes]) -> Dumped:
    """The header and every entry line to ``sink``, the checkpoint lines and the kept tree state, from one snapshot.

    REPEATABLE READ: a checkpoint committed after the entries were read is not in this dump
    either (it would name a seq the dump lacks).
    """
    count = -1
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        if not _exists(connection, "ledger_chain"):
            return Dumped(0, [], None)
        for line in _lines(connection):
            sink.write(line.encode("utf-8") + b"\n")
            count += 1
        rows = connection.execute("SELECT line FROM ledger_checkpoints ORDER BY id").fetchall()
        tree = None
        if _has_tree(connection):
            found = connection.execute("SELECT tree FROM ledger_chain WHERE id = 1").fetchone()
            tree = None if found is None or found[0] is None else str(found[0])
    return Dumped(max(count, 0), [str(row[0]) for row in rows], tree)


def _has_tree(connection: Connection) -> bool:
    """Whether ``ledger_chain`` has the tree column (a database an older kcp-opa wrote may not)."""
    query = "SELECT 1 FROM information_schema.columns WHERE table_name = 'ledger_chain' AND column_name = 'tree'"
    return connection.execute(query).fetchone() is not None


def _head(connection: Connection) -> tuple[str, str, int, str] | None:
    row = connection.execute("SELECT ledger_id, header, seq, head_hash FROM ledger_chain WHERE id = 1").fetchone()
    return None if row is None else (str(row[0]), str(row[1]), int(row[2]), str(row[3]))


def _locked(connection: Connection) -> tuple[str, str, int, str, str | None] | None:
    row = connection.execute(
        "SELECT ledger_id, header, seq, head_hash, tree FROM ledger_chain WHERE id = 1 FOR UPDATE"
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]), int(row[2]), str(row[3]), row[4])


def _lines(connection: Connection) -> Iterator[str]:
    row = connection.execute("SELECT header FROM ledger_chain WHERE id = 1").fetchone()
    if row is None:
        return
    yield str(row[0])
    with connection.cursor(name="kcp_opa_ledger_dump") as cursor:
        cursor.itersize = 2000
        cursor.execute("SELECT line FROM ledger_entries ORDER BY seq")
        for (line,) in cursor:
            yield str(line)
