"""The documents the stores hand back: the same types whichever backend holds the state.

They live here, below every caller, so a Protocol in :mod:`kcp_opa.stores.protocols` can name
them and a backend can build them without importing the pipeline.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import CodedError, StoreError
from kcp_opa.core.jsonread import JsonDict, JsonObject

#: An execution still ``running`` past its lease: its process died or hung between claim and outcome.
AMBIGUOUS = "ambiguous"
#: How challenge times are written (whole seconds, UTC).
CHALLENGE_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class ExecutionRecord:
    """``state``: running, succeeded, failed, or ambiguous (running past its lease)."""

    idempotency_key: str
    action_hash: str
    receipt_id: str
    state: str
    outcome: object
    error: str | None
    started_at: str = ""
    lease_expires_at: str | None = None


@dataclass(frozen=True)
class StoredDecision:
    """A row: the record's export, and the canonical ids of its evaluator and of the agent it names."""

    decision_id: str
    evaluated_by: str
    agent_id: str | None
    document: JsonObject


class UnknownRecordError(CodedError):
    code = "unknown_decision"


class ChallengeError(CodedError):
    """A challenge that cannot be answered: unknown, used, expired, or addressed to someone else."""


@dataclass(frozen=True)
class Challenge:
    challenge_id: str
    decision_id: str
    action_hash: str
    control: str
    addressed_to: Mapping[str, list[str]]
    summary: JsonObject
    created_by: str
    created_at: str
    expires_at: str
    state: str
    consumed_by: str | None

    @classmethod
    def new(
        cls,
        decision_id: str,
        action_hash: str,
        control: str,
        addressed_to: Mapping[str, list[str]],
        summary: JsonObject,
        created_by: str,
        moment: dt.datetime,
        ttl_seconds: int,
    ) -> Challenge:
        """A new open challenge from ``moment`` (whole seconds); its id is 128 random bits, not a credential."""
        start = moment.replace(microsecond=0)
        return cls(
            challenge_id=f"chl_{secrets.token_hex(16)}",
            decision_id=decision_id,
            action_hash=action_hash,
            control=control,
            addressed_to={k: sorted(v) for k, v in addressed_to.items()},
            summary=dict(summary),
            created_by=created_by,
            created_at=challenge_stamp(start),
            expires_at=challenge_stamp(start + dt.timedelta(seconds=ttl_seconds)),
            state="open",
            consumed_by=None,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any] | None, challenge_id: str) -> Challenge:
        """A stored row (``stores.sql.CHALLENGE_COLUMNS``); an unknown id is a ChallengeError."""
        if row is None:
            raise ChallengeError(f"no challenge {challenge_id}", "unknown_challenge")
        return cls(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])

    def row(self) -> tuple[object, ...]:
        """The values a store writes (``stores.sql.CHALLENGE_COLUMNS``, the fields' order)."""
        values = [getattr(self, field.name) for field in fields(self)]
        documents = (json.dumps(self.addressed_to, sort_keys=True), json.dumps(self.summary, sort_keys=True))
        return (*values[:4], *documents, *values[6:])

    def to_dict(self) -> JsonDict:
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


def challenge_stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(CHALLENGE_TIME)


def check_open(challenge: Challenge, *, now: dt.datetime | None = None) -> None:
    """Refuse a used or expired challenge before anything else is looked at (no store needed)."""
    if challenge.state != "open":
        raise ChallengeError(f"challenge {challenge.challenge_id} was answered before", "challenge_used")
    if challenge_stamp(now or dt.datetime.now(dt.UTC)) >= challenge.expires_at:
        raise ChallengeError(
            f"challenge {challenge.challenge_id} expired at {challenge.expires_at}", "challenge_expired"
        )


def refuse_unconsumed(challenge: Challenge) -> None:
    """Why an answer did not consume ``challenge`` (read after the guarded UPDATE changed nothing)."""
    if challenge.state == "consumed":
        raise ChallengeError(f"challenge {challenge.challenge_id} was answered before", "challenge_used")
    raise ChallengeError(f"challenge {challenge.challenge_id} expired at {challenge.expires_at}", "challenge_expired")


def check_reconcile(outcome: str, evidence: str) -> None:
    """An operator's reconcile names an outcome and the evidence for it (checked before any store is read)."""
    if outcome not in {"succeeded", "failed"}:
        raise StoreError(f"outcome is succeeded or failed, not {outcome!r}", "bad_outcome")
    if not evidence.strip():
        raise StoreError("reconciling needs an evidence reference (what shows the outcome)", "no_evidence")


def reconciled(
    idempotency_key: str, record: ExecutionRecord | None, outcome: str, evidence: str
) -> tuple[str | None, str | None]:
    """The stored (outcome document, error) of reconciling ``record``; only an ambiguous claim is reconciled."""
    if record is None:
        raise StoreError(f"no execution claimed {idempotency_key}", "unknown_key")
    if record.state != AMBIGUOUS:
        raise StoreError(
            f"{idempotency_key} is {record.state}, not ambiguous; only an expired claim is reconciled",
            "not_ambiguous",
        )
    if outcome == "succeeded":
        return json.dumps({"reconciled": outcome, "evidence": evidence}, sort_keys=True), None
    return None, f"reconciled as failed (evidence: {evidence})"


