"""SQLite counters: the requests and value transfers the gate recorded, counted for its policies.

Implements :class:`~kcp_opa.stores.protocols.CounterStore` on the shared base (WAL,
``synchronous=FULL``). ``requests`` holds one row per decision on a unit (for KCP rate limits,
per unit and principal); ``transfers`` one row per receipt the gate issued for a value transfer,
``reserved`` when issued, ``committed`` in the consume's own transaction (executions.py),
``released`` when its execution fails or never runs. A reserved row past its ``expires_at``
(the receipt's) no longer counts: the receipt expired unused, so its reservation is released.

Atomicity: a request is inserted first and then counted up to its own row id, so the k-th of
N concurrent requests sees exactly k. A reservation is made under the write lock
(:meth:`SQLiteCounterStore.reserving`): the counts the caller reads there, the decision it
takes on them and the row it reserves are one transaction, so N concurrent issuers against a
budget that allows k reserve at most k.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TypeVar

from kcp_opa.stores.records import Transfer, TransferTotals
from kcp_opa.stores.sqlite.base import SQLiteBase, statements

T = TypeVar("T")

TRANSFERS_TABLE = """CREATE TABLE IF NOT EXISTS transfers (
    receipt_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    task_type TEXT NOT NULL,
    beneficiary TEXT,
    currency TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor >= 0),
    state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
    reserved_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    settled_at TEXT
)"""
#: The consume's second statement (executions.py runs it in the consume's transaction).
COMMIT_TRANSFER = "UPDATE transfers SET state = 'committed', settled_at = ? WHERE receipt_id = ? AND state = 'reserved'"
#: A consume undone (its execution's intent could not be audited): reserved again, until the receipt expires.
UNCOMMIT_TRANSFER = (
    "UPDATE transfers SET state = 'reserved', settled_at = NULL WHERE receipt_id = ? AND state = 'committed'"
)
#: A committed transfer whose execution failed or never ran gives its amount back.
RELEASE_TRANSFER = (
    "UPDATE transfers SET state = 'released', settled_at = ?"
    " WHERE receipt_id = ? AND state IN ('reserved', 'committed')"
)

_TABLES = statements(
    """CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    principal TEXT NOT NULL,
    at TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS requests_by_key ON requests (unit, principal, at)",
    TRANSFERS_TABLE,
    "CREATE INDEX IF NOT EXISTS transfers_by_tenant ON transfers (tenant_id, currency, reserved_at)",
    "CREATE INDEX IF NOT EXISTS transfers_by_beneficiary ON transfers (tenant_id, beneficiary)",
)


class _View:
    """The counting queries on one connection (inside a reservation's transaction, or alone)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

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
        clauses = ["currency = ?", "reserved_at > ?", "reserved_at <= ?"]
        args: list[str | int] = [currency, since, now]
        for column, value in where:
            if column not in {"tenant_id", "agent_id", "task_type", "beneficiary"}:
                raise ValueError(column)
            clauses.append(f"{column} = ?")
            args.append(value)
        if task_types is not None:
            clauses.append(f"task_type IN ({', '.join('?' for _ in task_types)})")
            args.extend(task_types)
        if excluding is not None:
            clauses.append("receipt_id != ?")
            args.append(excluding)
        matching = " AND ".join(clauses)  # columns from a fixed set; every value is a parameter
        query = (
            "SELECT count(*),"  # noqa: S608
            " coalesce(sum(CASE WHEN state = 'committed' THEN amount_minor ELSE 0 END), 0),"
            " coalesce(sum(CASE WHEN state = 'reserved' THEN amount_minor ELSE 0 END), 0)"
            f" FROM transfers WHERE {matching} AND (state = 'committed' OR"
            " (state = 'reserved' AND expires_at > ?))"
        )
        row = self.connection.execute(query, (*args, now)).fetchone()
        return TransferTotals(int(row[0]), int(row[1]), int(row[2]))

    def prior_payments(self, tenant_id: str, beneficiary: str) -> int:
        row = self.connection.execute(
            "SELECT count(*) FROM transfers WHERE tenant_id = ? AND beneficiary = ? AND state = 'committed'",
            (tenant_id, beneficiary),
        ).fetchone()
        return int(row[0])


class SQLiteCounterStore(SQLiteBase):
    """Requests and value transfers in a SQLite file (usually the executor's: see executions.py)."""

    component = "counters"
    steps = (_TABLES,)
    failure = "counter store failed"

    def count_request(self, unit: str, principal: str, at: str, since: Sequence[str]) -> list[int]:
        """Record one request at ``at``; per start in ``since``, the requests from it up to this one."""

        def work(connection: sqlite3.Connection) -> list[int]:
            cursor = connection.execute(
                "INSERT INTO requests (unit, principal, at) VALUES (?, ?, ?)", (unit, principal, at)
            )
            mine = cursor.lastrowid
            return [
                int(
                    connection.execute(
                        "SELECT count(*) FROM requests"
                        " WHERE unit = ? AND principal = ? AND id <= ? AND at > ? AND at <= ?",
                        (unit, principal, mine, start, at),
                    ).fetchone()[0]
                )
                for start in since
            ]

        return self._transaction(work, "cannot count the request")

    def read(self, work: Callable[[_View], T]) -> T:
        """``work`` over the counting queries, outside any lock (a decision's counts)."""
        return self._run(lambda connection: work(_View(connection)), "cannot read the counters")

    def reserving(self, work: Callable[[_View], tuple[T, Transfer | None]]) -> T:
        """Run ``work`` under the write lock; keep the transfer it returns as reserved, in the same transaction.

        An exception from ``work`` rolls back and reserves nothing.
        """

        def run(connection: sqlite3.Connection) -> T:
            result, transfer = work(_View(connection))
            if transfer is not None:
                connection.execute(
                    "INSERT INTO transfers (receipt_id, tenant_id, agent_id, task_type, beneficiary, currency,"
                    " amount_minor, state, reserved_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?)",
                    (
                        transfer.receipt_id,
                        transfer.tenant_id,
                        transfer.agent_id,
                        transfer.task_type,
                        transfer.beneficiary,
                        transfer.currency,
                        transfer.amount_minor,
                        transfer.reserved_at,
                        transfer.expires_at,
                    ),
                )
            return result

        return self._transaction(run, "cannot reserve the budget")

    def transfer_state(self, receipt_id: str) -> str | None:
        """reserved, committed, released, or None when no transfer was reserved for the receipt."""
        row = self._run(
            lambda c: c.execute("SELECT state FROM transfers WHERE receipt_id = ?", (receipt_id,)).fetchone()
        )
        return str(row[0]) if row else None

    def release(self, receipt_id: str) -> bool:
        """Give a reservation back (its receipt will not execute); False if there was none to release."""
        cursor = self._run(lambda c: c.execute(RELEASE_TRANSFER, (self.stamp(), receipt_id)), "cannot release")
        return cursor.rowcount == 1
