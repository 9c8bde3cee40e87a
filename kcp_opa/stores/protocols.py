"""What the gate asks of its state, whatever holds it: one Protocol per piece of state.

Every guarantee that rests on state is stated here as the contract of a method, so a backend
(SQLite in :mod:`kcp_opa.stores.sqlite`; another database in its own package beside it) is
correct when it keeps these contracts, across processes and, for a shared database, machines.
Every method raises :class:`~kcp_opa.core.errors.StoreError` (or a subclass of
:class:`~kcp_opa.core.errors.CodedError` it names) when the backend fails: never a driver's own
exception, so callers fail closed on one error root.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.keys import Key
from kcp_opa.stores.storedtypes import (
    Challenge,
    ExecutionRecord,
    LedgerSnapshot,
    PendingSignIn,
    PostedFact,
    ReservationKey,
    StoredDecision,
    Transfer,
    TransferTotals,
    UiSession,
)

T = TypeVar("T")

DEFAULT_CHALLENGE_TTL_SECONDS = 900


class NonceStore(Protocol):
    """Where consumed receipts are remembered; ``consume`` must be atomic across processes."""

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        """Durably record the nonce and receipt id; False when either was consumed before."""
        ...


class ExecutionStore(Protocol):
    """Executions, one per idempotency key, each claimed under a lease before its handler runs."""

    def claim_execution(
        self, idempotency_key: str, action_hash: str, receipt_id: str, *, lease_seconds: float = 300.0
    ) -> ExecutionRecord | None:
        """Claim the key (state running, lease from now); None if claimed now, else the existing record.

        Two claims of one key, in any processes, give exactly one None.
        """
        ...

    def finish_execution(self, idempotency_key: str, *, outcome: object = None, error: str | None = None) -> bool:
        """Record the outcome (failed when ``error``) of a running claim; False if it was no longer running."""
        ...

    def release_claim(self, idempotency_key: str, receipt_id: str, *, nonce: str | None = None) -> bool:
        """Undo a running claim whose handler never ran (its intent could not be audited).

        The claim is deleted; with ``nonce`` (the receipt consumed in the claim's own transaction)
        the receipt is consumed no more and its budget reservation is reserved again, in the same
        transaction, so the store is as if the call had never been made. False (nothing changed)
        when ``receipt_id`` holds no running claim of the key.
        """
        ...

    def mark_unrecorded(self, idempotency_key: str, receipt_id: str, *, outcome: object, note: str) -> bool:
        """A running claim whose handler ran but whose outcome the ledger could not record.

        Its lease ends now, so it reads as ``ambiguous`` (never run again, listed, resolved only by
        ``reconcile``); ``outcome`` (what the handler returned, JSON) and ``note`` (kept as its
        error) are for the operator. False when ``receipt_id`` holds no running claim of the key.
        """
        ...

    def execution(self, idempotency_key: str) -> ExecutionRecord | None:
        """The key's record; a running claim past its lease reads as ``ambiguous``."""
        ...

    def ambiguous_executions(self) -> list[ExecutionRecord]:
        """Every claim whose lease expired without an outcome, oldest first."""
        ...

    def reconcile(self, idempotency_key: str, outcome: str, evidence: str) -> ExecutionRecord:
        """Resolve an ambiguous claim as succeeded or failed on an operator's evidence, kept with it.

        Refuses with StoreError codes ``bad_outcome``, ``no_evidence``, ``unknown_key``, ``not_ambiguous``.
        """
        ...

    def record_refusal(self, code: str, message: str, *, receipt_id: str | None, action_hash: str | None) -> None:
        """Keep a refused receipt (its code and message) for the operator."""
        ...


class ExecutorStore(NonceStore, ExecutionStore, Protocol):
    """What the :class:`~kcp_opa.execute.executor.Executor` needs: consumes and executions together."""

    def consume_and_claim(
        self,
        nonce: str,
        receipt_id: str,
        expires_at: str,
        *,
        idempotency_key: str,
        action_hash: str,
        lease_seconds: float = 300.0,
    ) -> tuple[bool, ExecutionRecord | None]:
        """``consume``, then (only if consumed now) ``claim_execution``, in ONE transaction.

        Returns (consumed, existing record or None when claimed now). No crash can leave the
        receipt consumed without the claim, or the claim without the consume.
        """
        ...


class HandoffStore(Protocol):
    """Receipts verified and consumed by one principal, to be executed by that principal once."""

    def hand_off(self, nonce: str, receipt_id: str, principal: str) -> None:
        """Record that ``principal`` verified and consumed this receipt (call right after consuming)."""
        ...

    def take(self, nonce: str, receipt_id: str, principal: str) -> bool:
        """Accept the hand-off for ``principal`` once (atomically); False for anyone else or a second time."""
        ...

    def give_back(self, nonce: str, receipt_id: str, principal: str) -> bool:
        """Undo ``take`` for a receipt whose execution never ran: ``principal`` may take it once more."""
        ...


class DecisionStore(Protocol):
    """Decisions kept by the service (sealed control records), shared by every process on the store."""

    def seal_key(self) -> bytes:
        """The desk's seal key, made once per store: every process on it seals alike."""
        ...

    def put(self, decision_id: str, evaluated_by: str, agent_id: str | None, document: JsonObject) -> None:
        """Keep a new decision's record; a decision id is kept once."""
        ...

    def get(self, decision_id: str) -> StoredDecision:
        """The kept record; raises UnknownRecordError (``unknown_decision``)."""
        ...

    def update(self, decision_id: str, change: Callable[[StoredDecision], tuple[JsonObject, T]]) -> T:
        """Apply ``change`` (row -> new document, result) under the store's write lock; return its result.

        Concurrent updates of one decision are applied one after the other; none is lost.
        """
        ...

    def count(self) -> int:
        """How many decisions are kept (for status and tests)."""
        ...


class ChallengeStore(Protocol):
    """Control challenges: one-time, expiring, bound to a decision and an action hash."""

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
        """A new open challenge with an unguessable id."""
        ...

    def get(self, challenge_id: str) -> Challenge:
        """The challenge; raises ChallengeError (``unknown_challenge``)."""
        ...

    def for_decision(self, decision_id: str) -> list[Challenge]:
        """The decision's challenges, oldest first."""
        ...

    def open_challenges(self, *, now: dt.datetime | None = None, limit: int = 500) -> list[Challenge]:
        """Open, unexpired challenges, oldest first (an approver's inbox filters them by addressee)."""
        ...

    def consume(self, challenge_id: str, principal_id: str, *, now: dt.datetime | None = None) -> Challenge:
        """Atomically mark an open, unexpired challenge answered; else ChallengeError (used or expired)."""
        ...

    def healthy(self) -> bool:
        """Whether the store answers (for the service's readiness check)."""
        ...


class CounterView(Protocol):
    """The counts a decision reads from the gate's history (times are the stores' UTC text)."""

    def transfers(
        self,
        *,
        currency: str,
        since: str,
        now: str,
        where: Sequence[tuple[str, str]] = (),
        task_types: Sequence[str] | None = None,
        excluding: str | None = None,
    ) -> TransferTotals:
        """Value transfers reserved in (since, now] matching ``where`` (column, value): committed or
        reserved and not yet expired; released ones never count. ``excluding``: a receipt id whose
        own transfer is left out (the re-decision at execution, which must not count it twice)."""
        ...

    def prior_payments(self, tenant_id: str, beneficiary: str) -> int:
        """Committed value transfers of the tenant to the beneficiary, ever (first payment when 0)."""
        ...


class CounterStore(Protocol):
    """Requests per unit and principal, and budget reservations, counted across processes.

    The reservation's commit and release happen in the executor store's own transactions
    (consume, a failed outcome, a lost claim), so both must live in one database.
    """

    def count_request(self, unit: str, principal: str, at: str, since: Sequence[str]) -> list[int]:
        """Record one request; per start in ``since``, the requests in (start, at] up to and including it.

        Of N concurrent requests the k-th recorded sees exactly k.
        """
        ...

    def read(self, work: Callable[[CounterView], T]) -> T:
        """``work`` over the counts, without a lock."""
        ...

    def reserving(
        self, work: Callable[[CounterView], tuple[T, Transfer | None]], keys: Sequence[ReservationKey] = ()
    ) -> T:
        """``work`` under the write lock; the transfer it returns is reserved in the same transaction.

        N concurrent reservers that each check a limit in ``work`` never over-reserve it. ``keys``
        are the values the transfer is filed under and which of them ``work`` reads: a store may
        lock only those, so reservers that share no key it reads run at once; without keys the
        reservation excludes every other.
        """
        ...

    def release(self, receipt_id: str) -> bool:
        """Give back a receipt's reservation (it will not execute)."""
        ...

    def transfer_state(self, receipt_id: str) -> str | None:
        """reserved, committed, released, or None."""
        ...


class LedgerStore(Protocol):
    """The hash-chained audit ledger: one chain, extended by every writer on it and never forked.

    Implemented by a JSON Lines file (``kcp_opa.trail.ledger.AuditLedger``, one machine) and a
    PostgreSQL database (``kcp_opa.trail.pgledger.PostgresLedger``, replicas on many): the same
    entries, byte for byte, so every ``audit`` command reads either, and the service's dashboard
    and report read either through :meth:`snapshot`.
    """

    checkpoint_key: Key | None

    @property
    def location(self) -> str:
        """Where the ledger is, as status and errors may show it (never a credential)."""
        ...

    def append(self, entry: JsonObject) -> JsonDict:
        """Chain and durably write one entry (seq, previous_hash, entry_hash added); returns it.

        Raises LedgerError when it is not durably written: the caller fails closed (never an allow).
        """
        ...

    def close(self) -> JsonDict | None:
        """With a writer key, a signed checkpoint of the head (written beside the chain); returns it."""
        ...

    def healthy(self) -> bool:
        """Whether an append could be written now (for the service's readiness check)."""
        ...

    def snapshot(self) -> AbstractContextManager[LedgerSnapshot | None]:
        """The chain as one ledger file from one consistent read; None before anything is written.

        What the service's dashboard and report verify and count: the bytes ``audit verify``
        reads, whichever backend holds them. A database that cannot be read raises
        StoreUnavailableError (a fault to show as one, never an empty ledger).
        """
        ...


class FactStore(Protocol):
    """Fact attestations issuers posted to the service (``POST /v1/facts``), shared by every replica.

    The store keeps what the service verified; it judges nothing. Every decision reads the ones
    bound to its action or subject and verifies them again against the registry it runs with.
    """

    def keep(self, fact: PostedFact) -> bool:
        """Keep ``fact``; False when the same attestation (``fact_id``) was kept before (nothing changes)."""
        ...

    def bound_to(self, action_hash: str, subject_id: str | None) -> list[PostedFact]:
        """The facts bound to this action's hash or to this subject (canonical id), newest issue
        first, at most :data:`~kcp_opa.stores.storedtypes.POSTED_FACTS_READ` of each binding."""
        ...

    def prune(self, expired_before: int) -> int:
        """Delete the facts that expired before ``expired_before`` (epoch seconds); how many went.

        Decisions archive the facts they used, so a pruned fact is still in every input it decided."""
        ...

    def count(self) -> int:
        """How many posted facts are kept (for status and metrics)."""
        ...


class SessionStore(Protocol):
    """UI sessions and single sign-ons under way, shared by every replica on the store.

    Keys are the sha256 of the browser's cookie (the cookie itself is never stored); expiry is
    the store's clock (the database's ``now()`` on PostgreSQL, so replicas agree).
    """

    def open_session(self, key: str, session: UiSession, lifetime_seconds: int) -> None:
        """Keep ``session`` under ``key`` for ``lifetime_seconds`` (expired sessions are dropped)."""
        ...

    def session(self, key: str) -> UiSession | None:
        """The unexpired session under ``key``, or None."""
        ...

    def close_session(self, key: str) -> None:
        """Delete the session under ``key`` (sign-out): no replica accepts its cookie again."""
        ...

    def begin_sign_in(self, key: str, pending: PendingSignIn, lifetime_seconds: int) -> None:
        """Keep a sign-on under way (the sha256 of its state) for ``lifetime_seconds``."""
        ...

    def take_sign_in(self, key: str) -> PendingSignIn | None:
        """The unexpired sign-on under ``key``, deleted in the same statement: taken at most once."""
        ...
