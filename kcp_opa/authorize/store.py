"""SQLite state for the executor: consumed receipts and executions, safe across processes.

WAL mode with ``synchronous=FULL``: every consume and every execution state change is durable
when its transaction commits (the same durability as a fresh connection with the default
journal, which is the KYA reference's pattern). One connection per thread and process is kept
open, so a consume is one short write transaction, not a connection set-up each time.
Uniqueness is the database's job (primary keys), so two processes can never both consume one
nonce or both claim one idempotency key.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcp_opa.core.errors import StoreError
from kcp_opa.core.groupcommit import GroupCommit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS consumed_receipts (
    nonce TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    expires_at TEXT NOT NULL,
    consumed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    idempotency_key TEXT PRIMARY KEY,
    action_hash TEXT NOT NULL,
    receipt_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
    outcome TEXT,
    error TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    code TEXT NOT NULL,
    receipt_id TEXT,
    action_hash TEXT,
    message TEXT NOT NULL
);
"""


_CONSUME = "INSERT INTO consumed_receipts (nonce, receipt_id, expires_at, consumed_at) VALUES (?, ?, ?, ?)"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ExecutionRecord:
    idempotency_key: str
    action_hash: str
    receipt_id: str
    state: str
    outcome: Any
    error: str | None


class SQLiteStore:
    """Nonce store (``consume``) and execution ledger in one SQLite file (WAL).

    With ``group_commit`` (the default), consumes from all threads of a process go through one
    writer thread that commits whatever is waiting in a single transaction: one fsync for the
    batch, and no caller returns before its consume is durable. Each insert still succeeds or
    fails on its own (a duplicate aborts only its statement), so the answer per receipt is exact.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0, group_commit: bool = True) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.group_commit = group_commit
        self._local = threading.local()
        self._inflight_lock = threading.Lock()
        self._inflight = 0
        self._group = GroupCommit(self._consume_batch, max_batch=256)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as connection:
            connection.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        return connection

    def _connection(self) -> sqlite3.Connection:
        # A connection belongs to the thread and process that opened it (fork-safe by pid).
        pid = os.getpid()
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None or getattr(self._local, "pid", None) != pid:
            connection = self._local.connection = self._connect()
            self._local.pid = pid
        return connection

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        """Atomically and durably remember a receipt; False if its nonce or receipt id was seen before."""
        with self._inflight_lock:
            alone = self._inflight == 0
            self._inflight += 1
        try:
            if alone or not self.group_commit:
                # Nobody to share a commit with: commit directly (no hand-off to the writer).
                try:
                    self._connection().execute(_CONSUME, (nonce, receipt_id, expires_at, _now()))
                except sqlite3.IntegrityError:
                    return False
                return True
            return self._group.submit((nonce, receipt_id, expires_at))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record the receipt as consumed: {exc}") from None
        finally:
            with self._inflight_lock:
                self._inflight -= 1

    def _consume_batch(self, batch: list[tuple[str, str, str]]) -> list[bool]:
        """One transaction for the waiting consumes (runs on the group-commit writer thread)."""
        connection = self._connection()
        results: list[bool] = []
        try:
            connection.execute("BEGIN IMMEDIATE")
            stamp = _now()
            for nonce, receipt_id, expires_at in batch:
                try:
                    connection.execute(_CONSUME, (nonce, receipt_id, expires_at, stamp))
                    results.append(True)
                except sqlite3.IntegrityError:
                    results.append(False)
            connection.execute("COMMIT")
        except sqlite3.Error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise  # nothing in this batch was consumed: every caller fails closed
        return results

    def claim_execution(self, idempotency_key: str, action_hash: str, receipt_id: str) -> ExecutionRecord | None:
        """Claim the key for a new execution; the existing record if it was claimed before."""
        connection = self._connection()
        try:
            connection.execute(
                "INSERT INTO executions (idempotency_key, action_hash, receipt_id, state, started_at)"
                " VALUES (?, ?, ?, 'running', ?)",
                (idempotency_key, action_hash, receipt_id, _now()),
            )
        except sqlite3.IntegrityError:
            return self.execution(idempotency_key)
        return None

    def finish_execution(self, idempotency_key: str, *, outcome: Any = None, error: str | None = None) -> None:
        state = "failed" if error is not None else "succeeded"
        self._connection().execute(
            "UPDATE executions SET state = ?, outcome = ?, error = ?, finished_at = ? WHERE idempotency_key = ?",
            (state, json.dumps(outcome, sort_keys=True), error, _now(), idempotency_key),
        )

    def execution(self, idempotency_key: str) -> ExecutionRecord | None:
        row = (
            self._connection()
            .execute(
                "SELECT idempotency_key, action_hash, receipt_id, state, outcome, error FROM executions"
                " WHERE idempotency_key = ?",
                (idempotency_key,),
            )
            .fetchone()
        )
        if row is None:
            return None
        return ExecutionRecord(row[0], row[1], row[2], row[3], json.loads(row[4]) if row[4] else None, row[5])

    def record_refusal(self, code: str, message: str, *, receipt_id: str | None, action_hash: str | None) -> None:
        self._connection().execute(
            "INSERT INTO refusals (at, code, receipt_id, action_hash, message) VALUES (?, ?, ?, ?, ?)",
            (_now(), code, receipt_id, action_hash, message),
        )

    def count(self, table: str) -> int:
        if table not in {"consumed_receipts", "executions", "refusals"}:
            raise ValueError(table)
        return int(self._connection().execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608
