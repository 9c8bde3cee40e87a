"""SQLite state for the executor: consumed receipts and executions, safe across processes.

Implements :class:`~kcp_opa.stores.protocols.NonceStore` and
:class:`~kcp_opa.stores.protocols.ExecutionStore` on :class:`~kcp_opa.stores.sqlite.base.SQLiteBase`
(WAL, ``synchronous=FULL``: every consume and every execution state change is durable when its
transaction commits, the durability of the KYA reference's fresh-connection pattern). One
connection per thread and process is kept open, so a consume is one short write transaction.
Uniqueness is the database's job (primary keys), so two processes can never both consume one
nonce or both claim one idempotency key.

A claim carries a lease (``lease_expires_at``). A claim still ``running`` after its lease is
reported as ``ambiguous``: its process died (or hung) between the claim and the outcome, so
nobody can tell whether the side effect happened. Only :meth:`SQLiteStore.reconcile` (an
operator, with evidence) resolves it; a retry never runs the handler again.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
from pathlib import Path

from kcp_opa.core.errors import StoreError
from kcp_opa.core.groupcommit import GroupCommit
from kcp_opa.stores.sql import EXECUTION_COLUMNS
from kcp_opa.stores.sqlite.base import SQLiteBase, add_column, immediate, statements
from kcp_opa.stores.sqlite.counters import COMMIT_TRANSFER, RELEASE_TRANSFER, TRANSFERS_TABLE, UNCOMMIT_TRANSFER
from kcp_opa.stores.storedtypes import AMBIGUOUS, ExecutionRecord, check_reconcile, reconciled

_TABLES = statements(
    """CREATE TABLE IF NOT EXISTS consumed_receipts (
    nonce TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    expires_at TEXT NOT NULL,
    consumed_at TEXT NOT NULL
)""",
    f"""CREATE TABLE IF NOT EXISTS executions (
    {EXECUTION_COLUMNS},
    started_at TEXT NOT NULL,
    finished_at TEXT
)""",
    """CREATE TABLE IF NOT EXISTS reconciliations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL,
    outcome TEXT NOT NULL,
    evidence TEXT NOT NULL,
    receipt_id TEXT NOT NULL,
    claimed_at TEXT NOT NULL,
    at TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    code TEXT NOT NULL,
    receipt_id TEXT,
    action_hash TEXT,
    message TEXT NOT NULL
)""",
)

_CONSUME = "INSERT INTO consumed_receipts (nonce, receipt_id, expires_at, consumed_at) VALUES (?, ?, ?, ?)"
_CLAIM = (
    "INSERT INTO executions (idempotency_key, action_hash, receipt_id, state, started_at, lease_expires_at)"
    " VALUES (?, ?, ?, 'running', ?, ?)"
)
_COUNTED = frozenset({"consumed_receipts", "executions", "refusals", "reconciliations"})


class SQLiteStore(SQLiteBase):
    """Nonce store (``consume``) and execution ledger in one SQLite file (WAL).

    With ``group_commit`` (the default), consumes from all threads of a process go through one
    writer thread that commits whatever is waiting in a single transaction: one fsync for the
    batch, and no caller returns before its consume is durable. Each insert still succeeds or
    fails on its own (a duplicate aborts only its statement), so the answer per receipt is exact.
    """

    component = "executions"
    #: v1: the tables; v2: leases (a file made before leases gains the column in place); v3: budget
    #: reservations (counters.py), committed in the consume's own transaction.
    steps = (_TABLES, add_column("executions", "lease_expires_at", "TEXT"), statements(TRANSFERS_TABLE))
    failure = "executor store failed"

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0, group_commit: bool = True) -> None:
        super().__init__(path, busy_timeout_s=busy_timeout_s)
        self.group_commit = group_commit
        self._inflight_lock = threading.Lock()
        self._inflight = 0
        self._group = GroupCommit(self._consume_batch, max_batch=256)

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        """Atomically and durably remember a receipt; False if its nonce or receipt id was seen before.

        The receipt's budget reservation (if any) is committed in the same transaction: a receipt
        consumed is a budget spent, and a consume that fails spends nothing.
        """
        with self._inflight_lock:
            alone = self._inflight == 0
            self._inflight += 1
        try:
            if alone or not self.group_commit:
                # Nobody to share a commit with: commit directly (no hand-off to the writer).
                return self._consume_batch([(nonce, receipt_id, expires_at)])[0]
            return self._group.submit((nonce, receipt_id, expires_at))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record the receipt as consumed: {exc}") from None
        finally:
            with self._inflight_lock:
                self._inflight -= 1

    def _consume_batch(self, batch: list[tuple[str, str, str]]) -> list[bool]:
        """One transaction for the waiting consumes (runs on the group-commit writer thread)."""
        results: list[bool] = []
        # a driver error rolls back the whole batch: nothing in it was consumed, every caller fails closed
        with immediate(self._connection()) as connection:
            stamp = self.stamp()
            for nonce, receipt_id, expires_at in batch:
                try:
                    connection.execute("SAVEPOINT one")
                    connection.execute(_CONSUME, (nonce, receipt_id, expires_at, stamp))
                    connection.execute(COMMIT_TRANSFER, (stamp, receipt_id))
                    connection.execute("RELEASE one")
                    results.append(True)
                except sqlite3.IntegrityError:
                    connection.execute("ROLLBACK TO one")
                    connection.execute("RELEASE one")
                    results.append(False)
        return results

    def consume_and_claim(
        self,
        nonce: str,
        receipt_id: str,
        expires_at: str,
        *,
        idempotency_key: str,
        action_hash: str,
        lease_seconds: float = 300.0,
    ) -> tuple[bool, ExecutionRecord | None]:
        """Consume the receipt and, if this call consumed it, claim the key: one write transaction.

        As in :meth:`consume` and :meth:`claim_execution`, the receipt's budget reservation is
        committed with the consume and released when the claim is lost, in the same transaction.
        """

        def work(connection: sqlite3.Connection) -> bool | None:
            moment = self.clock()
            try:
                connection.execute(_CONSUME, (nonce, receipt_id, expires_at, self.stamp(moment)))
            except sqlite3.IntegrityError:
                return None  # consumed before: nothing claimed
            connection.execute(COMMIT_TRANSFER, (self.stamp(moment), receipt_id))
            # consumed now; a key claimed before never runs, and spends nothing
            return self._claim(connection, moment, idempotency_key, action_hash, receipt_id, lease_seconds)

        claimed = self._transaction(work, "cannot consume the receipt and claim the execution")
        if claimed is None:
            return False, None
        return True, (None if claimed else self.execution(idempotency_key))

    def claim_execution(
        self, idempotency_key: str, action_hash: str, receipt_id: str, *, lease_seconds: float = 300.0
    ) -> ExecutionRecord | None:
        """Claim the key for a new execution under a lease; the existing record if it was claimed before.

        A receipt that loses the claim never runs its handler, so its budget reservation is
        released in the same transaction: one idempotency key spends a budget once.
        """
        moment = self.clock()

        def claim(connection: sqlite3.Connection) -> bool:
            return self._claim(connection, moment, idempotency_key, action_hash, receipt_id, lease_seconds)

        if self._transaction(claim, "cannot claim the execution"):
            return None
        return self.execution(idempotency_key)

    def _claim(
        self,
        connection: sqlite3.Connection,
        moment: dt.datetime,
        idempotency_key: str,
        action_hash: str,
        receipt_id: str,
        lease_seconds: float,
    ) -> bool:
        """Claim the key inside the caller's transaction; a key claimed before releases the receipt's
        budget reservation (it never runs) and is False."""
        lease = (self.stamp(moment), self.stamp(moment + dt.timedelta(seconds=lease_seconds)))
        try:
            connection.execute(_CLAIM, (idempotency_key, action_hash, receipt_id, *lease))
        except sqlite3.IntegrityError:
            connection.execute(RELEASE_TRANSFER, (self.stamp(moment), receipt_id))
            return False
        return True

    def finish_execution(self, idempotency_key: str, *, outcome: object = None, error: str | None = None) -> bool:
        """Record the outcome of a running claim; False if it was no longer running (reconciled).

        A failure releases the claim's budget reservation in the same transaction.
        """
        state = "failed" if error is not None else "succeeded"
        document = json.dumps(outcome, sort_keys=True, allow_nan=False)
        stamp = self.stamp()

        def finish(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE executions SET state = ?, outcome = ?, error = ?, finished_at = ?"
                " WHERE idempotency_key = ? AND state = 'running'",
                (state, document, error, stamp, idempotency_key),
            )
            if cursor.rowcount == 1 and error is not None:
                connection.execute(
                    RELEASE_TRANSFER.replace(
                        "receipt_id = ?", "receipt_id = (SELECT receipt_id FROM executions WHERE idempotency_key = ?)"
                    ),
                    (stamp, idempotency_key),
                )
            return cursor.rowcount == 1

        return self._transaction(finish, "cannot record the outcome")

    def release_claim(self, idempotency_key: str, receipt_id: str, *, nonce: str | None = None) -> bool:
        """Undo a running claim whose handler never ran; with ``nonce``, un-consume its receipt (one transaction)."""

        def release(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "DELETE FROM executions WHERE idempotency_key = ? AND receipt_id = ? AND state = 'running'",
                (idempotency_key, receipt_id),
            )
            if cursor.rowcount != 1:
                return False
            if nonce is not None:
                connection.execute(
                    "DELETE FROM consumed_receipts WHERE nonce = ? AND receipt_id = ?", (nonce, receipt_id)
                )
                connection.execute(UNCOMMIT_TRANSFER, (receipt_id,))
            return True

        return self._transaction(release, "cannot release the claim")

    def mark_unrecorded(self, idempotency_key: str, receipt_id: str, *, outcome: object, note: str) -> bool:
        """End the lease of a running claim whose outcome the ledger lacks: it reads as ambiguous now."""
        document = json.dumps(outcome, sort_keys=True, allow_nan=False)
        stamp = self.stamp()

        def mark(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE executions SET lease_expires_at = ?, outcome = ?, error = ?"
                " WHERE idempotency_key = ? AND receipt_id = ? AND state = 'running'",
                (stamp, document, note, idempotency_key, receipt_id),
            )
            return cursor.rowcount == 1

        return self._transaction(mark, "cannot mark the execution unrecorded")

    def execution(self, idempotency_key: str) -> ExecutionRecord | None:
        rows = self._executions("WHERE idempotency_key = ?", (idempotency_key,))
        return rows[0] if rows else None

    def ambiguous_executions(self) -> list[ExecutionRecord]:
        """Every claim whose lease expired without an outcome (what `executions list` shows)."""
        return [r for r in self._executions("WHERE state = 'running'", ()) if r.state == AMBIGUOUS]

    def _executions(self, where: str, args: tuple[object, ...]) -> list[ExecutionRecord]:
        columns = "idempotency_key, action_hash, receipt_id, state, outcome, error, started_at, lease_expires_at"
        query = f"SELECT {columns} FROM executions {where} ORDER BY started_at"  # noqa: S608 - constant where
        now = self.stamp()
        out = []
        for row in self._run(lambda c: c.execute(query, args).fetchall()):
            state = row[3]
            if state == "running" and (row[7] is None or row[7] <= now):
                state = AMBIGUOUS  # no lease (a pre-lease claim) or an expired one: nobody holds it
            out.append(ExecutionRecord(row[0], row[1], row[2], state, json.loads(row[4]) if row[4] else None, *row[5:]))
        return out

    def reconcile(self, idempotency_key: str, outcome: str, evidence: str) -> ExecutionRecord:
        """Resolve an ambiguous claim as succeeded or failed, on an operator's evidence (recorded)."""
        check_reconcile(outcome, evidence)

        def resolve(connection: sqlite3.Connection) -> None:
            record = self.execution(idempotency_key)
            document, error = reconciled(idempotency_key, record, outcome, evidence)
            assert record is not None
            stamp = self.stamp()
            connection.execute(
                "UPDATE executions SET state = ?, outcome = ?, error = ?, finished_at = ? WHERE idempotency_key = ?",
                (outcome, document, error, stamp, idempotency_key),
            )
            connection.execute(
                "INSERT INTO reconciliations (idempotency_key, outcome, evidence, receipt_id, claimed_at, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (idempotency_key, outcome, evidence, record.receipt_id, record.started_at, stamp),
            )

        self._transaction(resolve, "cannot reconcile the execution")
        resolved = self.execution(idempotency_key)
        assert resolved is not None
        return resolved

    def record_refusal(self, code: str, message: str, *, receipt_id: str | None, action_hash: str | None) -> None:
        self._run(
            lambda c: c.execute(
                "INSERT INTO refusals (at, code, receipt_id, action_hash, message) VALUES (?, ?, ?, ?, ?)",
                (self.stamp(), code, receipt_id, action_hash, message),
            ),
            "cannot record the refusal",
        )

    def count(self, table: str) -> int:
        if table not in _COUNTED:
            raise ValueError(table)
        return int(self._run(lambda c: c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]))  # noqa: S608
