"""The service's desk: every tool's work, scoped by the caller's principal, refusals audited.

Transports (MCP over stdio or streamable HTTP, the HTTP JSON API) resolve the caller and call
these methods; they hold no state of their own. All state is in the stores (``kcp_opa.stores``),
shared by every server process on them. Nothing a caller sends names who the caller is. Bundle,
registry and keys are one immutable :class:`Loaded` a reload swaps whole; the service is built
from its config by loading.py (``open_service``) and reloaded by reloading.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.authorize.controls import ControlDesk, GateDecision, decide_record
from kcp_opa.authorize.evidence import EvidenceStatus
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError, LedgerError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.signing import Keyring, Signer
from kcp_opa.decide.action import check_action
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.gate import Gate
from kcp_opa.declare.trust import TrustRegistry
from kcp_opa.execute.executor import Executor, Handler
from kcp_opa.execute.recheck import Rechecked
from kcp_opa.service.callers import AccessDeniedError, Principal, Scope, check_caller_action
from kcp_opa.service.challenges import action_summary, addressees
from kcp_opa.service.decisionrecords import canonical_or_none, check_current, decided_for, export, restore
from kcp_opa.service.handlers import bound_handler
from kcp_opa.service.issuing import ServiceIssuers, check_addressed, check_audit_detail
from kcp_opa.service.observe import Metrics, health, set_attributes, span, traceparent_of
from kcp_opa.stores.protocols import ChallengeStore, DecisionStore, ExecutorStore, HandoffStore
from kcp_opa.stores.storedtypes import ChallengeError, StoredDecision, check_open

_log = structlog.get_logger("kcp_opa.service")
LOCAL_ONLY = (
    "this server runs without --trust and knows only the local agent, which may evaluate, hash, open"
    " challenges for its own decisions and write audit notes; start it with --trust REGISTRY for approvers,"
    " providers, issuers, executors and auditors"
)
NEEDS_TRUST = "recording control results needs a trust registry: start the server with --trust REGISTRY"

__all__ = ["GateService", "Loaded"]


@dataclass(frozen=True)
class Loaded:
    """What a reload replaces as one: the bundle's gate, its desk, the registry and the issuer keys."""

    gate: Gate
    desk: ControlDesk | None
    registry: TrustRegistry | None
    issuers: ServiceIssuers | None
    executor: Executor
    keyring: Keyring


