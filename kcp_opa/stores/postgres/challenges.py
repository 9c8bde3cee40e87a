"""Control challenges in PostgreSQL: answering one consumes it in one UPDATE guarded by state and expiry.

Implements :class:`~kcp_opa.stores.protocols.ChallengeStore`. Times are written as the SQLite
store writes them (whole seconds, UTC text), so a :class:`~kcp_opa.stores.records.Challenge`
reads alike on both; without an explicit ``now`` the moment is the database's clock.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Mapping
from typing import Any

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.postgres.base import Connection, PostgresBase
from kcp_opa.stores.protocols import DEFAULT_CHALLENGE_TTL_SECONDS
from kcp_opa.stores.records import Challenge, ChallengeError, challenge_stamp

_TABLES = (
    """CREATE TABLE IF NOT EXISTS control_challenges (
    challenge_id TEXT PRIMARY KEY,
    decision_id TEXT NOT NULL,
    action_hash TEXT NOT NULL,
    control TEXT NOT NULL,
    addressed_to TEXT NOT NULL,
    summary TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'consumed')),
    consumed_by TEXT,
    consumed_at TEXT
)""",
    "CREATE INDEX IF NOT EXISTS control_challenges_decision ON control_challenges (decision_id, control)",
)
_COLUMNS = (
    "challenge_id, decision_id, action_hash, control, addressed_to, summary, created_by, created_at,"
    " expires_at, state, consumed_by"
)
_NOW = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"


def _challenge(row: tuple[Any, ...] | None, challenge_id: str) -> Challenge:
    if row is None:
        raise ChallengeError(f"no challenge {challenge_id}", "unknown_challenge")
    return Challenge(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])


class PostgresChallengeStore(PostgresBase):
    """The ``control_challenges`` table."""

    component = "challenges"
    steps = (_TABLES,)
    failure = "challenge store failed"

    def _now(self) -> dt.datetime:
        row = self._run(lambda c: c.execute("SELECT now()").fetchone())
        assert row is not None
        moment: dt.datetime = row[0]
        return moment

    def open(
        self,
        *,
        decision_id: str,
        action_hash: str,
        control: str,
        addressed_to: Mapping[str, list[str]],
        summary: Mapping[str, Any],
        created_by: str,
        ttl_seconds: int = DEFAULT_CHALLENGE_TTL_SECONDS,
        now: dt.datetime | None = None,
    ) -> Challenge:
        """A new open challenge (the id is 128 random bits: unguessable, but not a credential)."""
        moment = (now or self._now()).replace(microsecond=0)
        challenge = Challenge(
            challenge_id=f"chl_{secrets.token_hex(16)}",
            decision_id=decision_id,
            action_hash=action_hash,
            control=control,
            addressed_to={k: sorted(v) for k, v in addressed_to.items()},
            summary=dict(summary),
            created_by=created_by,
            created_at=challenge_stamp(moment),
            expires_at=challenge_stamp(moment + dt.timedelta(seconds=ttl_seconds)),
            state="open",
            consumed_by=None,
        )
        self._run(
            lambda c: c.execute(
                f"INSERT INTO control_challenges ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'open', NULL)",  # noqa: S608, E501
                (
                    challenge.challenge_id,
                    decision_id,
                    action_hash,
                    control,
                    json.dumps(challenge.addressed_to, sort_keys=True),
                    json.dumps(challenge.summary, sort_keys=True),
                    created_by,
                    challenge.created_at,
                    challenge.expires_at,
                ),
            )
        )
        return challenge

    def get(self, challenge_id: str) -> Challenge:
        query = f"SELECT {_COLUMNS} FROM control_challenges WHERE challenge_id = %s"  # noqa: S608
        return _challenge(self._run(lambda c: c.execute(query, (challenge_id,)).fetchone()), challenge_id)

    def for_decision(self, decision_id: str) -> list[Challenge]:
        query = f"SELECT {_COLUMNS} FROM control_challenges WHERE decision_id = %s ORDER BY created_at, control"  # noqa: S608
        rows = self._run(lambda c: c.execute(query, (decision_id,)).fetchall())
        return [_challenge(row, row[0]) for row in rows]

    def open_challenges(self, *, now: dt.datetime | None = None, limit: int = 500) -> list[Challenge]:
        """Open, unexpired challenges, oldest first (an approver's inbox filters them by addressee)."""
        moment = challenge_stamp(now) if now is not None else None
        query = (
            f"SELECT {_COLUMNS} FROM control_challenges"  # noqa: S608
            f" WHERE state = 'open' AND expires_at > coalesce(%s, {_NOW}) ORDER BY created_at, control LIMIT %s"
        )
        rows = self._run(lambda c: c.execute(query, (moment, limit)).fetchall())
        return [_challenge(row, row[0]) for row in rows]

    def consume(self, challenge_id: str, principal_id: str, *, now: dt.datetime | None = None) -> Challenge:
        """Atomically mark an open, unexpired challenge answered; refuse anything else with its code."""
        moment = challenge_stamp(now) if now is not None else None

        def work(c: Connection) -> tuple[int, Challenge]:
            changed = c.execute(
                f"UPDATE control_challenges SET state = 'consumed', consumed_by = %s, consumed_at = {_NOW}"  # noqa: S608
                f" WHERE challenge_id = %s AND state = 'open' AND expires_at > coalesce(%s, {_NOW})",
                (principal_id, challenge_id, moment),
            ).rowcount
            query = f"SELECT {_COLUMNS} FROM control_challenges WHERE challenge_id = %s"  # noqa: S608
            return changed, _challenge(c.execute(query, (challenge_id,)).fetchone(), challenge_id)

        changed, challenge = self._run(work)
        if changed != 1:
            if challenge.state == "consumed":
                raise ChallengeError(f"challenge {challenge_id} was answered before", "challenge_used")
            raise ChallengeError(f"challenge {challenge_id} expired at {challenge.expires_at}", "challenge_expired")
        return challenge

    def healthy(self) -> bool:
        try:
            self._run(lambda c: c.execute("SELECT 1 FROM control_challenges LIMIT 1").fetchone())
        except StoreError:
            return False
        return True
