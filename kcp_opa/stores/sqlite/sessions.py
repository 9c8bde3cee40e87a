"""UI sessions in SQLite: the service's store file holds them, so a restart keeps its users signed in.

Implements :class:`~kcp_opa.stores.protocols.SessionStore`; the statements are
:mod:`kcp_opa.stores.sql`'s, with times as this process's UTC clock (one machine shares the file).
"""

from __future__ import annotations

import datetime as dt
import sqlite3

from kcp_opa.stores import sql
from kcp_opa.stores.sqlite.base import DIALECT, SQLiteBase, statements
from kcp_opa.stores.storedtypes import PendingSignIn, UiSession

_SQL = sql.session_statements(DIALECT, now="?", later="?")


class SQLiteSessionStore(SQLiteBase):
    """The ``ui_sessions`` and ``ui_sign_ins`` tables (in the service's store file)."""

    component = "ui_sessions"
    steps = (statements(*sql.session_tables(DIALECT)),)
    failure = "UI session store failed"

    def _later(self, seconds: int) -> tuple[str, str]:
        now = self.clock()
        return self.stamp(now), self.stamp(now + dt.timedelta(seconds=seconds))

    def open_session(self, key: str, session: UiSession, lifetime_seconds: int) -> None:
        now, later = self._later(lifetime_seconds)

        def work(c: sqlite3.Connection) -> None:
            c.execute(_SQL["purge"], (now,))
            c.execute(_SQL["open"], (key, session.via, session.subject, session.identity, later))

        self._transaction(work, "cannot open the UI session")

    def session(self, key: str) -> UiSession | None:
        row = self._run(lambda c: c.execute(_SQL["get"], (key, self.stamp())).fetchone(), "cannot read the UI session")
        return UiSession(str(row[0]), str(row[1]), str(row[2])) if row else None

    def close_session(self, key: str) -> None:
        self._run(lambda c: c.execute(_SQL["close"], (key,)), "cannot close the UI session")

    def begin_sign_in(self, key: str, pending: PendingSignIn, lifetime_seconds: int) -> None:
        now, later = self._later(lifetime_seconds)

        def work(c: sqlite3.Connection) -> None:
            c.execute(_SQL["purge_pending"], (now,))
            c.execute(_SQL["begin"], (key, pending.nonce, pending.verifier, later))

        self._transaction(work, "cannot keep the sign-on under way")

    def take_sign_in(self, key: str) -> PendingSignIn | None:
        row = self._transaction(
            lambda c: c.execute(_SQL["take"], (key, self.stamp())).fetchone(), "cannot read the sign-on under way"
        )
        return PendingSignIn(str(row[0]), str(row[1])) if row else None
