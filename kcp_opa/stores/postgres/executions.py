"""PostgreSQL state for the executor: consumed receipts and executions, shared by every replica.

Implements :class:`~kcp_opa.stores.protocols.ExecutorStore`. Uniqueness is the database's job:
a nonce is consumed by one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (a row back means
this caller consumed it; nothing back means someone did before, whichever unique column
matched), an idempotency key is claimed the same way, and :meth:`consume_and_claim` does both in
one transaction, so no crash leaves a receipt consumed without its claim. Nothing reads first
and writes after (no check-then-act). Leases are set and judged by the database's ``now()``.

A receipt's budget reservation (counters.py) is committed in the consume's own transaction and
released in the transaction that records a failure or loses the claim: a receipt consumed is a
budget spent, and one that never runs spends nothing.
"""

from __future__ import annotations

import json
from typing import Any

from kcp_opa.stores.postgres.base import Connection, PostgresBase
from kcp_opa.stores.postgres.counters import COMMIT_TRANSFER, RELEASE_TRANSFER, TRANSFERS_TABLE, UNCOMMIT_TRANSFER
from kcp_opa.stores.sql import EXECUTION_COLUMNS
from kcp_opa.stores.storedtypes import AMBIGUOUS, ExecutionRecord, check_reconcile, reconciled

_TABLES = (
    """CREATE TABLE IF NOT EXISTS consumed_receipts (
    nonce TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    expires_at TEXT NOT NULL,
    consumed_at TIMESTAMPTZ NOT NULL DEFAULT now()
)""",
    f"""CREATE TABLE IF NOT EXISTS executions (
    {EXECUTION_COLUMNS},
    started_at TIMESTAMPTZ NOT NULL,
    lease_expires_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ
)""",
    "CREATE INDEX IF NOT EXISTS executions_running ON executions (started_at) WHERE state = 'running'",
    """CREATE TABLE IF NOT EXISTS reconciliations (
    id BIGSERIAL PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    outcome TEXT NOT NULL,
    evidence TEXT NOT NULL,
    receipt_id TEXT NOT NULL,
    claimed_at TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT now()
)""",
    """CREATE TABLE IF NOT EXISTS refusals (
    id BIGSERIAL PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL DEFAULT now(),
    code TEXT NOT NULL,
    receipt_id TEXT,
    action_hash TEXT,
    message TEXT NOT NULL
)""",
)

_CONSUME = (
    "INSERT INTO consumed_receipts (nonce, receipt_id, expires_at) VALUES (%s, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING nonce"
)
_CLAIM = (
    "INSERT INTO executions (idempotency_key, action_hash, receipt_id, state, started_at, lease_expires_at)"
    " VALUES (%s, %s, %s, 'running', now(), now() + make_interval(secs => %s))"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key"
)
_SELECT = (
    "SELECT idempotency_key, action_hash, receipt_id, state, outcome, error,"
    " to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
    " to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
    " state = 'running' AND lease_expires_at <= now() FROM executions"
)
_COUNTED = frozenset({"consumed_receipts", "executions", "refusals", "reconciliations"})


def _record(row: tuple[Any, ...]) -> ExecutionRecord:
    state = AMBIGUOUS if row[8] else row[3]
    outcome = json.loads(row[4]) if row[4] else None
    return ExecutionRecord(row[0], row[1], row[2], state, outcome, row[5], row[6], row[7])


