"""Control challenges in SQLite: answering one consumes it in one UPDATE guarded by state and expiry.

Implements :class:`~kcp_opa.stores.protocols.ChallengeStore` (WAL, ``synchronous=FULL``). The
state lives in the service's store, never with the caller, so a second answer or a late one is
refused whatever the caller holds.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Mapping
from typing import Any

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.protocols import DEFAULT_CHALLENGE_TTL_SECONDS
from kcp_opa.stores.records import CHALLENGE_TIME, Challenge, ChallengeError, check_open
from kcp_opa.stores.sqlite.base import SQLiteBase, statements

_TABLES = statements(
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


class SQLiteChallengeStore(SQLiteBase):
    """The ``control_challenges`` table in the service's SQLite file."""

    component = "challenges"
    steps = (_TABLES,)
    failure = "challenge store failed"

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
        moment = (now or self.clock()).replace(microsecond=0)
        challenge = Challenge(
            challenge_id=f"chl_{secrets.token_hex(16)}",
            decision_id=decision_id,
            action_hash=action_hash,
            control=control,
            addressed_to={k: sorted(v) for k, v in addressed_to.items()},
            summary=dict(summary),
            created_by=created_by,
            created_at=self.stamp(moment, CHALLENGE_TIME),
            expires_at=self.stamp(moment + dt.timedelta(seconds=ttl_seconds), CHALLENGE_TIME),
            state="open",
            consumed_by=None,
        )
        self._run(
            lambda c: c.execute(
                f"INSERT INTO control_challenges ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
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
                    "open",
                    None,
                ),
            )
        )
        return challenge

    def get(self, challenge_id: str) -> Challenge:
        row = self._run(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM control_challenges WHERE challenge_id = ?",  # noqa: S608
                (challenge_id,),
            ).fetchone()
        )
        if row is None:
            raise ChallengeError(f"no challenge {challenge_id}", "unknown_challenge")
        return Challenge(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])

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
            if challenge.state == "consumed":
                raise ChallengeError(f"challenge {challenge_id} was answered before", "challenge_used")
            raise ChallengeError(f"challenge {challenge_id} expired at {challenge.expires_at}", "challenge_expired")
        return challenge

    def check_open(self, challenge: Challenge, *, now: dt.datetime | None = None) -> None:
        """Refuse a used or expired challenge (kept for callers of the old class; see ``records.check_open``)."""
        check_open(challenge, now=now)

    def healthy(self) -> bool:
        try:
            self._run(lambda c: c.execute("SELECT count(*) FROM control_challenges").fetchone())
        except StoreError:
            return False
        return True
