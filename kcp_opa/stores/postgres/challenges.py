"""Control challenges in PostgreSQL: answering one consumes it in one UPDATE guarded by state and expiry.

Implements :class:`~kcp_opa.stores.protocols.ChallengeStore`. Times are written as the SQLite
store writes them (whole seconds, UTC text), so a :class:`~kcp_opa.stores.storedtypes.Challenge`
reads alike on both; without an explicit ``now`` the moment is the database's clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from kcp_opa.core.jsonread import JsonObject
from kcp_opa.stores.postgres.base import DIALECT, Connection, PostgresBase
from kcp_opa.stores.protocols import DEFAULT_CHALLENGE_TTL_SECONDS
from kcp_opa.stores.sql import CHALLENGE_COLUMNS, CHALLENGE_TABLES, answers, insert_challenge, select_challenge
from kcp_opa.stores.storedtypes import Challenge, challenge_stamp, refuse_unconsumed

_NOW = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"


class PostgresChallengeStore(PostgresBase):
    """The ``control_challenges`` table."""

    component = "challenges"
    steps = (CHALLENGE_TABLES,)
    failure = "challenge store failed"

    def open(
        self,
        *,
        decision_id: str,
        action_hash: str,
        control: str,
        addressed_to: Mapping[str, list[str]],
        summary: JsonObject,
        created_by: str,
        ttl_seconds: int = DEFAULT_CHALLENGE_TTL_SECONDS,
        now: dt.datetime | None = None,
    ) -> Challenge:
        """A new open challenge, from ``now`` or the database's clock."""

        def work(c: Connection) -> Challenge:
            moment = now or _now(c)
            fresh = Challenge.new(
                decision_id, action_hash, control, addressed_to, summary, created_by, moment, ttl_seconds
            )
            c.execute(insert_challenge(DIALECT), fresh.row())
            return fresh

        return self._run(work)

    def get(self, challenge_id: str) -> Challenge:
        return self._run(lambda c: _get(c, challenge_id))

    def for_decision(self, decision_id: str) -> list[Challenge]:
        query = (
            f"SELECT {CHALLENGE_COLUMNS} FROM control_challenges WHERE decision_id = %s ORDER BY created_at, control"  # noqa: S608
        )
        rows = self._run(lambda c: c.execute(query, (decision_id,)).fetchall())
        return [Challenge.from_row(row, row[0]) for row in rows]

    def open_challenges(self, *, now: dt.datetime | None = None, limit: int = 500) -> list[Challenge]:
        """Open, unexpired challenges, oldest first (an approver's inbox filters them by addressee)."""
        moment = challenge_stamp(now) if now is not None else None
        query = (
            f"SELECT {CHALLENGE_COLUMNS} FROM control_challenges"  # noqa: S608
            f" WHERE state = 'open' AND expires_at > coalesce(%s, {_NOW}) ORDER BY created_at, control LIMIT %s"
        )
        rows = self._run(lambda c: c.execute(query, (moment, limit)).fetchall())
        return [Challenge.from_row(row, row[0]) for row in rows]

    def consume(self, challenge_id: str, principal_id: str, *, now: dt.datetime | None = None) -> Challenge:
        """Atomically mark an open, unexpired challenge answered; refuse anything else with its code."""
        moment = challenge_stamp(now) if now is not None else None

        def work(c: Connection) -> tuple[int, Challenge]:
            changed = c.execute(
                f"UPDATE control_challenges SET state = 'consumed', consumed_by = %s, consumed_at = {_NOW}"  # noqa: S608
                f" WHERE challenge_id = %s AND state = 'open' AND expires_at > coalesce(%s, {_NOW})",
                (principal_id, challenge_id, moment),
            ).rowcount
            return changed, Challenge.from_row(
                c.execute(select_challenge(DIALECT), (challenge_id,)).fetchone(), challenge_id
            )

        changed, challenge = self._run(work)
        if changed != 1:
            refuse_unconsumed(challenge)
        return challenge

    def healthy(self) -> bool:
        return answers(lambda: self._run(lambda c: c.execute("SELECT 1 FROM control_challenges LIMIT 1").fetchone()))


def _now(connection: Connection) -> dt.datetime:
    row = connection.execute("SELECT now()").fetchone()
    assert row is not None
    moment: dt.datetime = row[0]
    return moment


def _get(connection: Connection, challenge_id: str) -> Challenge:
    return Challenge.from_row(connection.execute(select_challenge(DIALECT), (challenge_id,)).fetchone(), challenge_id)
