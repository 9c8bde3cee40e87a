"""The executor: a side effect runs only on a verified, just-consumed receipt, once per key.

It accepts nothing but a receipt bound to the final action hash as authority (not a decision
id, a chat confirmation or an approval id). One side effect per ``idempotency_key``: the key is
claimed in the store before the handler runs, so two verified receipts for the same action
racing in two processes give one execution; the loser gets the recorded outcome.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.authorize.store import SQLiteStore
from kcp_opa.core.errors import ExecutionError, ReceiptVerificationError
from kcp_opa.core.signing import Keyring
from kcp_opa.decide.action import action_hash, check_action
from kcp_opa.trail.entries import AuditTrail

Handler = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class ExecutionResult:
    idempotency_key: str
    receipt_id: str
    outcome: Any
    replayed: bool
    """True when this call did not run the handler but returned the recorded outcome."""


class Executor:
    """Verify-and-consume, then execute at most once per idempotency key."""

    def __init__(
        self,
        *,
        keyring: Keyring,
        policy_versions: Collection[str],
        store: SQLiteStore,
        audit: AuditTrail | None = None,
    ) -> None:
        self.keyring = keyring
        self.policy_versions = frozenset(policy_versions)
        self.store = store
        self.audit = audit

    def _emit(self, kind: str, action: Mapping[str, Any], **fields: Any) -> None:
        if self.audit is not None:
            self.audit.event(kind, action, None, **fields)

    def execute_authorized_action(
        self,
        action: Mapping[str, Any],
        receipt: Mapping[str, Any],
        handler: Handler,
        *,
        now: dt.datetime | None = None,
    ) -> ExecutionResult:
        """Run ``handler(action)`` under ``receipt``; raises ReceiptVerificationError or ExecutionError."""
        check_action(action)
        digest = action_hash(action)
        receipt_id = receipt.get("receipt_id") if isinstance(receipt, Mapping) else None
        try:
            verify_receipt(
                receipt,
                action,
                keyring=self.keyring,
                policy_versions=self.policy_versions,
                nonce_store=self.store,
                now=now,
            )
        except ReceiptVerificationError as exc:
            self.store.record_refusal(
                exc.code, str(exc), receipt_id=str(receipt_id) if receipt_id else None, action_hash=digest
            )
            self._emit("failure", action, code=exc.code, message=str(exc), receipt_id=receipt_id, action_hash=digest)
            raise
        key = str(action["idempotency_key"])
        existing = self.store.claim_execution(key, digest, str(receipt_id))
        if existing is not None:
            if existing.action_hash != digest:
                raise ExecutionError(f"idempotency key {key} was used for a different action", "idempotency_key_reused")
            if existing.state == "running":
                raise ExecutionError(f"{key} is being executed under receipt {existing.receipt_id}", "in_progress")
            if existing.state == "failed":
                raise ExecutionError(f"{key} already failed: {existing.error}", "already_failed")
            self._emit(
                "execution", action, idempotency_key=key, receipt_id=receipt_id, action_hash=digest, replayed=True
            )
            return ExecutionResult(key, existing.receipt_id, existing.outcome, replayed=True)
        try:
            outcome = handler(action)
        except Exception as exc:
            self.store.finish_execution(key, error=f"{type(exc).__name__}: {exc}")
            self._emit(
                "failure", action, code="handler_failed", message=str(exc), receipt_id=receipt_id, action_hash=digest
            )
            raise ExecutionError(f"the handler failed for {key}: {exc}", "handler_failed") from exc
        self.store.finish_execution(key, outcome=outcome)
        self._emit("execution", action, idempotency_key=key, receipt_id=receipt_id, action_hash=digest, replayed=False)
        return ExecutionResult(key, str(receipt_id), outcome, replayed=False)
