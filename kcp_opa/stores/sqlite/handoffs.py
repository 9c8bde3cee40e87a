"""Receipt hand-offs in SQLite: a receipt one principal verified and consumed, executed by it once.

Implements :class:`~kcp_opa.stores.protocols.HandoffStore`. The service's
``verify_and_consume_receipt`` consumes the nonce and records a hand-off; its execute step then
takes it, for that principal only, in one guarded UPDATE (any other second use is ``replay``).
"""

from __future__ import annotations

from kcp_opa.stores.sql import move_handoff
from kcp_opa.stores.sqlite.base import DIALECT, SQLiteBase, statements

_TABLES = statements(
    """CREATE TABLE IF NOT EXISTS receipt_handoffs (
    nonce TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('verified', 'executed')),
    verified_at TEXT NOT NULL,
    executed_at TEXT
)"""
)


class SQLiteHandoffStore(SQLiteBase):
    """The ``receipt_handoffs`` table (usually in the executor store's file)."""

    component = "handoffs"
    steps = (_TABLES,)

    def hand_off(self, nonce: str, receipt_id: str, principal: str) -> None:
        """Record that ``principal`` verified and consumed this receipt (call right after consuming)."""
        self._run(
            lambda c: c.execute(
                "INSERT INTO receipt_handoffs (nonce, receipt_id, principal, state, verified_at)"
                " VALUES (?, ?, ?, 'verified', ?)",
                (nonce, receipt_id, principal, self.stamp()),
            ),
            "cannot record the verified receipt",
        )

    def take(self, nonce: str, receipt_id: str, principal: str) -> bool:
        """Accept the hand-off for ``principal`` once; False for anyone else, or a second time."""
        query, key = move_handoff(DIALECT, "verified", "executed", "?"), (self.stamp(), nonce, receipt_id, principal)
        return self._run(lambda c: c.execute(query, key).rowcount == 1, "cannot take the verified receipt")

    def give_back(self, nonce: str, receipt_id: str, principal: str) -> bool:
        """Undo ``take`` for a receipt whose execution never ran (its intent could not be audited)."""
        query, key = move_handoff(DIALECT, "executed", "verified", "NULL"), (nonce, receipt_id, principal)
        return self._run(lambda c: c.execute(query, key).rowcount == 1, "cannot give the verified receipt back")
