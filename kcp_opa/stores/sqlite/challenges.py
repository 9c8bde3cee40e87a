"""Control challenges in SQLite: answering one consumes it in one UPDATE guarded by state and expiry.

Implements :class:`~kcp_opa.stores.protocols.ChallengeStore` (WAL, ``synchronous=FULL``). The
state lives in the service's store, never with the caller, so a second answer or a late one is
refused whatever the caller holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from kcp_opa.core.jsonread import JsonObject
from kcp_opa.stores.protocols import DEFAULT_CHALLENGE_TTL_SECONDS
from kcp_opa.stores.sql import CHALLENGE_TABLES, answers, insert_challenge, select_challenge
from kcp_opa.stores.sqlite.base import DIALECT, SQLiteBase, statements
from kcp_opa.stores.storedtypes import CHALLENGE_TIME, Challenge, refuse_unconsumed


class SQLiteChallengeStore(SQLiteBase):
    """The ``control_challenges`` table in the service's SQLite file."""

    component = "challenges"
    failure = "challenge store failed"
    steps = (statements(*CHALLENGE_TABLES),)

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
        """A new open challenge, from ``now`` or the store's clock."""
        moment = now or self.clock()
        challenge = Challenge.new(
            decision_id, action_hash, control, addressed_to, summary, created_by, moment, ttl_seconds
        )
        self._run(lambda c: c.execute(insert_challenge(DIALECT), challenge.row()))
        return challenge

    def get(self, challenge_id: str) -> Challenge:
        row = self._run(lambda c: c.execute(select_challenge(DIALECT), (challenge_id,)).fetchone())
        return Challenge.from_row(row, challenge_id)

    def for_decision(self, decision_id: str) -> list[Challenge]:
        rows = self._run(
            lambda c: c.execute(
                "SELECT challenge_id FROM control_challenges WHERE decision_id = ? ORDER BY created_at, control",
                (decision_id,),
            ).fetchall()
        )
        return [self.get(row[0]) for row in rows]

    def open_challenges(self, *, now: dt.datetime | None = None, limit: int = 500) -> list[Challenge]:
        """Open, unexpired challenges, oldest first (an inbox filters them by addressee)."""
        moment = self.stamp(now, CHALLENGE_TIME)
        rows = self._run(
            lambda c: c.execute(
                "SELECT challenge_id FROM control_challenges WHERE state = 'open' AND expires_at > ?"
                " ORDER BY created_at, control LIMIT ?",
                (moment, limit),
            ).fetchall()
        )
        return [self.get(row[0]) for row in rows]

    def consume(self, challenge_id: str, principal_id: str, *, now: dt.datetime | None = None) -> Challenge:
        """Atomically mark an open, unexpired challenge answered; refuse anything else with its code."""
        moment = self.stamp(now, CHALLENGE_TIME)
        changed = self._run(
            lambda c: (
                c.execute(
                    "UPDATE control_challenges SET state = 'consumed', consumed_by = ?, consumed_at = ?"
                    " WHERE challenge_id = ? AND state = 'open' AND expires_at > ?",
                    (principal_id, moment, challenge_id, moment),
                ).rowcount
            )
        )
        challenge = self.get(challenge_id)
        if changed != 1:
            refuse_unconsumed(challenge)
        return challenge

    def healthy(self) -> bool:
        return answers(lambda: self._run(lambda c: c.execute("SELECT count(*) FROM control_challenges").fetchone()))
