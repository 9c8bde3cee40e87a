"""Where a deployment's stores are opened from one setting: the one place a backend is chosen.

A location is a SQLite file path (all the service's stores in one file, the embedded default)
or a ``postgresql://`` URI (every replica on one database; needs the ``postgres`` extra; the
password comes from ``PGPASSWORD`` or a ``PGPASSFILE``, never from the location). Callers only
ever see the Protocols in :class:`Stores`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.protocols import (
    ChallengeStore,
    CounterStore,
    DecisionStore,
    ExecutorStore,
    FactStore,
    HandoffStore,
    SessionStore,
)
from kcp_opa.stores.sqlite import (
    SQLiteChallengeStore,
    SQLiteCounterStore,
    SQLiteDecisionStore,
    SQLiteHandoffStore,
    SQLiteStore,
)
from kcp_opa.stores.sqlite.facts import SQLiteFactStore

#: The environment variable every command taking a store location reads when none is given.
STORE_ENV = "KCP_OPA_STORE"


def is_database(location: str | Path) -> bool:
    """Whether ``location`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def shown(location: str | Path) -> str:
    """``location`` as status, logs and errors may show it (a database URI without its password)."""
    if not is_database(location):
        return str(location)
    from kcp_opa.stores.postgres.base import redact

    return redact(str(location))


@dataclass(frozen=True)
class Stores:
    """Every store a gate service needs, and where they are (shown in status; never a credential)."""

    executions: ExecutorStore
    handoffs: HandoffStore
    challenges: ChallengeStore
    decisions: DecisionStore
    location: str
    counters: CounterStore | None = None
    #: Fact attestations issuers posted (``POST /v1/facts``); None: this store takes none.
    facts: FactStore | None = None


def _postgres() -> None:
    """Refuse a database location, in one line, when the postgres extra is not installed."""
    try:
        import kcp_opa.stores.postgres  # noqa: F401 - only with the postgres extra
    except ImportError as exc:
        raise StoreError(
            f"a postgresql:// store needs psycopg: pip install 'kcp-opa[postgres]' ({exc})", "store_config"
        ) from None


def open_stores(location: str | Path) -> Stores:
    """Open (creating or migrating, atomically) the stores at ``location``; raises StoreError."""
    if is_database(location):
        _postgres()
        from kcp_opa.stores import postgres
        from kcp_opa.stores.postgres.facts import PostgresFactStore

        database = postgres.PostgresDatabase(str(location))
        try:
            return Stores(
                executions=postgres.PostgresStore(database),
                handoffs=postgres.PostgresHandoffStore(database),
                challenges=postgres.PostgresChallengeStore(database),
                decisions=postgres.PostgresDecisionStore(database),
                location=database.location,
                counters=postgres.PostgresCounterStore(database),
                facts=PostgresFactStore(database),
            )
        except StoreError:
            database.close()
            raise
    path = Path(location)
    return Stores(
        executions=SQLiteStore(path),
        handoffs=SQLiteHandoffStore(path),
        challenges=SQLiteChallengeStore(path),
        decisions=SQLiteDecisionStore(path),
        location=str(path),
        counters=SQLiteCounterStore(path),
        facts=SQLiteFactStore(path),
    )


def open_executor_store(location: str | Path) -> ExecutorStore:
    """Only the executor's store (nonces and executions) at ``location``; raises StoreError."""
    if is_database(location):
        _postgres()
        from kcp_opa.stores import postgres

        database = postgres.PostgresDatabase(str(location))
        try:
            return postgres.PostgresStore(database)
        except StoreError:
            database.close()
            raise
    return SQLiteStore(Path(location))


def migrate(location: str | Path) -> dict[str, int]:
    """Bring every store at ``location`` to this version's schema; the version of each. Refuses a newer one."""
    stores = open_stores(location)
    versions: dict[str, int] = {}
    for store in (
        stores.executions,
        stores.handoffs,
        stores.challenges,
        stores.decisions,
        stores.counters,
        stores.facts,
        open_session_store(location),  # the UI's sessions, in the same store
    ):
        version = getattr(store, "schema_version", None)
        if callable(version):
            versions[str(getattr(store, "component", type(store).__name__))] = int(version())
    return versions


def open_session_store(location: str | Path) -> SessionStore:
    """The UI's sessions at ``location`` (the service's store: replicas on one database share them)."""
    if is_database(location):
        _postgres()
        from kcp_opa.stores.postgres import PostgresDatabase
        from kcp_opa.stores.postgres.sessions import PostgresSessionStore

        database = PostgresDatabase(str(location), max_size=4)
        try:
            return PostgresSessionStore(database)
        except StoreError:
            database.close()
            raise
    from kcp_opa.stores.sqlite.sessions import SQLiteSessionStore

    return SQLiteSessionStore(Path(location))
