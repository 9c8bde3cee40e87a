"""The one base every PostgreSQL store shares: a connection pool, migrations, errors, the clock.

One :class:`PostgresDatabase` per location holds a psycopg connection pool that all the stores
of a process share. Every call borrows a connection, runs in one transaction and returns it;
a connection is checked before it is handed out, so after a database restart the next call
gets a fresh one (the gate recovers by itself); while the database is unreachable, failing or
read-only every call raises :class:`~kcp_opa.core.errors.StoreUnavailableError` within the
store timeout (``KCP_OPA_STORE_TIMEOUT`` seconds, default 1; once an outage is known, within a
quarter second), so the gate fails closed and says it is a fault. The outage is logged once when
it starts and once when it ends (``database_unavailable``, ``database_recovered``), for every
pool on that location together; the pool's own per-attempt warnings are not. Times that decide
anything (leases, expiry) are the database's ``now()``, so replicas on machines with skewed
clocks agree.

Credentials never travel in the location: libpq reads ``PGPASSWORD`` or a ``PGPASSFILE``; a
location carrying a password is refused, and what status and errors show is :func:`redact`-ed.

Schema changes are versioned per store kind in ``store_schema`` (as on SQLite) and applied in
one transaction under an advisory lock: the first process to open an older database migrates
it while the others wait, then find it current; a newer schema is refused (``schema_newer``).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import psycopg
import structlog
from psycopg_pool import ConnectionPool

from kcp_opa.core.errors import StoreError, StoreUnavailableError
from kcp_opa.stores.sql import Dialect

T = TypeVar("T")
Connection = psycopg.Connection[tuple[Any, ...]]
#: One schema step: SQL statements run in order inside the migrating transaction.
Step = tuple[str, ...]
#: How PostgreSQL spells the shared statements (times are TIMESTAMPTZ, passed as UTC text and cast).
DIALECT = Dialect(param="%s", moment="%s::timestamptz", integer="BIGINT", time="TIMESTAMPTZ", now="now()")

_VERSIONS = "CREATE TABLE IF NOT EXISTS store_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
_LOCK = "SELECT pg_advisory_xact_lock(7262630)"  # one lock id for every kcp-opa migration
#: Seconds a call may wait for a pooled connection (and a new connection may take) before it is
#: refused ``store_unavailable``: the bound on how long an outage takes to be answered.
TIMEOUT_ENV = "KCP_OPA_STORE_TIMEOUT"
DEFAULT_TIMEOUT_S = 1.0
#: Once an outage is known on a location, a call waits at most this long: a request that touches
#: the store and then the ledger (its refusal audited) is answered within the bound, not twice it.
KNOWN_DOWN_WAIT_S = 0.25
#: How long the pool's background reconnect backs off (1 s, then 2 s) before it gives up and the
#: next call starts a fresh attempt at once: the database back, the pool serves within seconds.
RECONNECT_S = 3.0
_log = structlog.get_logger("kcp_opa.stores.postgres")
# The pool warns on every reconnect attempt ("error connecting in 'pool-1'"); the outage is
# logged here instead, one line when it starts and one when it ends.
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def is_postgres(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def redact(location: str) -> str:
    """The location without any password (what status, logs and errors may show)."""
    try:
        parts = urlsplit(location)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "postgresql://(unparsable location)"
    user = f"{parts.username}@" if parts.username else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def check_location(location: str) -> str:
    """Refuse a location that is not postgresql:// or that carries a password; the redacted form."""
    if not is_postgres(location):
        raise StoreError(f"{redact(location)}: not a postgresql:// location", "store_config")
    try:
        password = urlsplit(location).password
    except ValueError:
        raise StoreError(f"{redact(location)}: cannot parse the store location", "store_config") from None
    if password is not None or "password=" in location:
        raise StoreError(
            f"{redact(location)}: a password in the store location would show in argv and logs;"
            " give it in PGPASSWORD or a PGPASSFILE",
            "store_config",
        )
    return redact(location)


