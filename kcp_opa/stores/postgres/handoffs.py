"""Receipt hand-offs in PostgreSQL: a receipt one principal verified and consumed, executed by it once.

Implements :class:`~kcp_opa.stores.protocols.HandoffStore`; taking one is one guarded UPDATE,
so two replicas racing to take it give one True.
"""

from __future__ import annotations

from kcp_opa.stores.postgres.base import DIALECT, PostgresBase
from kcp_opa.stores.sql import move_handoff

_TABLES = (
    """CREATE TABLE IF NOT EXISTS receipt_handoffs (
    nonce TEXT PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('verified', 'executed')),
    verified_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    executed_at TIMESTAMPTZ
)""",
)


class PostgresHandoffStore(PostgresBase):
    """The ``receipt_handoffs`` table."""

    component = "handoffs"
    steps = (_TABLES,)
    failure = "hand-off store failed"

    def hand_off(self, nonce: str, receipt_id: str, principal: str) -> None:
        """Record that ``principal`` verified and consumed this receipt (call right after consuming)."""
        self._run(
            lambda c: c.execute(
                "INSERT INTO receipt_handoffs (nonce, receipt_id, principal, state) VALUES (%s, %s, %s, 'verified')",
                (nonce, receipt_id, principal),
            ),
            "cannot record the verified receipt",
        )

    def take(self, nonce: str, receipt_id: str, principal: str) -> bool:
        """Accept the hand-off for ``principal`` once; False for anyone else, or a second time."""
        query, key = move_handoff(DIALECT, "verified", "executed", "now()"), (nonce, receipt_id, principal)
        return self._run(lambda c: c.execute(query, key).rowcount == 1, "cannot take the verified receipt")

    def give_back(self, nonce: str, receipt_id: str, principal: str) -> bool:
        """Undo ``take`` for a receipt whose execution never ran (its intent could not be audited)."""
        query, key = move_handoff(DIALECT, "executed", "verified", "NULL"), (nonce, receipt_id, principal)
        return self._run(lambda c: c.execute(query, key).rowcount == 1, "cannot give the verified receipt back")
