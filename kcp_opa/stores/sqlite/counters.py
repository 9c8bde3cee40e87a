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
from dataclasses import astuple
from typing import TypeVar

from kcp_opa.stores import sql
from kcp_opa.stores.sqlite.base import DIALECT, SQLiteBase, statements
from kcp_opa.stores.storedtypes import ReservationKey, Transfer

T = TypeVar("T")

TRANSFERS_TABLE = sql.transfers_table(DIALECT)
#: The consume's second statement (executions.py runs it in the consume's transaction).
COMMIT_TRANSFER = "UPDATE transfers SET state = 'committed', settled_at = ? WHERE receipt_id = ? AND state = 'reserved'"
UNCOMMIT_TRANSFER = sql.uncommit_transfer(DIALECT)
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
    *sql.TRANSFER_INDEXES,
)


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

    def read(self, work: Callable[[sql.TransferView], T]) -> T:
        """``work`` over the counting queries, outside any lock (a decision's counts)."""
        return self._run(lambda connection: work(_view(connection)), "cannot read the counters")

    def reserving(
        self, work: Callable[[sql.TransferView], tuple[T, Transfer | None]], keys: Sequence[ReservationKey] = ()
    ) -> T:
        """Run ``work`` under the write lock; keep the transfer it returns as reserved, in the same transaction.

        An exception from ``work`` rolls back and reserves nothing. ``keys`` are not used: SQLite
        has one writer, so every reservation excludes every other.
        """

        def run(connection: sqlite3.Connection) -> T:
            result, transfer = work(_view(connection))
            if transfer is not None:
                connection.execute(sql.reserve_transfer(DIALECT), astuple(transfer))
            return result

        return self._transaction(run, "cannot reserve the budget")

    def transfer_state(self, receipt_id: str) -> str | None:
        return self.read(lambda view: view.state(receipt_id))

    def release(self, receipt_id: str) -> bool:
        """Give a reservation back (its receipt will not execute); False if there was none to release."""
        cursor = self._run(lambda c: c.execute(RELEASE_TRANSFER, (self.stamp(), receipt_id)), "cannot release")
        return cursor.rowcount == 1


def _view(connection: sqlite3.Connection) -> sql.TransferView:
    return sql.TransferView(lambda query, args: connection.execute(query, args).fetchone(), DIALECT)