class GateService:
    """One bundle's gate, control desk, challenge store, receipt signer and executor.

    With ``registry`` (the one the bundle was compiled with) and ``issuers`` (the registered
    issuers the service signs answers as), control results are recorded through the ControlDesk;
    without it the service decides, hashes and opens challenges, and refuses every control result.
    """

    def __init__(
        self,
        gate: Gate,
        *,
        store: ExecutorStore,
        handoffs: HandoffStore,
        challenges: ChallengeStore,
        records: DecisionStore,
        location: str,
        keyring: Keyring,
        handlers: Mapping[str, Handler] | None = None,
        metrics: Metrics | None = None,
        ledger_path: Path | None = None,
        registry: TrustRegistry | None = None,
        issuers: ServiceIssuers | None = None,
    ) -> None:
        self.store, self.handoffs, self.challenges, self.records = store, handoffs, challenges, records
        self.location = location  # where the stores are, for status (a path; never a credential)
        self.handlers = dict(handlers or {})
        self.metrics = metrics or Metrics()
        self.ledger_path = ledger_path
        self._lock = threading.Lock()
        self._loaded = self.load(gate, registry, issuers, keyring)

    def load(
        self, gate: Gate, registry: TrustRegistry | None, issuers: ServiceIssuers | None, keyring: Keyring | None
    ) -> Loaded:
        """A gate with its desk (sealing with the store's key, so every process reads the others' records).

        Raises (``registry_mismatch``, ``issuer_config``) before anything is swapped; ``keyring`` None
        keeps the receipt keyring in use.
        """
        if (registry is None) != (issuers is None):
            raise CodedError("a trust registry and the service's issuer keys go together", "issuer_config")
        desk = None
        if registry is not None and issuers is not None:
            desk = issuers.desk(gate, registry, seal_key=self.records.seal_key())
        keyring = keyring or self._loaded.keyring
        versions = {gate.policy_version}
        executor = Executor(  # with the gate: every receipt is re-decided before it is consumed (recheck.py)
            keyring=keyring,
            policy_versions=versions,
            store=self.store,
            audit=gate.audit,
            handoffs=self.handoffs,
            gate=gate,
        )
        return Loaded(gate, desk, registry, issuers, executor, keyring)

    def swap(self, loaded: Loaded) -> None:
        """Serve ``loaded`` from the next call on (one reference assignment: a call sees old or new, whole)."""
        with self._lock:
            self._loaded = loaded

    @property
    def loaded(self) -> Loaded:
        return self._loaded

    @property
    def gate(self) -> Gate:
        return self._loaded.gate

    @property
    def desk(self) -> ControlDesk | None:
        return self._loaded.desk

    @property
    def registry(self) -> TrustRegistry | None:
        return self._loaded.registry

    @property
    def keyring(self) -> Keyring:
        return self._loaded.keyring

    # -- refusals -------------------------------------------------------------------------------

    def refuse(self, principal: Principal | None, tool: str, exc: KcpOpaError) -> None:
        """Count and audit a refusal; a failed audit write is logged, the call is refused anyway. A refusal
        the executor or the desk already recorded is linked to that entry (``refusal_seq``): counted once."""
        code = getattr(exc, "code", None) or ("action_rejected" if isinstance(exc, ActionRejectedError) else "error")
        self.metrics.refused(code, tool)
        if self.gate.audit is None:
            return
        who, linked = principal.to_dict() if principal is not None else None, {}
        if exc.ledger_seq is not None:
            linked["refusal_seq"] = exc.ledger_seq
        try:
            self.gate.audit.event(
                "failure", None, None, code=code, message=str(exc), tool=tool, principal=who, **linked
            )
        except LedgerError as failure:
            _log.error("refusal_not_audited", tool=tool, code=code, error=str(failure))

    def call(self, principal: Principal | None, tool: str, work: Callable[[Principal], JsonDict]) -> JsonDict:
        """Run one tool's work for an authenticated principal; refusals are counted and audited."""
        self.metrics.tool_calls.labels(tool=tool).inc()
        try:
            if principal is None:
                raise AccessDeniedError("authentication required", "unauthenticated")
            return work(principal)
        except AccessDeniedError as exc:
            if self.registry is not None or exc.code != "not_authorized" or "--trust" in str(exc):
                self.refuse(principal, tool, exc)
                raise
            local = AccessDeniedError(f"{exc}: {LOCAL_ONLY}")  # say what this server can do, and how to get more
            self.refuse(principal, tool, local)
            raise local from None
        except KcpOpaError as exc:
            self.refuse(principal, tool, exc)
            raise
        except (ValueError, TypeError, ArithmeticError) as exc:  # a malformed argument (ttl_seconds "x", 1e309)
            refusal = CodedError(f"bad arguments: {exc}", "bad_arguments")
            self.refuse(principal, tool, refusal)
            raise refusal from None

    # -- evaluate, hash --------------------------------------------------------------------------

    def evaluate(self, principal: Principal, action: object, *, financial: bool = False) -> JsonDict:
        principal.require(Scope.EVALUATE, "evaluate actions")
        checked = check_caller_action(principal, action)
        action = checked.mapping  # the checked, read-only copy from here on
        if financial and not isinstance(action.get("amount"), Mapping):
            raise CodedError("a financial action carries an amount (use evaluate_action otherwise)", "not_financial")
        loaded = self._loaded
        traceparent = traceparent_of(action)
        with span("kcp_opa.decision", {"kcp.caller": principal.id}, traceparent) as current:
            started = time.perf_counter()
            record = self._open(loaded, checked, principal.id)
            self.metrics.decision_seconds.observe(time.perf_counter() - started)
            decision = record.decision
            self.metrics.decisions.labels(state=decision.decision.value).inc()
            set_attributes(
                current,
                {
                    "kcp.decision_id": decision.decision_id,
                    "kcp.routing_state": decision.decision.value,
                    "kcp.bundle_revision": decision.bundle_revision,
                    "kcp.policy_version": decision.policy_version,
                },
            )
        document = export(loaded.desk, loaded.gate, record)
        self.records.put(decision.decision_id, principal.id, canonical_or_none(action.get("agent_id")), document)
        return record.to_dict()

    @staticmethod
    def _open(loaded: Loaded, action: CheckedAction, principal: str) -> GateDecision:
        """The desk's sealed record (facts established for the caller); without a registry, unsealed."""
        if loaded.desk is not None:
            return loaded.desk.open(action, principal=principal)
        return decide_record(loaded.gate, action, principal=principal)[0]

    def decide_only(self, principal: Principal, action: object) -> JsonDict:
        """The bare decision document (the OPA-compatible API): decided and audited, not kept."""
        principal.require(Scope.EVALUATE, "evaluate actions")
        checked = check_caller_action(principal, action)
        started = time.perf_counter()
        decision = self.gate.decide(checked, principal=principal.id)
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        self.metrics.decisions.labels(state=decision.decision.value).inc()
        return decision.to_dict()

    def hash_action(self, principal: Principal, action: object) -> JsonDict:
        principal.require(Scope.HASH, "hash actions")
        return {"action_hash": check_action(action).hash, "canonicalization": "KYA-CJ-1"}

    def _record(self, loaded: Loaded, decision_id: str) -> tuple[StoredDecision, GateDecision]:
        """The stored row and its record, re-decided under ``loaded`` (any process may have written it)."""
        stored = self.records.get(decision_id)
        return stored, restore(loaded.desk, loaded.gate, stored.document)

    # -- challenges and control results ----------------------------------------------------------

    def create_challenges(
        self, principal: Principal, decision_id: str, controls: list[str] | None = None, ttl_seconds: int = 900
    ) -> JsonDict:
        principal.require(Scope.OPEN_CHALLENGE, "open control challenges")
        if not 30 <= ttl_seconds <= 3600:
            raise ChallengeError("ttl_seconds must be within 30..3600", "bad_ttl")
        loaded = self._loaded
        stored = self.records.get(decision_id)
        if principal.id not in {stored.evaluated_by, stored.agent_id}:
            # Checked before the record is re-decided: another agent learns nothing of it.
            raise AccessDeniedError(
                f"decision {decision_id} was neither evaluated by nor made for {principal.id}", "not_your_decision"
            )
        record = restore(loaded.desk, loaded.gate, stored.document)
        decision = record.decision
        missing = [c for c in decision.missing_controls if c not in loaded.gate.system_controls]
        wanted = missing if controls is None else [c for c in controls if c in missing]
        if controls is not None and len(wanted) != len(controls):
            raise ChallengeError(
                f"only missing controls can be challenged: {', '.join(missing)}", "control_not_missing"
            )
        summary = action_summary(record.action, decision.to_dict())
        opened = [
            self.challenges.open(
                decision_id=decision.decision_id,
                action_hash=decision.action_hash,
                control=control,
                addressed_to=addressees(loaded.gate, control, record),
                summary=summary,
                created_by=principal.id,
                ttl_seconds=ttl_seconds,
            ).to_dict()
            for control in wanted
        ]
        return {"decision_id": decision.decision_id, "action_hash": decision.action_hash, "challenges": opened}

    def record_result(self, principal: Principal, challenge_id: str, status: str, evidence_reference: str) -> JsonDict:
        principal.require(Scope.RECORD_RESULT, "record control results")
        loaded = self._loaded
        desk, registry, issuers = loaded.desk, loaded.registry, loaded.issuers
        if desk is None or registry is None or issuers is None:
            raise AccessDeniedError(NEEDS_TRUST)
        if status not in {s.value for s in EvidenceStatus} or not evidence_reference:
            # Checked before the challenge is consumed: a malformed answer does not spend it.
            raise CodedError("status is PASSED or FAILED, with a non-empty evidence_reference", "malformed_evidence")
        challenge = self.challenges.get(challenge_id)
        check_open(challenge)
        check_addressed(principal, challenge)
        issuers.for_control(registry, challenge.control)  # an answer it cannot sign does not spend it
        check_current(loaded.gate, self.records.get(challenge.decision_id).document)  # nor one it cannot load
        consumed = self.challenges.consume(challenge_id, principal.id)
        evidence = issuers.sign(registry, consumed.control, status, principal, evidence_reference, consumed)

        def apply(stored: StoredDecision) -> tuple[JsonDict, GateDecision]:
            record = restore(desk, loaded.gate, stored.document)
            updated = desk.record_control_result(record, evidence, action=record.action)
            return export(desk, loaded.gate, updated), updated

        # Under the store's write lock: two answers (in any processes) never overwrite each other.
        updated: GateDecision = self.records.update(consumed.decision_id, apply)
        return {"challenge_id": challenge_id, "control": consumed.control, "decision": updated.to_dict()}

    def read_challenge(self, principal: Principal, challenge_id: str) -> JsonDict:
        """A challenge, for its addressees and for principals that may read (auditors, approvers)."""
        challenge = self.challenges.get(challenge_id)
        if Scope.READ not in principal.scopes:
            check_addressed(principal, challenge)
        return challenge.to_dict()

    # -- receipts and execution -----------------------------------------------------------------

    def issue_receipt(self, principal: Principal, decision_id: str, ttl_seconds: int | None = None) -> JsonDict:
        principal.require(Scope.ISSUE_RECEIPT, "issue delegation receipts")
        loaded = self._loaded
        if loaded.desk is None:
            raise AccessDeniedError("issuing receipts needs a trust registry: start the server with --trust REGISTRY")
        _, record = self._record(loaded, decision_id)
        signer: Signer = loaded.keyring.signer()
        receipt = loaded.desk.issue(record, signer, ttl_seconds=ttl_seconds)
        return {"receipt": receipt.to_dict(), "action": dict(record.action)}

    def verify_and_consume(self, principal: Principal, receipt: Any, action: object) -> JsonDict:
        principal.require(Scope.VERIFY_RECEIPT, "verify and consume receipts")
        checked = check_action(action)
        action = checked.mapping
        gate, keyring = self.gate, self.keyring
        who = decided_for(self.records, receipt)  # re-decided as execution does, before the consume
        step = "receipt_verification"
        nonces = Rechecked(self.store, gate, checked, receipt, now=None, principal=who, context=None, step=step)
        verified = verify_receipt(
            receipt, checked, keyring=keyring, policy_versions={gate.policy_version}, nonce_store=nonces
        )
        self.handoffs.hand_off(verified.receipt.nonce, verified.receipt.receipt_id, principal.id)
        if gate.audit is not None:
            gate.audit.event(
                "receipt",
                action,
                None,
                consumed_by=principal.id,
                receipt_id=verified.receipt.receipt_id,
                action_hash=verified.receipt.action_hash,
                verified=True,
            )
        return {"verified": True, "consumed": verified.consumed, "receipt_id": verified.receipt.receipt_id}

    def execute(self, principal: Principal, action: Any, receipt: Any, handler: str) -> JsonDict:
        principal.require(Scope.EXECUTE, "execute actions")
        function = bound_handler(self.handlers, handler, action)  # before the receipt is consumed
        try:  # the consumer is the caller: a receipt it verified (and so consumed) is executed once
            result = self._loaded.executor.execute_authorized_action(
                action, receipt, function, consumer=principal.id, principal=decided_for(self.records, receipt)
            )
        except (ValueError, TypeError) as exc:  # past the claim it is not the caller's argument: never bad_arguments
            raise CodedError(f"the execution failed: {type(exc).__name__}: {exc}", "handler_error") from None
        return {
            "idempotency_key": result.idempotency_key,
            "receipt_id": result.receipt_id,
            "outcome": result.outcome,
            "replayed": result.replayed,
            "executed_by": principal.id,
        }

    def write_audit_event(self, principal: Principal, event: str, detail: object) -> JsonDict:
        principal.require(Scope.WRITE_AUDIT, "write audit events")
        checked = check_audit_detail(detail)
        if self.gate.audit is None:
            raise LedgerError("this service has no audit ledger")
        self.gate.audit.event("note", None, None, note=event, detail=dict(checked), principal=principal.to_dict())
        return {"written": True, "event": event, "principal": principal.id}

    # -- health ------------------------------------------------------------------------------------

    def status(self, principal: Principal | None = None, *, admin: bool = True) -> JsonDict:
        """Health; file paths only to an admin (``admin``: an in-process caller, no principal)."""
        shown = admin if principal is None else Scope.ADMIN in principal.scopes
        database = self.gate.audit.ledger if self.ledger_path is None and self.gate.audit is not None else None
        files = health(self.location, self.challenges.healthy(), self.ledger_path or database, shown=shown)
        return {
            **files,
            **self.gate.status(),  # bundle_revision, policy_version, bundle {revision, sha256, signer, ...}
            "decisions_held": self.records.count() if files["store"]["ok"] else None,
            "handlers": sorted(self.handlers),
            "trust": None if self.registry is None else {"name": self.registry.name, "sha256": self.registry.sha256},
            "context": self.gate.context.describe() if self.gate.context is not None else None,
            "callers": "registry principals" if self.registry is not None else f"local-agent only: {LOCAL_ONLY}",
        }
