"""Control challenges: one-time, expiring requests for one control result, kept in SQLite.

A challenge is bound to a decision id and an action hash, addressed to the principals or roles
who may answer it, and carries the frozen action's summary a person needs to decide (amount and
currency in major units, beneficiary, fees, consequence). Its state lives in the service's store,
never with the caller: answering consumes it atomically (one UPDATE guarded by its state and
expiry), so a second answer or a late one is refused whatever the caller holds.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcp_opa.core.errors import CodedError, StoreError

if TYPE_CHECKING:
    from kcp_opa.authorize.controls import GateDecision
    from kcp_opa.decide.gate import Gate

_SCHEMA = """
CREATE TABLE IF NOT EXISTS control_challenges (
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
);
CREATE INDEX IF NOT EXISTS control_challenges_decision ON control_challenges (decision_id, control);
"""
_TIME = "%Y-%m-%dT%H:%M:%SZ"
DEFAULT_CHALLENGE_TTL_SECONDS = 900

#: ISO 4217 minor-unit exponents that are not 2 (the summary shows major units, as text).
_EXPONENTS = {"JPY": 0, "KRW": 0, "CLP": 0, "ISK": 0, "VND": 0, "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3}
_EXPONENTS |= {"OMR": 3, "TND": 3}
#: Controls a person answers; the subject answers these two, an approver the others.
SUBJECT_CONTROLS = frozenset({"user_confirmation", "step_up_authentication"})
APPROVER_CONTROLS = frozenset({"independent_human_approval", "compliance_review"})


class ChallengeError(CodedError):
    """A challenge that cannot be answered: unknown, used, expired, or addressed to someone else."""


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(_TIME)


def major_units(value_minor: int, currency: str) -> str:
    """800000 USD -> "8000.00": exact decimal text, never a float."""
    exponent = _EXPONENTS.get(currency, 2)
    sign, digits = ("-" if value_minor < 0 else ""), str(abs(value_minor)).rjust(exponent + 1, "0")
    return f"{sign}{digits[:-exponent]}.{digits[-exponent:]}" if exponent else f"{sign}{digits}"


def action_summary(action: Mapping[str, Any], decision: Mapping[str, Any]) -> dict[str, Any]:
    """What a person answering a challenge must see of the frozen action, nothing more."""
    amount = _mapping(action.get("amount"))
    target = _mapping(action.get("target"))
    attributes = _mapping(action.get("attributes"))
    money = None
    if amount:
        money = {
            "value_minor": amount["value_minor"],
            "currency": amount["currency"],
            "major": major_units(int(amount["value_minor"]), str(amount["currency"])),
        }
    fees = attributes.get("fees")
    what = f"{action.get('requested_action')} ({action.get('action_type')})"
    if money is not None:
        what += f": {money['major']} {money['currency']} to {target.get('reference', 'an unnamed target')}"
    return {
        "action_id": action.get("action_id"),
        "tenant_id": action.get("tenant_id"),
        "subject_id": action.get("subject_id"),
        "agent_id": action.get("agent_id"),
        "requested_action": action.get("requested_action"),
        "action_type": action.get("action_type"),
        "amount": money,
        "beneficiary": {k: target.get(k) for k in ("type", "reference", "account_fingerprint", "country")},
        "fees": fees if fees is not None else "none stated in the action",
        "consequence": f"{what}; executed once under a one-time receipt if every control passes",
        "decision": decision.get("decision"),
        "risk_level": decision.get("risk_level"),
        "reasons": [r.get("message") for r in decision.get("reasons", []) if isinstance(r, Mapping)],
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Challenge:
    challenge_id: str
    decision_id: str
    action_hash: str
    control: str
    addressed_to: Mapping[str, list[str]]
    summary: Mapping[str, Any]
    created_by: str
    created_at: str
    expires_at: str
    state: str
    consumed_by: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "challenge_id": self.challenge_id,
            "decision_id": self.decision_id,
            "action_hash": self.action_hash,
            "control": self.control,
            "addressed_to": dict(self.addressed_to),
            "summary": dict(self.summary),
            "created_by": self.created_by,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "state": self.state,
        }


_COLUMNS = (
    "challenge_id, decision_id, action_hash, control, addressed_to, summary, created_by, created_at,"
    " expires_at, state, consumed_by"
)


class ChallengeStore:
    """The ``control_challenges`` table in the service's SQLite file (WAL, synchronous=FULL)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._run(lambda c: c.executescript(_SCHEMA))

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            self._local.connection = connection
        return connection

    def _run(self, work: Any) -> Any:
        try:
            return work(self._connection())
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: challenge store failed: {exc}") from None

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
        moment = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
        challenge = Challenge(
            challenge_id=f"chl_{secrets.token_hex(16)}",
            decision_id=decision_id,
            action_hash=action_hash,
            control=control,
            addressed_to={k: sorted(v) for k, v in addressed_to.items()},
            summary=dict(summary),
            created_by=created_by,
            created_at=_stamp(moment),
            expires_at=_stamp(moment + dt.timedelta(seconds=ttl_seconds)),
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

    def consume(self, challenge_id: str, principal_id: str, *, now: dt.datetime | None = None) -> Challenge:
        """Atomically mark an open, unexpired challenge answered; refuse anything else with its code."""
        moment = _stamp(now or dt.datetime.now(dt.UTC))
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
        """Refuse a used or expired challenge before anything else is looked at."""
        if challenge.state != "open":
            raise ChallengeError(f"challenge {challenge.challenge_id} was answered before", "challenge_used")
        if _stamp(now or dt.datetime.now(dt.UTC)) >= challenge.expires_at:
            raise ChallengeError(
                f"challenge {challenge.challenge_id} expired at {challenge.expires_at}", "challenge_expired"
            )

    def healthy(self) -> bool:
        try:
            self._run(lambda c: c.execute("SELECT count(*) FROM control_challenges").fetchone())
        except StoreError:
            return False
        return True


def addressees(gate: Gate, control: str, record: GateDecision) -> dict[str, list[str]]:
    """Who may answer: the subject for its own confirmation, approvers, else a provider."""
    if control in SUBJECT_CONTROLS:
        return {"principals": [str(record.action.get("subject_id", ""))], "kinds": ["human"], "roles": []}
    if control in APPROVER_CONTROLS:
        return {"principals": [], "kinds": ["human"], "roles": _approval_roles(gate, control, record)}
    # A provider, unless the control policy does not admit one (a safe_stop is a system's or a
    # person's): then whoever it admits, since a challenge no admissible actor can answer never completes.
    admitted = policy_actor_kinds(gate).get(control, frozenset({"provider"}))
    kinds = ["provider"] if "provider" in admitted else sorted(admitted & _ANSWERING_KINDS)
    return {"principals": [], "kinds": kinds or ["provider"], "roles": []}


#: Actor types of the control policy that a principal kind answers as ("user" is the subject).
_ANSWERING_KINDS = frozenset({"provider", "human", "system"})
_ACTORS: dict[str, dict[str, frozenset[str]]] = {}
_ACTORS_LOCK = threading.Lock()


def policy_actor_kinds(gate: Gate) -> dict[str, frozenset[str]]:
    """``data.kcp.controls.allowed_actors`` of the gate's bundle, read once per revision."""
    from kcp_opa.core.errors import QueryError
    from kcp_opa.decide.query import evaluate_query

    with _ACTORS_LOCK:
        if gate.bundle_revision not in _ACTORS:
            try:
                found = evaluate_query(gate.bundle, "data.kcp.controls.allowed_actors", values_only=True)
            except QueryError:
                found = []
            value = found[0] if isinstance(found, list) and found and isinstance(found[0], dict) else {}
            _ACTORS[gate.bundle_revision] = {
                str(k): frozenset(str(a) for a in v) for k, v in value.items() if isinstance(v, list)
            }
        return _ACTORS[gate.bundle_revision]


def _approval_roles(gate: Gate, control: str, record: GateDecision) -> list[str]:
    """The roles the policy will ask of the approver (so a wrong one does not spend the challenge)."""
    if control == "compliance_review":
        return ["compliance_officer"]
    if record.decision.verdict.approver_roles:
        return list(record.decision.verdict.approver_roles)
    params = gate.bundle.data.get("kcp_data", {}).get("matrix", {}).get("parameters", {})
    by_role = params.get("approver_roles", {})
    role = by_role.get("by_task_type", {}).get(str(record.action.get("action_type")), by_role.get("default"))
    return [str(role)] if role else ["approver"]
