"""Decisions kept by the service in PostgreSQL, so every replica sees them.

Implements :class:`~kcp_opa.stores.protocols.DecisionStore`. An update reads the row ``FOR
UPDATE`` and writes it back in one transaction: two answers for one decision, on two replicas,
are applied one after the other and neither is lost.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

from kcp_opa.core.jsonread import JsonObject
from kcp_opa.stores.postgres.base import Connection, PostgresBase, T
from kcp_opa.stores.storedtypes import StoredDecision, UnknownRecordError

_TABLES = (
    """CREATE TABLE IF NOT EXISTS service_decisions (
    decision_id TEXT PRIMARY KEY,
    evaluated_by TEXT NOT NULL,
    agent_id TEXT,
    document TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
)""",
    "CREATE TABLE IF NOT EXISTS service_secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
_GET = "SELECT decision_id, evaluated_by, agent_id, document FROM service_decisions WHERE decision_id = %s"


class PostgresDecisionStore(PostgresBase):
    """The ``service_decisions`` table and the desk's seal key (``service_secrets``)."""

    component = "decisions"
    steps = (_TABLES,)
    failure = "decision store failed"

    def seal_key(self) -> bytes:
        """The desk's seal key, made once per database: every replica seals alike."""

        def work(c: Connection) -> str:
            c.execute(
                "INSERT INTO service_secrets (name, value) VALUES ('record_seal', %s) ON CONFLICT DO NOTHING",
                (secrets.token_hex(32),),
            )
            row = c.execute("SELECT value FROM service_secrets WHERE name = 'record_seal'").fetchone()
            assert row is not None
            return str(row[0])

        return bytes.fromhex(self._run(work))

    def put(self, decision_id: str, evaluated_by: str, agent_id: str | None, document: JsonObject) -> None:
        self._run(
            lambda c: c.execute(
                "INSERT INTO service_decisions (decision_id, evaluated_by, agent_id, document) VALUES (%s, %s, %s, %s)",
                (decision_id, evaluated_by, agent_id, json.dumps(document, sort_keys=True)),
            )
        )

    @staticmethod
    def _row(row: tuple[Any, ...] | None, decision_id: str) -> StoredDecision:
        if row is None:
            raise UnknownRecordError(f"no decision {decision_id} in the service's store")
        return StoredDecision(row[0], row[1], row[2], json.loads(row[3]))

    def get(self, decision_id: str) -> StoredDecision:
        return self._row(self._run(lambda c: c.execute(_GET, (decision_id,)).fetchone()), decision_id)

    def update(self, decision_id: str, change: Callable[[StoredDecision], tuple[JsonObject, T]]) -> T:
        """Apply ``change`` (row -> new document, result) with the row locked; return its result."""

        def work(c: Connection) -> T:
            current = self._row(c.execute(_GET + " FOR UPDATE", (decision_id,)).fetchone(), decision_id)
            document, result = change(current)
            c.execute(
                "UPDATE service_decisions SET document = %s, updated_at = now() WHERE decision_id = %s",
                (json.dumps(document, sort_keys=True), decision_id),
            )
            return result

        return self._run(work)

    def count(self) -> int:
        row = self._run(lambda c: c.execute("SELECT count(*) FROM service_decisions").fetchone())
        return int(row[0]) if row else 0
