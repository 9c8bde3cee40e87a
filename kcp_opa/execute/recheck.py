"""The policy again at execution: a receipt is honoured only if the policy still says yes now.

A receipt is signed for a decision; by the time it is used the bundle may have been reloaded,
an exception it relied on may have expired, or the budget it counted on may have been spent by
another execution. Immediately before the receipt is consumed, the executor re-decides the
frozen action on the gate's current bundle, exceptions and context (every count but this
receipt's own reservation), with the controls the verified receipt covers as satisfied (the
receipt is the evidence that they were). Unless the policy approves it again, execution is
refused with ``policy_changed`` naming what the policy says now, the receipt is not consumed,
and the ledger holds both decisions: the original and the re-decision (the gate records every
decision it makes). A retry with the same idempotency key, or an ambiguous execution
reconciled and retried, presents a receipt and goes through the same check. Python decides
nothing here: it asks the policy and reads ``execution_allowed``.
"""

from __future__ import annotations

import datetime as dt

from kcp_opa.context.builder import ContextSources
from kcp_opa.context.counting import excluding
from kcp_opa.core.errors import ActionRejectedError, ReceiptVerificationError
from kcp_opa.core.jsonread import JsonObject, strings
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateinput import built_context
from kcp_opa.models.decision import Decision
from kcp_opa.stores.protocols import NonceStore


def redecide(
    gate: Gate,
    action: JsonObject | CheckedAction,
    receipt: JsonObject,
    *,
    now: dt.datetime | None = None,
    principal: str | None = None,
    context: ContextSources | None = None,
    step: str = "execution",
) -> Decision:
    """The policy's decision now for ``action``, with the verified receipt's controls satisfied.

    The gate's counts leave out the receipt's own budget reservation: that reservation is the
    transfer being decided (its amount), so counting it as well would refuse a receipt that fits.
    Its ledger entry is a re-decision (``step``: ``execution`` or ``receipt_verification``) of the
    decision the receipt names, under a new id of its own.
    """
    own = receipt.get("receipt_id")
    with excluding(own if isinstance(own, str) else None):  # today's facts, exceptions and counts
        fresh = gate.input_for(action, now=now, principal=principal, context=context)  # read here, never handed out
    covered = strings(receipt.get("satisfied_controls"))
    prepared = gate.reprepare(  # the gate's own seal, as the control desk re-derives a decision
        action,
        at=fresh.evaluated_at,
        decision_id=fresh.decision_id,
        satisfied=sorted(set(covered) | set(gate.system_controls)),
        facts=built_context(fresh.document),
        redecision=step,
        original_decision_id=_decision_of(receipt) or fresh.decision_id,
    )
    return gate.decide_prepared(prepared)


def _decision_of(receipt: JsonObject) -> str | None:
    """The decision a receipt names (verified with the receipt before anything is consumed)."""
    named = receipt.get("decision_id")
    return named if isinstance(named, str) and named else None


def refusal(decision: Decision, receipt: JsonObject) -> str | None:
    """Why the re-decision no longer allows what ``receipt`` authorised (None: it does)."""
    verdict = decision.verdict
    if verdict.execution_allowed:
        return None
    missing = f"; missing {', '.join(verdict.missing_controls)}" if verdict.missing_controls else ""
    return (
        f"the policy changed since receipt {receipt.get('receipt_id')} (decision {receipt.get('decision_id')}): "
        f"re-decided on bundle {decision.bundle_revision} as {verdict.decision.value} "
        f"({', '.join(verdict.reason_codes)}){missing}; re-decision {decision.decision_id}"
    )


class Rechecked:
    """A nonce store that re-decides first: its consume is the last check before the atomic consume."""

    def __init__(
        self,
        inner: NonceStore,
        gate: Gate,
        action: JsonObject | CheckedAction,
        receipt: JsonObject,
        *,
        now: dt.datetime | None,
        principal: str | None,
        context: ContextSources | None,
        step: str = "execution",
    ) -> None:
        self.inner, self.gate, self.action, self.receipt = inner, gate, action, receipt
        self.now, self.principal, self.context, self.step = now, principal, context, step
        self.decision: Decision | None = None

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        try:
            self.decision = redecide(
                self.gate,
                self.action,
                self.receipt,
                now=self.now,
                principal=self.principal,
                context=self.context,
                step=self.step,
            )
        except ActionRejectedError as exc:  # e.g. prepared on a bundle no longer loaded
            raise ReceiptVerificationError(f"the action could not be re-decided: {exc}", "policy_changed") from None
        why = refusal(self.decision, self.receipt)
        if why is not None:
            raise ReceiptVerificationError(why, "policy_changed")
        return self.inner.consume(nonce, receipt_id, expires_at)
