"""UI sessions in PostgreSQL: every replica reads the same sessions, so a user signed in on one
replica is signed in on all of them, and a sign-out on one ends the session on all of them.

Implements :class:`~kcp_opa.stores.protocols.SessionStore`; the statements are
:mod:`kcp_opa.stores.sql`'s, with times as the database's ``now()`` (replicas' clocks may differ).
"""

from __future__ import annotations

from kcp_opa.stores import sql
from kcp_opa.stores.postgres.base import DIALECT, Connection, PostgresBase
from kcp_opa.stores.storedtypes import PendingSignIn, UiSession

_SQL = sql.session_statements(DIALECT, now="now()", later="now() + make_interval(secs => %s)")


class PostgresSessionStore(PostgresBase):
    """The ``ui_sessions`` and ``ui_sign_ins`` tables."""

    component = "ui_sessions"
    steps = (sql.session_tables(DIALECT),)
    failure = "UI session store failed"

    def open_session(self, key: str, session: UiSession, lifetime_seconds: int) -> None:
        def work(c: Connection) -> None:
            c.execute(_SQL["purge"])
            c.execute(_SQL["open"], (key, session.via, session.subject, session.identity, lifetime_seconds))

        self._run(work, "cannot open the UI session")

    def session(self, key: str) -> UiSession | None:
        row = self._run(lambda c: c.execute(_SQL["get"], (key,)).fetchone(), "cannot read the UI session")
        return UiSession(str(row[0]), str(row[1]), str(row[2])) if row else None

    def close_session(self, key: str) -> None:
        self._run(lambda c: c.execute(_SQL["close"], (key,)), "cannot close the UI session")

    def begin_sign_in(self, key: str, pending: PendingSignIn, lifetime_seconds: int) -> None:
        def work(c: Connection) -> None:
            c.execute(_SQL["purge_pending"])
            c.execute(_SQL["begin"], (key, pending.nonce, pending.verifier, lifetime_seconds))

        self._run(work, "cannot keep the sign-on under way")

    def take_sign_in(self, key: str) -> PendingSignIn | None:
        row = self._run(lambda c: c.execute(_SQL["take"], (key,)).fetchone(), "cannot read the sign-on under way")
        return PendingSignIn(str(row[0]), str(row[1])) if row else None
