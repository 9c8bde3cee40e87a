"""PostgreSQL counters: the requests and value transfers every replica recorded, counted alike.

Implements :class:`~kcp_opa.stores.protocols.CounterStore` with the semantics of the SQLite
one (kcp_opa.stores.sqlite.counters): ``requests`` holds one row per decision on a unit,
``transfers`` one row per receipt issued for a value transfer, ``reserved`` when issued,
``committed`` in the consume's own transaction (executions.py), ``released`` when its execution
fails or never runs; a reserved row past its ``expires_at`` no longer counts.

The concurrency is the database's, so it holds across replicas on many machines (a Python lock
would hold in one process only):

- A request first upserts its (unit, principal) row in ``request_heads``: the row lock it
  takes is held until the transaction commits, so the requests of one key are recorded one
  after the other, each counting (on a fresh READ COMMITTED snapshot, taken after the lock) every
  request committed before it: of N concurrent requests the k-th sees exactly k.
- A reservation first takes transaction-scoped advisory locks on the keys its transfer is
  filed under (tenant, agent, task type: :class:`~kcp_opa.stores.storedtypes.ReservationKey`),
  exclusive on each key it reads counts under, shared on the others; the counts read under them,
  the decision taken on them and the row reserved commit together, and the next reserver that
  reads any of those keys reads them only after that commit. So N concurrent issuers against a
  budget that allows k reserve at most k, while reservations that share no key one of them reads
  (two tenants under per-tenant budgets) do not wait for each other. Every reservation first
  holds one global key shared; a reservation given no keys holds it exclusive and waits for all.
  The keys are taken in one order (the global key, then by lock id), so two reservers never
  deadlock on them; a hash collision between two keys only makes them wait for each other.

Windows are counted from the decision time the caller passes (the time archived with the
input, so a replay counts alike); settling (commit, release) is stamped with ``now()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple
from typing import TypeVar

from kcp_opa.stores import sql
from kcp_opa.stores.postgres.base import DIALECT, Connection, PostgresBase
from kcp_opa.stores.storedtypes import ReservationKey, Transfer

T = TypeVar("T")

TRANSFERS_TABLE = sql.transfers_table(DIALECT)
#: The consume's second statement (executions.py runs it in the consume's transaction).
COMMIT_TRANSFER = (
    "UPDATE transfers SET state = 'committed', settled_at = now() WHERE receipt_id = %s AND state = 'reserved'"
)
UNCOMMIT_TRANSFER = sql.uncommit_transfer(DIALECT)
#: A transfer whose execution failed or never ran gives its amount back.
RELEASE_TRANSFER = (
    "UPDATE transfers SET state = 'released', settled_at = now()"
    " WHERE receipt_id = %s AND state IN ('reserved', 'committed')"
)

_TABLES = (
    """CREATE TABLE IF NOT EXISTS requests (
    id BIGSERIAL PRIMARY KEY,
    unit TEXT NOT NULL,
    principal TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS requests_by_key ON requests (unit, principal, at)",
    """CREATE TABLE IF NOT EXISTS request_heads (
    unit TEXT NOT NULL,
    principal TEXT NOT NULL,
    requests BIGINT NOT NULL,
    PRIMARY KEY (unit, principal)
)""",
    TRANSFERS_TABLE,
    *sql.TRANSFER_INDEXES,
)

#: The advisory lock every reservation holds first: shared when it names its keys, exclusive when not.
GLOBAL_LOCK_ID = 7262631
_LOCK = {True: "SELECT pg_advisory_xact_lock(%s)", False: "SELECT pg_advisory_xact_lock_shared(%s)"}
_HEAD_REQUEST = (
    "INSERT INTO request_heads (unit, principal, requests) VALUES (%s, %s, 1)"
    " ON CONFLICT (unit, principal) DO UPDATE SET requests = request_heads.requests + 1"
)
_COUNT_REQUESTS = (
    "SELECT count(r.id) FROM unnest(%s::timestamptz[]) WITH ORDINALITY AS s(start, i)"
    " LEFT JOIN requests r ON r.unit = %s AND r.principal = %s AND r.id <= %s"
    " AND r.at > s.start AND r.at <= %s::timestamptz GROUP BY s.i ORDER BY s.i"
)


class PostgresCounterStore(PostgresBase):
    """Requests and value transfers in the database every replica shares (with the executor store's)."""

    component = "counters"
    steps = (_TABLES,)
    failure = "counter store failed"

    def count_request(self, unit: str, principal: str, at: str, since: Sequence[str]) -> list[int]:
        """Record one request at ``at``; per start in ``since``, the requests from it up to this one."""

        def work(c: Connection) -> list[int]:
            c.execute(_HEAD_REQUEST, (unit, principal))  # the key's row lock, to the commit
            row = c.execute(
                "INSERT INTO requests (unit, principal, at) VALUES (%s, %s, %s::timestamptz) RETURNING id",
                (unit, principal, at),
            ).fetchone()
            assert row is not None
            counts = c.execute(_COUNT_REQUESTS, (list(since), unit, principal, row[0], at)).fetchall()
            return [int(n) for (n,) in counts]

        return self._run(work, "cannot count the request")

    def read(self, work: Callable[[sql.TransferView], T]) -> T:
        """``work`` over the counting queries, without the lock (a decision's counts)."""
        return self._run(lambda c: work(_view(c)), "cannot read the counters")

    def reserving(
        self, work: Callable[[sql.TransferView], tuple[T, Transfer | None]], keys: Sequence[ReservationKey] = ()
    ) -> T:
        """Run ``work`` under the locks of ``keys`` (the module's note); keep the transfer it returns
        as reserved, in the same transaction. An exception from ``work`` rolls back and reserves nothing."""

        def run(c: Connection) -> T:
            for lock_id, exclusive in lock_order(keys):
                c.execute(_LOCK[exclusive], (lock_id,))
            result, transfer = work(_view(c))
            if transfer is not None:
                c.execute(sql.reserve_transfer(DIALECT), astuple(transfer))
            return result

        return self._run(run, "cannot reserve the budget")

    def transfer_state(self, receipt_id: str) -> str | None:
        return self.read(lambda view: view.state(receipt_id))

    def release(self, receipt_id: str) -> bool:
        """Give a reservation back (its receipt will not execute); False if there was none to release."""
        return self._run(lambda c: c.execute(RELEASE_TRANSFER, (receipt_id,)).rowcount == 1, "cannot release")


def lock_order(keys: Sequence[ReservationKey]) -> list[tuple[int, bool]]:
    """(advisory lock id, exclusive) in the order every reservation takes them."""
    by_id: dict[int, bool] = {}
    for key in keys:
        by_id[key.lock_id()] = by_id.get(key.lock_id(), False) or key.reads
    return [(GLOBAL_LOCK_ID, not keys), *sorted(by_id.items())]


def _view(connection: Connection) -> sql.TransferView:
    return sql.TransferView(lambda query, args: connection.execute(query, args).fetchone(), DIALECT)
