"""The KYA sequence's hand-off: a receipt verified and consumed, then executed by the same executor.

``verify_and_consume_receipt`` consumes the nonce (the executor store's ``consumed_receipts``)
and records a hand-off for the calling principal; ``execute_authorized_action`` then runs the
library :class:`~kcp_opa.execute.executor.Executor`, whose consume step accepts that hand-off
once, for that principal only, in one guarded UPDATE. Any other second use is still ``replay``.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import sqlite3
from pathlib import Path

from kcp_opa.authorize.store import SQLiteStore
from kcp_opa.core.errors import StoreError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS receipt_handoffs (
    nonce TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('verified', 'executed')),
    verified_at TEXT NOT NULL,
    executed_at TEXT
);
"""

#: The principal on whose behalf the executor is consuming right now (set around one execution).
executing_as: contextvars.ContextVar[str | None] = contextvars.ContextVar("kcp_opa_executing_as", default=None)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class HandoffStore(SQLiteStore):
    """The executor's store, plus hand-offs from ``verify_and_consume_receipt`` to execution."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0, group_commit: bool = True) -> None:
        super().__init__(path, busy_timeout_s=busy_timeout_s, group_commit=group_commit)
        self._connection().executescript(_SCHEMA)

    def hand_off(self, nonce: str, receipt_id: str, principal: str) -> None:
        """Record that ``principal`` verified and consumed this receipt (call right after consuming)."""
        try:
            self._connection().execute(
                "INSERT INTO receipt_handoffs (nonce, receipt_id, principal, state, verified_at)"
                " VALUES (?, ?, ?, 'verified', ?)",
                (nonce, receipt_id, principal, _now()),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record the verified receipt: {exc}") from None

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        """A hand-off to the executing principal counts once; anything else is a normal consume."""
        principal = executing_as.get()
        if principal is not None:
            try:
                taken = (
                    self._connection()
                    .execute(
                        "UPDATE receipt_handoffs SET state = 'executed', executed_at = ?"
                        " WHERE nonce = ? AND receipt_id = ? AND principal = ? AND state = 'verified'",
                        (_now(), nonce, receipt_id, principal),
                    )
                    .rowcount
                )
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot take the verified receipt: {exc}") from None
            if taken == 1:
                return True
        return super().consume(nonce, receipt_id, expires_at)
