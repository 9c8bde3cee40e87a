"""The statements both SQL backends share, written once: a :class:`Dialect` spells them per backend.

What a table holds and how a query filters is the store's logic and lives here; what differs
between SQLite and PostgreSQL (the parameter mark, how an integer and a time are typed, how a
time parameter is cast) is the dialect's. A backend module then renders only what is its own: its
locking, its clock, and the statements no other backend has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.storedtypes import TransferTotals


@dataclass(frozen=True)
class Dialect:
    """How one backend spells the shared statements."""

    #: A parameter mark ("?" or "%s").
    param: str
    #: A parameter that is a time (a cast where the column is a timestamp).
    moment: str
    #: A 64-bit integer column.
    integer: str
    #: A time column.
    time: str
    #: The database's clock, as a column default.
    now: str

    def marks(self, count: int) -> str:
        return ", ".join([self.param] * count)


def answers(probe: Callable[[], object]) -> bool:
    """Whether ``probe`` (a query on the store) runs: a StoreError means unhealthy, and is not raised."""
    try:
        probe()
    except StoreError:
        return False
    return True


CHALLENGE_TABLES = (
    """CREATE TABLE IF NOT EXISTS control_challenges (
    challenge_id TEXT PRIMARY KEY,
    decision_id TEXT NOT NULL,
    action_hash TEXT NOT NULL,
    control TEXT NOT NULL,
    addressed_to TEXT NOT NULL,
    summary TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'consumed')),
    consumed_by TEXT,
    consumed_at TEXT
)""",
    "CREATE INDEX IF NOT EXISTS control_challenges_decision ON control_challenges (decision_id, control)",
)
#: The columns a :class:`~kcp_opa.stores.storedtypes.Challenge` is read from and written to, in its order.
CHALLENGE_COLUMNS = (
    "challenge_id, decision_id, action_hash, control, addressed_to, summary, created_by, created_at,"
    " expires_at, state, consumed_by"
)


#: The columns of an execution claim that both backends keep alike (its times are each backend's).
EXECUTION_COLUMNS = """idempotency_key TEXT PRIMARY KEY,
    action_hash TEXT NOT NULL,
    receipt_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
    outcome TEXT,
    error TEXT"""


def insert_challenge(dialect: Dialect) -> str:
    """The INSERT of one challenge (values: :meth:`~kcp_opa.stores.storedtypes.Challenge.row`)."""
    return f"INSERT INTO control_challenges ({CHALLENGE_COLUMNS}) VALUES ({dialect.marks(11)})"  # noqa: S608


def select_challenge(dialect: Dialect) -> str:
    return f"SELECT {CHALLENGE_COLUMNS} FROM control_challenges WHERE challenge_id = {dialect.param}"  # noqa: S608


def transfers_table(dialect: Dialect) -> str:
    """One row per receipt issued for a value transfer: reserved, then committed or released."""
    return f"""CREATE TABLE IF NOT EXISTS transfers (
    receipt_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    task_type TEXT NOT NULL,
    beneficiary TEXT,
    currency TEXT NOT NULL,
    amount_minor {dialect.integer} NOT NULL CHECK (amount_minor >= 0),
    state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
    reserved_at {dialect.time} NOT NULL,
    expires_at {dialect.time} NOT NULL,
    settled_at {dialect.time}
)"""


TRANSFER_INDEXES = (
    "CREATE INDEX IF NOT EXISTS transfers_by_tenant ON transfers (tenant_id, currency, reserved_at)",
    "CREATE INDEX IF NOT EXISTS transfers_by_beneficiary ON transfers (tenant_id, beneficiary)",
)
_FILTERED = frozenset({"tenant_id", "agent_id", "task_type", "beneficiary"})


def reserve_transfer(dialect: Dialect) -> str:
    """The INSERT of a reserved transfer (its values: ``dataclasses.astuple(transfer)``, in field order)."""
    return (
        "INSERT INTO transfers (receipt_id, tenant_id, agent_id, task_type, beneficiary, currency,"  # noqa: S608
        f" amount_minor, state, reserved_at, expires_at) VALUES ({dialect.marks(7)}, 'reserved',"
        f" {dialect.moment}, {dialect.moment})"
    )


def move_handoff(dialect: Dialect, source: str, target: str, executed_at: str) -> str:
    """The hand-off of (nonce, receipt_id, principal) from state ``source`` to ``target``, if it is there."""
    p = dialect.param
    return (
        f"UPDATE receipt_handoffs SET state = '{target}', executed_at = {executed_at}"  # noqa: S608 - constants
        f" WHERE nonce = {p} AND receipt_id = {p} AND principal = {p} AND state = '{source}'"
    )


def uncommit_transfer(dialect: Dialect) -> str:
    """A consume undone (its execution's intent could not be audited): reserved again, until the receipt expires."""
    p = dialect.param
    return f"UPDATE transfers SET state = 'reserved', settled_at = NULL WHERE receipt_id = {p} AND state = 'committed'"  # noqa: S608


#: One row of a query on the caller's connection (inside a reservation's transaction, or alone).
FetchOne = Callable[[str, tuple[object, ...]], Sequence[Any] | None]


class TransferView:
    """The counting queries (``CounterView``) on one connection, as every SQL backend runs them."""

    def __init__(self, fetch_one: FetchOne, dialect: Dialect) -> None:
        self._one = fetch_one
        self._dialect = dialect

    def transfers(
        self,
        *,
        currency: str,
        since: str,
        now: str,
        where: Sequence[tuple[str, str]] = (),
        task_types: Sequence[str] | None = None,
        excluding: str | None = None,
    ) -> TransferTotals:
        """Transfers reserved in (since, now] that match: committed, or reserved and unexpired.

        ``where`` names columns from a fixed set (anything else is a ValueError); every value
        is a parameter.
        """
        p, at = self._dialect.param, self._dialect.moment
        clauses = [f"currency = {p}", f"reserved_at > {at}", f"reserved_at <= {at}"]
        args: list[object] = [currency, since, now]
        for column, value in where:
            if column not in _FILTERED:
                raise ValueError(column)
            clauses.append(f"{column} = {p}")
            args.append(value)
        if task_types is not None:
            clauses.append(f"task_type IN ({self._dialect.marks(len(task_types))})" if task_types else "1 = 0")
            args.extend(task_types)
        if excluding is not None:
            clauses.append(f"receipt_id <> {p}")
            args.append(excluding)
        query = (
            "SELECT count(*),"  # noqa: S608
            " coalesce(sum(CASE WHEN state = 'committed' THEN amount_minor ELSE 0 END), 0),"
            " coalesce(sum(CASE WHEN state = 'reserved' THEN amount_minor ELSE 0 END), 0)"
            f" FROM transfers WHERE {' AND '.join(clauses)} AND (state = 'committed' OR"
            f" (state = 'reserved' AND expires_at > {at}))"
        )
        row = self._one(query, (*args, now))
        assert row is not None
        return TransferTotals(int(row[0]), int(row[1]), int(row[2]))

    def state(self, receipt_id: str) -> str | None:
        """reserved, committed, released, or None when no transfer was reserved for the receipt."""
        row = self._one(f"SELECT state FROM transfers WHERE receipt_id = {self._dialect.param}", (receipt_id,))  # noqa: S608
        return str(row[0]) if row else None

    def prior_payments(self, tenant_id: str, beneficiary: str) -> int:
        """Committed transfers of the tenant to the beneficiary, ever."""
        p = self._dialect.param
        query = f"SELECT count(*) FROM transfers WHERE tenant_id = {p} AND beneficiary = {p} AND state = 'committed'"  # noqa: S608
        row = self._one(query, (tenant_id, beneficiary))
        return int(row[0]) if row else 0


def fact_tables(dialect: Dialect) -> tuple[str, ...]:
    """Posted fact attestations, found by the action hash or the subject they are bound to."""
    return (
        f"""CREATE TABLE IF NOT EXISTS posted_facts (
    fact_id TEXT PRIMARY KEY,
    issuer TEXT NOT NULL,
    fact TEXT NOT NULL,
    action_hash TEXT,
    subject_id TEXT,
    issued_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    document TEXT NOT NULL,
    expires_epoch {dialect.integer} NOT NULL,
    posted_at {dialect.time} NOT NULL DEFAULT {dialect.now},
    CHECK ((action_hash IS NULL) <> (subject_id IS NULL))
)""",
        "CREATE INDEX IF NOT EXISTS posted_facts_action ON posted_facts (action_hash, issued_at)",
        "CREATE INDEX IF NOT EXISTS posted_facts_subject ON posted_facts (subject_id, issued_at)",
        "CREATE INDEX IF NOT EXISTS posted_facts_expiry ON posted_facts (expires_epoch)",
    )


#: The columns a :class:`~kcp_opa.stores.storedtypes.PostedFact` is read from and written to, in its order.
FACT_COLUMNS = "fact_id, issuer, fact, action_hash, subject_id, issued_at, expires_at, document"


def keep_fact(dialect: Dialect) -> str:
    """The INSERT of one posted fact, kept once (values: :func:`~kcp_opa.stores.storedtypes.fact_row`)."""
    return (
        f"INSERT INTO posted_facts ({FACT_COLUMNS}, expires_epoch) VALUES ({dialect.marks(9)})"  # noqa: S608
        " ON CONFLICT (fact_id) DO NOTHING"
    )


def prune_facts(dialect: Dialect) -> str:
    """The DELETE of the facts that expired before a given time (epoch seconds)."""
    return f"DELETE FROM posted_facts WHERE expires_epoch < {dialect.param}"  # noqa: S608


def facts_bound(dialect: Dialect, column: str) -> str:
    """The newest facts bound to one action hash or subject (``column``), at most a given count."""
    assert column in {"action_hash", "subject_id"}
    return (
        f"SELECT {FACT_COLUMNS} FROM posted_facts WHERE {column} = {dialect.param}"  # noqa: S608
        f" ORDER BY issued_at DESC LIMIT {dialect.param}"
    )


def session_tables(dialect: Dialect) -> tuple[str, ...]:
    """UI sessions and single sign-ons under way, each keyed by the sha256 of its cookie (never the cookie)."""
    return (
        f"""CREATE TABLE IF NOT EXISTS ui_sessions (
    session_key TEXT PRIMARY KEY,
    via TEXT NOT NULL CHECK (via IN ('token', 'oidc')),
    subject TEXT NOT NULL,
    identity TEXT NOT NULL,
    expires_at {dialect.time} NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS ui_sessions_expiry ON ui_sessions (expires_at)",
        f"""CREATE TABLE IF NOT EXISTS ui_sign_ins (
    state_key TEXT PRIMARY KEY,
    nonce TEXT NOT NULL,
    verifier TEXT NOT NULL,
    expires_at {dialect.time} NOT NULL
)""",
        "CREATE INDEX IF NOT EXISTS ui_sign_ins_expiry ON ui_sign_ins (expires_at)",
    )


def session_statements(dialect: Dialect, now: str, later: str) -> dict[str, str]:
    """The session statements, with ``now`` (the clock) and ``later`` (the clock plus a lifetime)
    spelled by the backend: a parameter on SQLite, the database's own ``now()`` on PostgreSQL."""
    p = dialect.param
    return {
        "purge": f"DELETE FROM ui_sessions WHERE expires_at <= {now}",  # noqa: S608 - constants
        "open": f"INSERT INTO ui_sessions (session_key, via, subject, identity, expires_at) VALUES ({p}, {p}, {p}, {p}, {later})",  # noqa: S608, E501
        "get": f"SELECT via, subject, identity FROM ui_sessions WHERE session_key = {p} AND expires_at > {now}",  # noqa: S608
        "close": f"DELETE FROM ui_sessions WHERE session_key = {p}",  # noqa: S608
        "purge_pending": f"DELETE FROM ui_sign_ins WHERE expires_at <= {now}",  # noqa: S608
        "begin": f"INSERT INTO ui_sign_ins (state_key, nonce, verifier, expires_at) VALUES ({p}, {p}, {p}, {later})",  # noqa: S608
        "take": f"DELETE FROM ui_sign_ins WHERE state_key = {p} AND expires_at > {now} RETURNING nonce, verifier",  # noqa: S608
    }
