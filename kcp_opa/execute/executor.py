"""The executor: a side effect runs only on a verified, just-consumed receipt, once per key.

It accepts nothing but a receipt bound to the final action hash as authority (not a decision
id, a chat confirmation or an approval id). One side effect per ``idempotency_key``: the key is
claimed in the store before the handler runs, so two verified receipts for the same action
racing in two processes give one execution; the loser gets the recorded outcome.

Execution is at most once. A claim holds a lease (``lease_seconds``, longer than any handler
may run); if its process dies between the claim and the outcome, later calls get
``ExecutionError(code="ambiguous")`` (and a ledger entry) instead of running the side effect
again: the caller must find out from the target system whether it happened and record that
with ``kcp-opa executions reconcile``. A handler result that is not JSON is recorded as a
failure with its repr (the side effect ran; the key is never left ``running``).

Nothing runs without a committed ledger entry. With an audit trail, the executor writes the
execution's ``intent`` (chained, durable) after the claim and before the handler, and its
outcome (an ``execution`` or ``failure`` entry naming ``intent_seq``) before the store records
it, so the store never says ``succeeded`` or ``failed`` for an outcome the ledger has not got:

- the intent cannot be written (``audit_unavailable``): the handler does not run, and the claim
  is released with the consume it came with (the receipt is unconsumed, its budget reserved
  again, a hand-off given back), so the same receipt executes exactly once when the ledger is
  back. Burning the receipt instead would punish the caller for the gate's outage and leave a
  consumed receipt the ledger never mentions.
- the outcome cannot be written (``outcome_unrecorded``): the side effect ran and the ledger
  shows its intent with no outcome; the claim's lease is ended so it reads as ``ambiguous`` at
  once (never run again, listed by ``executions list``, resolved by ``executions reconcile``),
  keeping what the handler returned for the operator.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeGuard

from kcp_opa.authorize.documents import Receipt
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.context.builder import ContextSources
from kcp_opa.core.errors import ExecutionError, LedgerError, ReceiptVerificationError, StoreError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Keyring
from kcp_opa.decide.action import check_action
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.gate import Gate
from kcp_opa.execute.recheck import Rechecked
from kcp_opa.stores.protocols import ExecutorStore, HandoffStore, NonceStore
from kcp_opa.stores.storedtypes import AMBIGUOUS, ExecutionRecord
from kcp_opa.trail.entries import AuditTrail

Handler = Callable[[JsonObject], object]


def _loggable(value: object) -> TypeGuard[str]:
    """A receipt id we may write to the store and ledger as is (a short, valid UTF-8 string)."""
    if not isinstance(value, str) or len(value) > 200:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _HandedOff:
    """The consume step for ``consumer``: a receipt it verified and consumed counts once, else a consume."""

    def __init__(self, nonces: NonceStore, handoffs: HandoffStore, consumer: str) -> None:
        self.nonces, self.handoffs, self.consumer = nonces, handoffs, consumer

        self.taken: tuple[str, str] | None = None

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        if self.handoffs.take(nonce, receipt_id, self.consumer):
            self.taken = (nonce, receipt_id)
            return True
        return self.nonces.consume(nonce, receipt_id, expires_at)

    def give_back(self) -> None:
        """Undo the take (the execution never ran): the consumer may take it once more."""
        if self.taken is not None:
            self.handoffs.give_back(*self.taken, self.consumer)


class _ConsumeAndClaim:
    """The consume step that also claims the key, in the store's one transaction (see ExecutorStore).

    Handed to ``verify_receipt`` as its nonce store: the consume is still the last check, and
    the claim it makes (or the record it finds) is kept for the executor in ``claim``.
    """

    def __init__(self, store: ExecutorStore, key: str, digest: str, lease_seconds: float) -> None:
        self.store, self.key, self.digest, self.lease_seconds = store, key, digest, lease_seconds
        self.claimed = False
        self.claim: ExecutionRecord | None = None
        self.nonce: str | None = None

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        self.nonce = nonce
        consumed, self.claim = self.store.consume_and_claim(
            nonce,
            receipt_id,
            expires_at,
            idempotency_key=self.key,
            action_hash=self.digest,
            lease_seconds=self.lease_seconds,
        )
        self.claimed = consumed
        return consumed


@dataclass(frozen=True)
class _Claim:
    """The key this call claimed, under which receipt; ``nonce`` when the claim consumed the receipt
    in its own transaction, ``handed`` when it took a hand-off (what releasing it must undo)."""

    key: str
    digest: str
    receipt_id: str
    nonce: str | None
    handed: _HandedOff | None
    decision_id: str  # the decision the verified receipt names: the intent and outcome entries name it


@dataclass(frozen=True)
class ExecutionResult:
    idempotency_key: str
    receipt_id: str
    outcome: object
    replayed: bool
    """True when this call did not run the handler but returned the recorded outcome."""


class Executor:
    """Verify-and-consume, then execute at most once per idempotency key.

    With ``handoffs``, a call naming its ``consumer`` may execute a receipt that same principal
    verified and consumed before (the KYA sequence's hand-off), once; any other reuse is ``replay``.
    """

    def __init__(
        self,
        *,
        keyring: Keyring,
        policy_versions: Collection[str],
        store: ExecutorStore,
        audit: AuditTrail | None = None,
        lease_seconds: float = 300.0,
        handoffs: HandoffStore | None = None,
        gate: Gate | None = None,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.lease_seconds = lease_seconds
        self.keyring = keyring
        self.policy_versions = frozenset(policy_versions)
        self.store = store
        self.audit = audit
        self.handoffs = handoffs
        #: With a gate, every receipt is re-decided before it is consumed (kcp_opa.execute.recheck).
        self.gate = gate

    def _emit(self, kind: str, action: JsonObject, **fields: object) -> int | None:
        """Write one entry; its seq (None without a ledger)."""
        return None if self.audit is None else int(self.audit.event(kind, action, None, **fields)["seq"])

    def _intend(self, action: JsonObject, claim: _Claim) -> int | None:
        """Write the execution's intent (its seq), or release the claim and refuse: nothing runs unaudited."""
        if self.audit is None:
            return None
        try:
            entry = self.audit.event(
                "intent",
                action,
                None,
                idempotency_key=claim.key,
                receipt_id=claim.receipt_id,
                action_hash=claim.digest,
                decision_id=claim.decision_id,
            )
        except LedgerError as exc:
            message = f"{claim.key} did not run: the audit ledger cannot record its intent ({exc})"
            message = f"{message}; {self._release(claim)}"
            # The store's trace of the attempt (the ledger could not take one); when the store is
            # failing too, the caller's error is the only trace left.
            with contextlib.suppress(StoreError):
                self.store.record_refusal(
                    "audit_unavailable", message, receipt_id=claim.receipt_id, action_hash=claim.digest
                )
            raise ExecutionError(message, "audit_unavailable") from None
        return int(entry["seq"])

    def _release(self, claim: _Claim) -> str:
        """Undo the claim (and the consume or hand-off it came with); what the caller is told of it."""
        try:
            released = self.store.release_claim(claim.key, claim.receipt_id, nonce=claim.nonce)
            if released and claim.handed is not None:
                claim.handed.give_back()
        except StoreError as exc:
            return (
                f"the claim could not be released either ({exc}): it reads as ambiguous when its lease ends, and "
                f"the ledger holds no intent for it, so reconcile it as failed (it did not run)"
            )
        if not released:
            return "its claim was no longer running (reconciled meanwhile)"
        return f"receipt {claim.receipt_id} is not consumed: present it again when the ledger is back"

    def _conclude(
        self,
        action: JsonObject,
        claim: _Claim,
        intent_seq: int | None,
        kind: str,
        *,
        outcome: object = None,
        error: str | None = None,
        **fields: object,
    ) -> tuple[bool, int | None]:
        """Record the outcome: in the ledger first (naming the intent and the decision), then in the store.

        Returns the store's answer (False: the claim was reconciled meanwhile) and the outcome's seq. When the ledger
        cannot take the outcome, the store row is marked unrecorded (ambiguous) instead of
        finished, and the caller gets ``outcome_unrecorded``: the side effect ran.
        """
        seq = None
        if self.audit is not None:
            try:
                seq = self._emit(
                    kind,
                    action,
                    idempotency_key=claim.key,
                    receipt_id=claim.receipt_id,
                    action_hash=claim.digest,
                    intent_seq=intent_seq,
                    decision_id=claim.decision_id,
                    outcome="failed" if kind == "failure" else "succeeded",
                    **fields,
                )
            except LedgerError as exc:
                ran = f"failed ({error})" if error is not None else "succeeded"
                note = (
                    f"outcome_unrecorded: the handler ran and {ran}, but the audit ledger could not record the "
                    f"outcome of intent seq {intent_seq} ({exc})"
                )
                try:
                    marked = self.store.mark_unrecorded(claim.key, claim.receipt_id, outcome=outcome, note=note)
                    where = "the claim reads as ambiguous" if marked else "its claim was reconciled meanwhile"
                except StoreError as failure:
                    where = f"the store could not mark it either ({failure}): it reads as ambiguous when its lease ends"
                raise ExecutionError(
                    f"{claim.key}: the side effect RAN but its outcome is not in the audit ledger ({exc}); {where}: "
                    f"check the target system, then `kcp-opa executions reconcile {claim.key} --outcome "
                    "succeeded|failed --evidence REF --ledger LEDGER`",
                    "outcome_unrecorded",
                ) from None
        return self.store.finish_execution(claim.key, outcome=outcome, error=error), seq

    def execute_authorized_action(
        self,
        action: JsonObject | CheckedAction,
        receipt: Receipt | JsonObject,
        handler: Handler,
        *,
        now: dt.datetime | None = None,
        consumer: str | None = None,
        principal: str | None = None,
        context: ContextSources | None = None,
    ) -> ExecutionResult:
        """Run ``handler(action)`` under ``receipt``; raises ReceiptVerificationError or ExecutionError.

        ``consumer``: the principal executing, whose own hand-off (see the class) is accepted once.
        With a gate, ``principal`` (default: the action's agent_id) and ``context`` are whom and
        what the re-decision establishes the facts for (a refusal is ``policy_changed``).
        """
        checked = check_action(action)  # once: the read-only copy is what is verified, re-decided and run
        action, digest = checked.mapping, checked.hash
        wire = receipt.to_dict() if isinstance(receipt, Receipt) else receipt  # checked as the JSON it is sent as
        raw_id = wire.get("receipt_id") if isinstance(wire, Mapping) else None
        receipt_id = raw_id if _loggable(raw_id) else None
        key = str(action["idempotency_key"])
        combined = _ConsumeAndClaim(self.store, key, digest, self.lease_seconds)
        nonces: NonceStore = combined
        handed = None
        if consumer is not None and self.handoffs is not None:
            nonces = handed = _HandedOff(combined, self.handoffs, consumer)
        if self.gate is not None:
            agent = action.get("agent_id")
            who = principal if principal is not None else agent if isinstance(agent, str) else None
            nonces = Rechecked(nonces, self.gate, checked, wire, now=now, principal=who, context=context)
        try:
            verified = verify_receipt(
                wire,
                checked,
                keyring=self.keyring,
                policy_versions=self.policy_versions,
                nonce_store=nonces,
                now=now,
            )
        except ReceiptVerificationError as exc:
            self.store.record_refusal(
                exc.code, str(exc), receipt_id=str(receipt_id) if receipt_id else None, action_hash=digest
            )
            try:
                exc.ledger_seq = self._emit(
                    "failure", action, code=exc.code, message=str(exc), receipt_id=receipt_id, action_hash=digest
                )
            except LedgerError as failure:  # e.g. the re-decision refused because the ledger is down
                raise ExecutionError(
                    f"{key} did not run: refused ({exc.code}: {exc}) and the audit ledger cannot record it "
                    f"({failure}); the receipt was not consumed by this call",
                    "audit_unavailable",
                ) from None
            raise
        decision_id = verified.receipt.decision_id  # signed: the receipt verified
        named = {"receipt_id": receipt_id, "action_hash": digest, "idempotency_key": key, "decision_id": decision_id}
        if combined.claimed:
            existing = combined.claim
        else:  # a hand-off taken: the receipt was consumed before, so claim on its own
            existing = self.store.claim_execution(key, digest, str(receipt_id), lease_seconds=self.lease_seconds)
        if existing is not None:
            if existing.action_hash != digest:
                raise ExecutionError(f"idempotency key {key} was used for a different action", "idempotency_key_reused")
            if existing.state == AMBIGUOUS:
                why = (
                    f"ran but its outcome is not in the audit ledger ({existing.error})"
                    if existing.error
                    else "its lease expired without an outcome: it may or may not have run"
                )
                message = (
                    f"{key} was claimed under receipt {existing.receipt_id} at {existing.started_at} and {why}; "
                    "check the target system, then "
                    f"`kcp-opa executions reconcile {key} --outcome succeeded|failed --evidence REF`"
                )
                refused = ExecutionError(message, "ambiguous")
                refused.ledger_seq = self._emit("failure", action, code="execution_ambiguous", message=message, **named)
                raise refused
            if existing.state == "running":
                raise ExecutionError(f"{key} is being executed under receipt {existing.receipt_id}", "in_progress")
            if existing.state == "failed":
                raise ExecutionError(f"{key} already failed: {existing.error}", "already_failed")
            self._emit("execution", action, replayed=True, outcome="succeeded", **named)
            return ExecutionResult(key, existing.receipt_id, existing.outcome, replayed=True)
        claim = _Claim(
            key,
            digest,
            str(receipt_id),
            combined.nonce if combined.claimed else None,
            handed if handed is not None and handed.taken is not None else None,
            decision_id,
        )
        intent_seq = self._intend(action, claim)  # nothing below runs unless the ledger holds the intent
        try:
            outcome = handler(action)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            failed = ExecutionError(f"the handler failed for {key}: {exc}", "handler_failed")
            _, failed.ledger_seq = self._conclude(
                action, claim, intent_seq, "failure", error=message, code="handler_failed", message=str(exc)
            )
            raise failed from exc
        try:
            json.dumps(outcome, sort_keys=True, allow_nan=False)  # exactly as the store writes it
        except (TypeError, ValueError) as exc:
            detail = f"the handler's result is not JSON ({exc}): {repr(outcome)[:500]}"
            unjson = ExecutionError(f"{key}: {detail}; recorded as failed (the side effect ran)", "result_not_json")
            _, unjson.ledger_seq = self._conclude(
                action, claim, intent_seq, "failure", error=detail, code="result_not_json", message=detail
            )
            raise unjson from None
        if not self._conclude(action, claim, intent_seq, "execution", outcome=outcome, replayed=False)[0]:
            message = f"{key} finished after its lease expired and was reconciled meanwhile; outcome {outcome!r}"
            late = ExecutionError(message, "late_outcome")
            late.ledger_seq = self._emit(
                "failure", action, code="late_outcome", message=message, intent_seq=intent_seq, **named
            )
            raise late
        return ExecutionResult(key, str(receipt_id), outcome, replayed=False)