class PostgresStore(PostgresBase):
    """Nonce store and execution ledger in one PostgreSQL database (what every replica shares)."""

    component = "executions"
    #: v1: the tables; v2: budget reservations (counters.py), committed in the consume's transaction.
    steps = (_TABLES, (TRANSFERS_TABLE,))
    failure = "executor store failed"

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        """Atomically and durably remember a receipt; False if its nonce or receipt id was seen before.

        The receipt's budget reservation (if any) is committed in the same transaction.
        """

        def work(c: Connection) -> bool:
            if c.execute(_CONSUME, (nonce, receipt_id, expires_at)).fetchone() is None:
                return False
            c.execute(COMMIT_TRANSFER, (receipt_id,))
            return True

        return self._run(work, "cannot record the receipt as consumed")

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
        """Consume the receipt and, if this call consumed it, claim the key: one transaction.

        Returns (consumed, existing): ``existing`` is None when the key was claimed now (or when
        the receipt was not consumed, so nothing was claimed).
        """

        def work(c: Connection) -> tuple[bool, ExecutionRecord | None]:
            if c.execute(_CONSUME, (nonce, receipt_id, expires_at)).fetchone() is None:
                return False, None
            c.execute(COMMIT_TRANSFER, (receipt_id,))
            if c.execute(_CLAIM, (idempotency_key, action_hash, receipt_id, lease_seconds)).fetchone() is not None:
                return True, None
            c.execute(RELEASE_TRANSFER, (receipt_id,))  # the key ran before: this receipt never runs
            return True, self._one(c, idempotency_key)

        return self._run(work, "cannot consume the receipt and claim the execution")

    def claim_execution(
        self, idempotency_key: str, action_hash: str, receipt_id: str, *, lease_seconds: float = 300.0
    ) -> ExecutionRecord | None:
        """Claim the key for a new execution under a lease; the existing record if it was claimed before.

        A receipt that loses the claim never runs, so its reservation is released in the same transaction.
        """

        def work(c: Connection) -> ExecutionRecord | None:
            if c.execute(_CLAIM, (idempotency_key, action_hash, receipt_id, lease_seconds)).fetchone() is not None:
                return None
            c.execute(RELEASE_TRANSFER, (receipt_id,))
            return self._one(c, idempotency_key)

        return self._run(work, "cannot claim the execution")

    @staticmethod
    def _one(c: Connection, idempotency_key: str) -> ExecutionRecord | None:
        row = c.execute(_SELECT + " WHERE idempotency_key = %s", (idempotency_key,)).fetchone()
        return _record(row) if row else None

    def finish_execution(self, idempotency_key: str, *, outcome: object = None, error: str | None = None) -> bool:
        """Record the outcome of a running claim; False if it was no longer running (reconciled).

        A failure releases the claim's budget reservation in the same transaction.
        """
        state = "failed" if error is not None else "succeeded"
        document = json.dumps(outcome, sort_keys=True, allow_nan=False)

        def work(c: Connection) -> bool:
            row = c.execute(
                "UPDATE executions SET state = %s, outcome = %s, error = %s, finished_at = now()"
                " WHERE idempotency_key = %s AND state = 'running' RETURNING receipt_id",
                (state, document, error, idempotency_key),
            ).fetchone()
            if row is not None and error is not None:
                c.execute(RELEASE_TRANSFER, (row[0],))
            return row is not None

        return self._run(work, "cannot record the outcome")

    def release_claim(self, idempotency_key: str, receipt_id: str, *, nonce: str | None = None) -> bool:
        """Undo a running claim whose handler never ran; with ``nonce``, un-consume its receipt (one transaction)."""

        def work(c: Connection) -> bool:
            deleted = c.execute(
                "DELETE FROM executions WHERE idempotency_key = %s AND receipt_id = %s AND state = 'running'",
                (idempotency_key, receipt_id),
            ).rowcount
            if deleted != 1:
                return False
            if nonce is not None:
                c.execute("DELETE FROM consumed_receipts WHERE nonce = %s AND receipt_id = %s", (nonce, receipt_id))
                c.execute(UNCOMMIT_TRANSFER, (receipt_id,))
            return True

        return self._run(work, "cannot release the claim")

    def mark_unrecorded(self, idempotency_key: str, receipt_id: str, *, outcome: object, note: str) -> bool:
        """End the lease of a running claim whose outcome the ledger lacks: it reads as ambiguous now."""
        document = json.dumps(outcome, sort_keys=True, allow_nan=False)

        def work(c: Connection) -> bool:
            updated = c.execute(
                "UPDATE executions SET lease_expires_at = now(), outcome = %s, error = %s"
                " WHERE idempotency_key = %s AND receipt_id = %s AND state = 'running'",
                (document, note, idempotency_key, receipt_id),
            ).rowcount
            return updated == 1

        return self._run(work, "cannot mark the execution unrecorded")

    def execution(self, idempotency_key: str) -> ExecutionRecord | None:
        return self._run(lambda c: self._one(c, idempotency_key))

    def ambiguous_executions(self) -> list[ExecutionRecord]:
        """Every claim whose lease expired without an outcome, oldest first (by the database's clock)."""
        query = _SELECT + " WHERE state = 'running' AND lease_expires_at <= now() ORDER BY started_at"
        return self._run(lambda c: [_record(row) for row in c.execute(query).fetchall()])

    def reconcile(self, idempotency_key: str, outcome: str, evidence: str) -> ExecutionRecord:
        """Resolve an ambiguous claim as succeeded or failed, on an operator's evidence (recorded)."""
        check_reconcile(outcome, evidence)

        def resolve(c: Connection) -> ExecutionRecord:
            row = c.execute(_SELECT + " WHERE idempotency_key = %s FOR UPDATE", (idempotency_key,)).fetchone()
            record = _record(row) if row is not None else None
            document, error = reconciled(idempotency_key, record, outcome, evidence)
            assert record is not None
            c.execute(
                "UPDATE executions SET state = %s, outcome = %s, error = %s, finished_at = now()"
                " WHERE idempotency_key = %s",
                (outcome, document, error, idempotency_key),
            )
            c.execute(
                "INSERT INTO reconciliations (idempotency_key, outcome, evidence, receipt_id, claimed_at)"
                " VALUES (%s, %s, %s, %s, %s)",
                (idempotency_key, outcome, evidence, record.receipt_id, record.started_at),
            )
            resolved = self._one(c, idempotency_key)
            assert resolved is not None
            return resolved

        return self._run(resolve, "cannot reconcile the execution")

    def record_refusal(self, code: str, message: str, *, receipt_id: str | None, action_hash: str | None) -> None:
        self._run(
            lambda c: c.execute(
                "INSERT INTO refusals (code, receipt_id, action_hash, message) VALUES (%s, %s, %s, %s)",
                (code, receipt_id, action_hash, message),
            ),
            "cannot record the refusal",
        )

    def count(self, table: str) -> int:
        if table not in _COUNTED:
            raise ValueError(table)
        row = self._run(lambda c: c.execute(f"SELECT count(*) FROM {table}").fetchone())  # noqa: S608
        return int(row[0]) if row else 0
