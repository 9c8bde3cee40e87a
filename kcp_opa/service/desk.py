"""The service's desk: every tool's work, scoped by the caller's principal, refusals audited.

Transports (MCP over stdio or streamable HTTP, the HTTP JSON API) resolve the caller and call
these methods; they hold no state of their own. Decisions and their control records stay here,
challenges in the store, consumed receipts and executions in the executor's store. Nothing a
caller sends names who the caller is.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.authorize.controls import EvidenceStatus, GateDecision
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError, LedgerError
from kcp_opa.core.signing import Keyring, ReceiptKey, generate_ed25519
from kcp_opa.decide.action import action_hash, check_action, trace_id_of
from kcp_opa.decide.gate import Gate
from kcp_opa.declare.trust import TrustRegistry
from kcp_opa.execute.executor import Executor, Handler
from kcp_opa.service.challenges import ChallengeError, ChallengeStore, action_summary
from kcp_opa.service.handoff import HandoffStore, executing_as
from kcp_opa.service.identity import AccessDeniedError, Principal, Scope
from kcp_opa.service.issuing import ServiceIssuers, check_addressed, secret_key
from kcp_opa.service.observe import Metrics, TimedLedger, set_attributes, span

_log = structlog.get_logger("kcp_opa.service")
MAX_RECORDS = 100_000
MAX_AUDIT_DETAIL_BYTES = 16 * 1024
#: Controls a person answers; the subject answers these two, an approver the others.
SUBJECT_CONTROLS = frozenset({"user_confirmation", "step_up_authentication"})
APPROVER_CONTROLS = frozenset({"independent_human_approval", "compliance_review"})
NEEDS_TRUST = "recording control results needs a trust registry: start the server with --trust REGISTRY"


class UnknownRecordError(CodedError):
    code = "unknown_decision"


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
        store: HandoffStore,
        challenges: ChallengeStore,
        keyring: Keyring,
        handlers: Mapping[str, Handler] | None = None,
        metrics: Metrics | None = None,
        ledger_path: Path | None = None,
        registry: TrustRegistry | None = None,
        issuers: ServiceIssuers | None = None,
    ) -> None:
        self.gate = gate
        if (registry is None) != (issuers is None):
            raise CodedError("a trust registry and the service's issuer keys go together", "issuer_config")
        self.registry, self.issuers = registry, issuers
        self.desk = issuers.desk(gate, registry) if registry is not None and issuers is not None else None
        self.store = store
        self.challenges = challenges
        self.keyring = keyring
        self.handlers = dict(handlers or {})
        self.metrics = metrics or Metrics()
        self.ledger_path = ledger_path
        self.executor = Executor(keyring=keyring, policy_versions={gate.policy_version}, store=store, audit=gate.audit)
        self._records: OrderedDict[str, GateDecision] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        bundle: str | Path,
        *,
        store: str | Path,
        ledger: str | Path,
        keyring: Keyring | None = None,
        handlers: Mapping[str, Handler] | None = None,
        plan_cache: str | Path | None = None,
        registry: TrustRegistry | None = None,
        issuer_ids: tuple[str, ...] = (),
        issuer_keyring: Keyring | None = None,
    ) -> GateService:
        """Load the bundle (planned in a child process first), open the store and the ledger."""
        metrics = Metrics()
        timed = TimedLedger(ledger, metrics, durability="group")
        gate = Gate.from_bundle(bundle, ledger=timed, plan_cache=plan_cache)
        if keyring is None:
            signer = generate_ed25519(f"kcp-opa-serve-{os.getpid()}")
            keyring = Keyring({signer.kid: signer}, signer.kid)
        issuers = None
        if registry is not None:
            if not issuer_ids or issuer_keyring is None:
                raise CodedError("--trust needs --issuer-id and the issuer keyring", "issuer_config")
            issuers = ServiceIssuers.load(registry, issuer_ids, issuer_keyring)
        return cls(
            gate,
            store=HandoffStore(store),
            challenges=ChallengeStore(store),
            keyring=keyring,
            handlers=handlers,
            metrics=metrics,
            ledger_path=Path(ledger),
            registry=registry,
            issuers=issuers,
        )

    # -- refusals -------------------------------------------------------------------------------

    def refuse(self, principal: Principal | None, tool: str, exc: KcpOpaError) -> None:
        """Count and audit a refusal; a failed audit write is logged, the call is refused anyway."""
        code = getattr(exc, "code", None) or ("action_rejected" if isinstance(exc, ActionRejectedError) else "error")
        self.metrics.refusals.labels(code=code).inc()
        if self.gate.audit is None:
            return
        try:
            self.gate.audit.event(
                "failure",
                None,
                None,
                code=code,
                message=str(exc),
                tool=tool,
                principal=principal.to_dict() if principal is not None else None,
            )
        except LedgerError as failure:
            _log.error("refusal_not_audited", tool=tool, code=code, error=str(failure))

    def call(
        self, principal: Principal | None, tool: str, work: Callable[[Principal], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run one tool's work for an authenticated principal; refusals are counted and audited."""
        self.metrics.tool_calls.labels(tool=tool).inc()
        try:
            if principal is None:
                raise AccessDeniedError("authentication required", "unauthenticated")
            return work(principal)
        except KcpOpaError as exc:
            self.refuse(principal, tool, exc)
            raise
        except (ValueError, TypeError) as exc:  # a malformed argument (e.g. ttl_seconds "x"): refused too
            refusal = CodedError(f"bad arguments: {exc}", "bad_arguments")
            self.refuse(principal, tool, refusal)
            raise refusal from None

    # -- evaluate, hash --------------------------------------------------------------------------

    def evaluate(self, principal: Principal, action: Any, *, financial: bool = False) -> dict[str, Any]:
        principal.require(Scope.EVALUATE, "evaluate actions")
        check_action(action)
        if financial and not isinstance(action.get("amount"), Mapping):
            raise CodedError("a financial action carries an amount (use evaluate_action otherwise)", "not_financial")
        traceparent = _traceparent(action)
        with span("kcp_opa.decision", {"kcp.caller": principal.id}, traceparent) as current:
            started = time.perf_counter()
            record = self._open(action)
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
        with self._lock:
            self._records[decision.decision_id] = record
            while len(self._records) > MAX_RECORDS:
                self._records.popitem(last=False)
        return record.to_dict()

    def _open(self, action: Mapping[str, Any]) -> GateDecision:
        """The desk's sealed record; without a registry an unsealed one that nothing can be recorded on."""
        if self.desk is not None:
            return self.desk.open(action)
        frozen = copy.deepcopy(dict(action))
        prepared = self.gate.prepare(frozen)
        decision, _ = self.gate.decide_recorded(prepared)
        return GateDecision(frozen, prepared, decision, inputs=(prepared.document,))

    def decide_only(self, principal: Principal, action: Any) -> dict[str, Any]:
        """The bare decision document (the OPA-compatible API): decided and audited, not kept."""
        principal.require(Scope.EVALUATE, "evaluate actions")
        check_action(action)
        started = time.perf_counter()
        decision = self.gate.decide(action)
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        self.metrics.decisions.labels(state=decision.decision.value).inc()
        return decision.to_dict()

    def hash_action(self, principal: Principal, action: Any) -> dict[str, Any]:
        principal.require(Scope.HASH, "hash actions")
        check_action(action)
        return {"action_hash": action_hash(action), "canonicalization": "KYA-CJ-1"}

    def _record(self, decision_id: str) -> GateDecision:
        with self._lock:
            record = self._records.get(decision_id)
        if record is None:
            raise UnknownRecordError(f"this service holds no decision {decision_id}")
        return record

    # -- challenges and control results ----------------------------------------------------------

    def create_challenges(
        self, principal: Principal, decision_id: str, controls: list[str] | None = None, ttl_seconds: int = 900
    ) -> dict[str, Any]:
        principal.require(Scope.OPEN_CHALLENGE, "open control challenges")
        if not 30 <= ttl_seconds <= 3600:
            raise ChallengeError("ttl_seconds must be within 30..3600", "bad_ttl")
        record = self._record(decision_id)
        decision = record.decision
        missing = [c for c in decision.missing_controls if c not in self.gate.system_controls]
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
                addressed_to=self._addressees(control, record),
                summary=summary,
                created_by=principal.id,
                ttl_seconds=ttl_seconds,
            ).to_dict()
            for control in wanted
        ]
        return {"decision_id": decision.decision_id, "action_hash": decision.action_hash, "challenges": opened}

    def _addressees(self, control: str, record: GateDecision) -> dict[str, list[str]]:
        """Who may answer: the subject for its own confirmation, approvers, else a provider."""
        if control in SUBJECT_CONTROLS:
            return {"principals": [str(record.action.get("subject_id", ""))], "kinds": ["human"], "roles": []}
        if control in APPROVER_CONTROLS:
            return {"principals": [], "kinds": ["human"], "roles": self._approval_roles(control, record)}
        return {"principals": [], "kinds": ["provider"], "roles": []}

    def _approval_roles(self, control: str, record: GateDecision) -> list[str]:
        """The roles the policy will ask of the approver (so a wrong one does not spend the challenge)."""
        if control == "compliance_review":
            return ["compliance_officer"]
        if record.decision.verdict.approver_roles:
            return list(record.decision.verdict.approver_roles)
        params = self.gate.bundle.data.get("kcp_data", {}).get("matrix", {}).get("parameters", {})
        by_role = params.get("approver_roles", {})
        role = by_role.get("by_task_type", {}).get(str(record.action.get("action_type")), by_role.get("default"))
        return [str(role)] if role else ["approver"]

    def record_result(
        self, principal: Principal, challenge_id: str, status: str, evidence_reference: str
    ) -> dict[str, Any]:
        principal.require(Scope.RECORD_RESULT, "record control results")
        if self.desk is None or self.registry is None or self.issuers is None:
            raise AccessDeniedError(NEEDS_TRUST)
        if status not in {s.value for s in EvidenceStatus} or not evidence_reference:
            # Checked before the challenge is consumed: a malformed answer does not spend it.
            raise CodedError("status is PASSED or FAILED, with a non-empty evidence_reference", "malformed_evidence")
        challenge = self.challenges.get(challenge_id)
        self.challenges.check_open(challenge)
        check_addressed(principal, challenge)
        self.issuers.for_control(self.registry, challenge.control)  # an answer it cannot sign does not spend it
        with self._lock:
            record = self._records.get(challenge.decision_id)
        if record is None:
            raise UnknownRecordError(f"this service holds no decision {challenge.decision_id}")
        consumed = self.challenges.consume(challenge_id, principal.id)
        evidence = self.issuers.sign(self.registry, consumed.control, status, principal, evidence_reference, consumed)
        with self._lock:  # one writer per record: two answers never overwrite each other
            record = self._records[consumed.decision_id]
            updated = self.desk.record_control_result(record, evidence, action=record.action)
            self._records[consumed.decision_id] = updated
        return {"challenge_id": challenge_id, "control": consumed.control, "decision": updated.to_dict()}

    def read_challenge(self, principal: Principal, challenge_id: str) -> dict[str, Any]:
        """A challenge, for its addressees and for principals that may read (auditors, approvers)."""
        challenge = self.challenges.get(challenge_id)
        if Scope.READ not in principal.scopes:
            check_addressed(principal, challenge)
        return challenge.to_dict()

    # -- receipts and execution -----------------------------------------------------------------

    def issue_receipt(self, principal: Principal, decision_id: str, ttl_seconds: int | None = None) -> dict[str, Any]:
        principal.require(Scope.ISSUE_RECEIPT, "issue delegation receipts")
        if self.desk is None:
            raise AccessDeniedError("issuing receipts needs a trust registry: start the server with --trust REGISTRY")
        record = self._record(decision_id)
        signer: ReceiptKey = self.keyring.signer()
        return {"receipt": self.desk.issue(record, signer, ttl_seconds=ttl_seconds), "action": dict(record.action)}

    def verify_and_consume(self, principal: Principal, receipt: Any, action: Any) -> dict[str, Any]:
        principal.require(Scope.VERIFY_RECEIPT, "verify and consume receipts")
        check_action(action)
        verified = verify_receipt(
            receipt, action, keyring=self.keyring, policy_versions={self.gate.policy_version}, nonce_store=self.store
        )
        self.store.hand_off(verified.receipt["nonce"], verified.receipt["receipt_id"], principal.id)
        if self.gate.audit is not None:
            self.gate.audit.event(
                "receipt",
                action,
                None,
                consumed_by=principal.id,
                receipt_id=verified.receipt["receipt_id"],
                action_hash=verified.receipt["action_hash"],
                verified=True,
            )
        return {"verified": True, "consumed": verified.consumed, "receipt_id": verified.receipt["receipt_id"]}

    def execute(self, principal: Principal, action: Any, receipt: Any, handler: str) -> dict[str, Any]:
        principal.require(Scope.EXECUTE, "execute actions")
        function = self.handlers.get(handler)
        if function is None:
            known = ", ".join(sorted(self.handlers)) or "none registered"
            raise CodedError(f"no handler {handler!r} ({known})", "unknown_handler")
        token = executing_as.set(principal.id)  # a receipt this principal verified may be executed once
        try:
            result = self.executor.execute_authorized_action(action, receipt, function)
        finally:
            executing_as.reset(token)
        return {
            "idempotency_key": result.idempotency_key,
            "receipt_id": result.receipt_id,
            "outcome": result.outcome,
            "replayed": result.replayed,
            "executed_by": principal.id,
        }

    def write_audit_event(self, principal: Principal, event: str, detail: Mapping[str, Any]) -> dict[str, Any]:
        principal.require(Scope.WRITE_AUDIT, "write audit events")
        if not isinstance(detail, Mapping):
            raise CodedError("detail is a JSON object", "bad_arguments")
        secret = secret_key(detail)
        if secret is not None:
            raise CodedError(
                f"detail carries a secret-bearing key {secret!r}; secrets never reach the ledger", "secret"
            )
        size = len(json.dumps(detail, sort_keys=True, default=str))
        if size > MAX_AUDIT_DETAIL_BYTES:
            raise CodedError(f"detail is {size} bytes; at most {MAX_AUDIT_DETAIL_BYTES}", "detail_too_large")
        if self.gate.audit is None:
            raise LedgerError("this service has no audit ledger")
        self.gate.audit.event("note", None, None, note=event, detail=dict(detail), principal=principal.to_dict())
        return {"written": True, "event": event, "principal": principal.id}

    # -- health ------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        ledger_ok = self.ledger_path is not None and _writable(self.ledger_path)
        store_ok = self.challenges.healthy()
        return {
            "ok": ledger_ok and store_ok,
            "bundle_revision": self.gate.bundle_revision,
            "policy_version": self.gate.policy_version,
            "store": {"ok": store_ok, "path": str(self.store.path)},
            "ledger": {"ok": ledger_ok, "path": str(self.ledger_path) if self.ledger_path else None},
            "decisions_held": len(self._records),
            "handlers": sorted(self.handlers),
            "trust": None if self.registry is None else {"name": self.registry.name, "sha256": self.registry.sha256},
        }


def _writable(path: Path) -> bool:
    if path.exists():
        return os.access(path, os.W_OK)
    return os.access(path.parent if path.parent.exists() else Path.cwd(), os.W_OK)


def _traceparent(action: Mapping[str, Any]) -> str | None:
    trace = action.get("trace")
    parent = trace.get("traceparent") if isinstance(trace, Mapping) else None
    return parent if isinstance(parent, str) and trace_id_of(action) else None
