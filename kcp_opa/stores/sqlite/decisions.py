"""Decisions kept by the service in SQLite, so every server process on the same file sees them.

Implements :class:`~kcp_opa.stores.protocols.DecisionStore`. ``synchronous=NORMAL``: a decision
lost to a power cut is asked again (nothing was consumed or executed under it). Updates run in
one ``BEGIN IMMEDIATE`` transaction: two answers for the same decision, in one process or in
two, are applied one after the other and neither is lost.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable

from kcp_opa.core.jsonread import JsonObject
from kcp_opa.stores.sqlite.base import SQLiteBase, T, statements
from kcp_opa.stores.storedtypes import StoredDecision, UnknownRecordError

_TABLES = statements(
    """CREATE TABLE IF NOT EXISTS service_decisions (
    decision_id TEXT PRIMARY KEY,
    evaluated_by TEXT NOT NULL,
    agent_id TEXT,
    document TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)""",
    "CREATE TABLE IF NOT EXISTS service_secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class SQLiteDecisionStore(SQLiteBase):
    """The ``service_decisions`` table and the desk's seal key (``service_secrets``)."""

    component = "decisions"
    steps = (_TABLES,)
    synchronous = "NORMAL"
    failure = "decision store failed"

    def seal_key(self) -> bytes:
        """The desk's seal key, made once per store: every process on this file seals alike."""

        def work(c: sqlite3.Connection) -> str:
            c.execute(
                "INSERT OR IGNORE INTO service_secrets (name, value) VALUES ('record_seal', ?)",
                (secrets.token_hex(32),),
            )
            return str(c.execute("SELECT value FROM service_secrets WHERE name = 'record_seal'").fetchone()[0])

        return bytes.fromhex(self._run(work))

    def put(self, decision_id: str, evaluated_by: str, agent_id: str | None, document: JsonObject) -> None:
        stamp = self.stamp()
        self._run(
            lambda c: c.execute(
                "INSERT INTO service_decisions (decision_id, evaluated_by, agent_id, document, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (decision_id, evaluated_by, agent_id, json.dumps(document, sort_keys=True), stamp, stamp),
            )
        )

    def get(self, decision_id: str) -> StoredDecision:
        row = self._run(
            lambda c: c.execute(
                "SELECT decision_id, evaluated_by, agent_id, document FROM service_decisions WHERE decision_id = ?",
                (decision_id,),
            ).fetchone()
        )
        if row is None:
            raise UnknownRecordError(f"no decision {decision_id} in the service's store")
        return StoredDecision(row[0], row[1], row[2], json.loads(row[3]))

    def update(self, decision_id: str, change: Callable[[StoredDecision], tuple[JsonObject, T]]) -> T:
        """Apply ``change`` (row -> new document, result) under the store's write lock; return its result."""

        def work(c: sqlite3.Connection) -> T:
            document, result = change(self.get(decision_id))
            c.execute(
                "UPDATE service_decisions SET document = ?, updated_at = ? WHERE decision_id = ?",
                (json.dumps(document, sort_keys=True), self.stamp(), decision_id),
            )
            return result

        return self._transaction(work)

    def count(self) -> int:
        return int(self._run(lambda c: c.execute("SELECT count(*) FROM service_decisions").fetchone()[0]))
