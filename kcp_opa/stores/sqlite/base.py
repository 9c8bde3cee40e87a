"""The one base every SQLite store shares: connections, pragmas, migrations, errors, the clock.

A connection belongs to the thread and process that opened it (kept per thread, reopened after
a fork), in autocommit mode so each statement is its own transaction unless a method opens one.
WAL with ``synchronous=FULL`` by default: a write is durable when its transaction commits.

Schema changes are versioned per store kind in a ``store_schema`` table and applied inside one
``BEGIN IMMEDIATE`` transaction: the first process to open a new or older file migrates it
while every other one waits on the write lock and then finds the schema current. (A check of
the columns followed by ``ALTER TABLE`` outside that lock let two processes both add a column.)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

from kcp_opa.core.errors import StoreError, StoreUnavailableError
from kcp_opa.stores.sql import Dialect

T = TypeVar("T")
#: One schema step: run on the migrating connection, inside the write transaction.
Step = Callable[[sqlite3.Connection], None]
MICROS = "%Y-%m-%dT%H:%M:%S.%fZ"
#: How SQLite spells the shared statements (times are UTC text in ``MICROS``, compared as strings).
DIALECT = Dialect(param="?", moment="?", integer="INTEGER", time="TEXT", now="(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))")

_VERSIONS = "CREATE TABLE IF NOT EXISTS store_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"


def statements(*sql: str) -> Step:
    """A step that runs each statement in order (no scripts: executescript would commit early)."""

    def run(connection: sqlite3.Connection) -> None:
        for statement in sql:
            connection.execute(statement)

    return run


def add_column(table: str, column: str, kind: str) -> Step:
    """A step adding a column a file made by an older version lacks (safe: it runs under the write lock)."""

    def run(connection: sqlite3.Connection) -> None:
        if column not in {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}:
            connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    return run


@contextlib.contextmanager
def immediate(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction (the write lock taken up front): committed when the
    block ends, rolled back on any exception. Every SQLite transaction of the stores is this one."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def utc_stamp(moment: dt.datetime, fmt: str = MICROS) -> str:
    """``moment`` as UTC text in ``fmt``, whatever its zone (the stores compare these as strings)."""
    return moment.astimezone(dt.UTC).strftime(fmt)


def _create_private(path: Path) -> None:
    """Create the store file owner-only (0600) before SQLite opens it: it holds the desk's sealing
    key and may hold the receipt key; SQLite gives its -wal and -shm files the same mode."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _narrow(path)
        return
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the store: {exc.strerror or exc}") from None
    os.close(descriptor)


def _narrow(path: Path) -> None:
    """A store file (or its -wal/-shm) that others may read, made by an older kcp-opa or another
    umask, is narrowed to 0600 when its owner opens it: the sealing key must not stay readable."""
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            status = file.lstat()
            if stat.S_ISREG(status.st_mode) and status.st_mode & 0o077 and status.st_uid == os.geteuid():
                file.chmod(0o600)
        except FileNotFoundError:
            continue
        except OSError as exc:
            reason = exc.strerror or exc
            raise StoreError(f"{file}: readable by others and cannot be narrowed to 0600: {reason}") from None


class SQLiteBase:
    """A store kind in a SQLite file; subclasses name their ``component`` and its ``steps``.

    ``steps[i]`` takes the component from version ``i`` to ``i + 1``; a step must also hold on a
    file written before versions were recorded (``CREATE ... IF NOT EXISTS``, :func:`add_column`).
    """

    component: ClassVar[str]
    steps: ClassVar[Sequence[Step]]
    synchronous: ClassVar[str] = "FULL"
    #: The words after the path in a StoreError ("<path>: <failure>: <driver message>").
    failure: ClassVar[str] = "store failed"

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, clock: Callable[[], dt.datetime] = utc_now
    ) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.clock = clock
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _create_private(self.path)
        self._run(self._migrate, "cannot create or migrate the schema")

    # ------------------------------------------------------------------ connections

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        self._journal_wal(connection)
        connection.execute(f"PRAGMA synchronous={self.synchronous}")
        return connection

    def _journal_wal(self, connection: sqlite3.Connection) -> None:
        """Switch to WAL; on a brand-new file racing openers may get SQLITE_BUSY here, so wait like the lock."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _connection(self) -> sqlite3.Connection:
        pid = os.getpid()
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None or getattr(self._local, "pid", None) != pid:
            connection = self._local.connection = self._connect()
            self._local.pid = pid
        return connection

    def _run(self, work: Callable[[sqlite3.Connection], T], failure: str | None = None) -> T:
        """Run ``work`` on this thread's connection; a driver error becomes a StoreError naming the file."""
        try:
            return work(self._connection())
        except sqlite3.Error as exc:  # the file cannot be read or written now: a fault, never an answer
            raise StoreUnavailableError(f"{self.path}: {failure or self.failure}: {exc}") from None

    def _transaction(self, work: Callable[[sqlite3.Connection], T], failure: str | None = None) -> T:
        """``work`` in one ``BEGIN IMMEDIATE`` transaction (rolled back on any exception)."""

        def run(connection: sqlite3.Connection) -> T:
            with immediate(connection):
                return work(connection)

        return self._run(run, failure)

    # ------------------------------------------------------------------ schema and clock

    def _migrate(self, connection: sqlite3.Connection) -> None:
        """Bring this component's schema to the current version, atomically (see the module's note)."""
        with immediate(connection):
            connection.execute(_VERSIONS)
            row = connection.execute(
                "SELECT version FROM store_schema WHERE component = ?", (self.component,)
            ).fetchone()
            version = int(row[0]) if row else 0
            if version > len(self.steps):
                raise StoreError(
                    f"{self.path}: the {self.component} schema is version {version}, newer than this"
                    f" kcp-opa knows ({len(self.steps)}): upgrade kcp-opa",
                    "schema_newer",
                )
            for step in self.steps[version:]:
                step(connection)
            connection.execute(
                "INSERT INTO store_schema (component, version) VALUES (?, ?)"
                " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                (self.component, len(self.steps)),
            )

    def schema_version(self) -> int:
        row = self._run(
            lambda c: c.execute("SELECT version FROM store_schema WHERE component = ?", (self.component,)).fetchone()
        )
        return int(row[0]) if row else 0

    def stamp(self, moment: dt.datetime | None = None, fmt: str = MICROS) -> str:
        """``moment`` (default: the clock's now) as UTC text (see :func:`utc_stamp`)."""
        return utc_stamp(moment or self.clock(), fmt)

    def close(self) -> None:
        """Close this thread's connection (others close with their threads)."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None