@dataclass(frozen=True)
class Transfer:
    """A value transfer the gate issued a receipt for: what a budget reservation holds.

    Times are UTC text in the stores' format (``MICROS`` of the SQLite base), compared as strings.
    """

    receipt_id: str
    tenant_id: str
    agent_id: str
    task_type: str
    beneficiary: str | None
    currency: str
    amount_minor: int
    reserved_at: str
    expires_at: str


@dataclass(frozen=True)
class ReservationKey:
    """One value a reservation's transfer is filed under (``column``: tenant_id, agent_id or
    task_type), and whether the reservation also reads the counts kept under it (``reads``).

    A store that locks per key lets reservations that share no key run at once: one that reads
    a key excludes every other holder of it; one that only writes under it shares it.
    """

    column: str
    value: str
    reads: bool

    def lock_id(self) -> int:
        """A signed 64-bit id for the key (a PostgreSQL advisory lock); a collision only serializes."""
        digest = hashlib.sha256(f"kcp-opa/reservation/{self.column}\0{self.value}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(frozen=True)
class TransferTotals:
    """Value transfers in a window: how many (committed or live reserved), and their sums by state."""

    count: int
    committed_minor: int
    reserved_minor: int


@dataclass(frozen=True)
class LedgerSnapshot:
    """A ledger as every reader reads it: one JSON Lines file, from one consistent read.

    For a file ledger the file itself; for a database a private dump that is byte for byte a
    ledger file (line 1 the header, line N the entry at seq N-1), so the same verifier and
    counters run on either. ``shown`` names the ledger for an admin (never a credential),
    ``name`` for any other reader (no server path).
    """

    path: Path
    shown: str
    name: str
    #: Positions are named by seq (a dump's line numbers mean nothing to its reader), else by line.
    by_seq: bool = False

    def position(self, line: int) -> str:
        """Where line ``line`` of :attr:`path` is, as the ledger's reader finds it."""
        if not self.by_seq:
            return f"line {line}"
        return "the header" if line <= 1 else f"seq {line - 1}"


#: How many posted facts one decision reads at most (the newest first): an issuer posting without
#: end cannot make a decision read without end.
POSTED_FACTS_READ = 64


@dataclass(frozen=True)
class PostedFact:
    """A signed fact attestation an issuer posted to the service, kept exactly as it was signed.

    ``fact_id`` is the sha256 of its canonical JSON (KYA-CJ-1), so the same attestation posted
    twice, to any replica, is kept once. It is found by what its signature binds it to: one
    action's hash or one subject's canonical id (never both)."""

    fact_id: str
    issuer: str
    fact: str
    action_hash: str | None
    subject_id: str | None
    issued_at: str
    expires_at: str
    document: JsonObject

    @property
    def expires_epoch(self) -> int:
        """``expires_at`` in whole seconds since the epoch (what pruning compares)."""
        moment = dt.datetime.fromisoformat(self.expires_at.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            raise ValueError(f"expires_at {self.expires_at!r} has no zone")
        return int(moment.timestamp() // 1)


def posted_fact(document: JsonObject, *, issuer: str, subject_id: str | None) -> PostedFact:
    """The row a verified attestation is kept as: ``issuer`` and ``subject_id`` canonical (the
    caller's), the rest read from the signed ``document``."""
    action_hash = document.get("action_hash")
    return PostedFact(
        fact_id=canonical_hash(dict(document)),
        issuer=issuer,
        fact=str(document["fact"]),
        action_hash=action_hash if isinstance(action_hash, str) else None,
        subject_id=None if isinstance(action_hash, str) else subject_id,
        issued_at=str(document["issued_at"]),
        expires_at=str(document["expires_at"]),
        document=document,
    )


def fact_row(fact: PostedFact) -> tuple[object, ...]:
    """A posted fact as the store writes it (``stores.sql.FACT_COLUMNS`` order, then ``expires_epoch``)."""
    document = json.dumps(dict(fact.document), sort_keys=True)
    return (fact.fact_id, fact.issuer, fact.fact, fact.action_hash, fact.subject_id, fact.issued_at, fact.expires_at,
            document, fact.expires_epoch)  # fmt: skip


def fact_of(row: Sequence[Any]) -> PostedFact:
    """A posted fact as the store reads it back."""
    return PostedFact(row[0], row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]))


@dataclass(frozen=True)
class UiSession:
    """A signed-in UI session as the store keeps it: what the service re-resolves on every request.

    ``via`` ``token``: ``subject`` is the sha256 of the bearer token (never the token); ``oidc``:
    the registered principal id the operator's mapping gave the signed-in ``identity``.
    """

    via: str
    subject: str
    identity: str = ""


@dataclass(frozen=True)
class PendingSignIn:
    """A single sign-on begun and not yet finished: the ID token's nonce and the PKCE verifier."""

    nonce: str
    verifier: str