def store_timeout() -> float:
    """The store timeout in seconds: ``KCP_OPA_STORE_TIMEOUT`` (0.1..60), else 1."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.1 <= value <= 60:
        raise StoreError(f"{TIMEOUT_ENV}={raw[:20]!r}: give seconds between 0.1 and 60 (default 1)", "store_config")
    return value


class Reachability:
    """Whether each database location answers, as every pool of the process on it last found.

    The first failure of an outage logs ``database_unavailable`` and the first success after it
    ``database_recovered``: two lines per outage, however many calls and reconnects happen in it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: dict[str, float] = {}  # location -> when the outage was first seen (monotonic)

    def is_down(self, location: str) -> bool:
        return location in self._down

    def failed(self, location: str, reason: str) -> None:
        with self._lock:
            if location in self._down:
                return
            self._down[location] = time.monotonic()
        _log.error("database_unavailable", location=location, error=reason)

    def answered(self, location: str) -> None:
        if location not in self._down:  # the common case: no lock
            return
        with self._lock:
            since = self._down.pop(location, None)
        if since is not None:
            _log.warning("database_recovered", location=location, down_seconds=round(time.monotonic() - since, 1))


REACHABILITY = Reachability()


def _outage(exc: psycopg.Error) -> bool:
    """A failure of the database itself (unreachable, shut down, read-only), not of one statement."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | psycopg.errors.ReadOnlySqlTransaction)


class PostgresDatabase:
    """A pool of connections to one database, shared by every store of the process."""

    def __init__(self, location: str, *, max_size: int = 16, timeout_s: float | None = None) -> None:
        self.location = check_location(location)
        self.timeout_s = store_timeout() if timeout_s is None else timeout_s
        self.pool: ConnectionPool[Connection] = ConnectionPool(
            location,
            min_size=1,
            max_size=max_size,
            timeout=self.timeout_s,
            open=True,
            check=ConnectionPool.check_connection,
            reconnect_timeout=RECONNECT_S,  # a retry gives up after 3 s; the next call starts a fresh one
            kwargs={"connect_timeout": max(2, math.ceil(self.timeout_s)), "application_name": "kcp-opa"},
        )

    def run(self, work: Callable[[Connection], T], failure: str, *, timeout_s: float | None = None) -> T:
        """``work`` in one transaction on a pooled connection; a driver error becomes a StoreUnavailableError."""
        wait = self.timeout_s if timeout_s is None else timeout_s
        if REACHABILITY.is_down(self.location):
            wait = min(wait, KNOWN_DOWN_WAIT_S)
        try:
            with self.pool.connection(timeout=wait) as connection, connection.transaction():
                done = work(connection)
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if _outage(exc):
                REACHABILITY.failed(self.location, reason)
            raise StoreUnavailableError(f"{self.location}: {failure}: {reason}") from None
        REACHABILITY.answered(self.location)
        return done

    def migrate(self, component: str, steps: Sequence[Step]) -> int:
        """Bring ``component`` to ``len(steps)`` atomically; refuse a newer schema. Returns the version."""

        def work(connection: Connection) -> int:
            connection.execute(_LOCK)
            connection.execute(_VERSIONS)
            row = connection.execute("SELECT version FROM store_schema WHERE component = %s", (component,)).fetchone()
            version = int(row[0]) if row else 0
            if version > len(steps):
                raise _Newer(version)
            for step in steps[version:]:
                for statement in step:
                    connection.execute(statement)  # constant schema SQL
            connection.execute(
                "INSERT INTO store_schema (component, version) VALUES (%s, %s)"
                " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                (component, len(steps)),
            )
            return len(steps)

        try:
            return self.run(work, "cannot create or migrate the schema")
        except _Newer as newer:
            raise StoreError(
                f"{self.location}: the {component} schema is version {newer.version}, newer than this"
                f" kcp-opa knows ({len(steps)}): upgrade kcp-opa",
                "schema_newer",
            ) from None

    def close(self) -> None:
        self.pool.close()


class _Newer(Exception):
    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class PostgresBase:
    """A store kind in a PostgreSQL database; subclasses name their ``component`` and ``steps``."""

    component: ClassVar[str]
    steps: ClassVar[Sequence[Step]]
    failure: ClassVar[str] = "store failed"

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database
        self.location = database.location
        database.migrate(self.component, self.steps)

    def _run(self, work: Callable[[Connection], T], failure: str | None = None, *, timeout_s: float | None = None) -> T:
        return self.database.run(work, failure or self.failure, timeout_s=timeout_s)

    def schema_version(self) -> int:
        row = self._run(
            lambda c: c.execute("SELECT version FROM store_schema WHERE component = %s", (self.component,)).fetchone()
        )
        return int(row[0]) if row else 0
