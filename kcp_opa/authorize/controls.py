"""Control evidence: who passed which control for which frozen action, and what it changes.

A result is bound to one decision id and one action hash. Whether an actor may satisfy a
control (an AI agent never satisfies a human control; nobody approves their own action) is
decided by the bundle's Rego (``data.kcp.controls.verdict``); this module checks the binding,
asks the policy, and re-evaluates the gate with the accepted PASSED controls, so the
authorization status is always re-derived by the policy, never edited here.
"""

from __future__ import annotations

import copy
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kcp_opa.core.errors import EvidenceRejectedError
from kcp_opa.decide.action import action_hash
from kcp_opa.decide.engine import RegopyEngine
from kcp_opa.decide.gate import DecisionInput, Gate, build_input
from kcp_opa.models.decision import Decision

EVIDENCE_ENTRYPOINT = "kcp/controls/verdict"
DEFAULT_RECEIPT_TTL_SECONDS = 300
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class EvidenceStatus(enum.StrEnum):
    PASSED = "PASSED"
    FAILED = "FAILED"


class ActorType(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    PROVIDER = "provider"
    HUMAN = "human"
    AI_AGENT = "ai_agent"


@dataclass(frozen=True)
class ControlEvidence:
    """One control result, bound to the decision and the action hash it was given for."""

    control: str
    status: EvidenceStatus
    actor_type: ActorType
    actor_id: str
    evidence_reference: str
    completed_at: str
    decision_id: str
    action_hash: str

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ControlEvidence:
        """Parse evidence JSON; anything malformed is an ``EvidenceRejectedError``."""
        try:
            evidence = cls(
                control=_text(raw, "control"),
                status=EvidenceStatus(raw["status"]),
                actor_type=ActorType(raw["actor_type"]),
                actor_id=_text(raw, "actor_id"),
                evidence_reference=_text(raw, "evidence_reference"),
                completed_at=_text(raw, "completed_at"),
                decision_id=_text(raw, "decision_id"),
                action_hash=_text(raw, "action_hash"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EvidenceRejectedError(f"malformed control evidence: {exc}", "malformed_evidence") from None
        if not _TIMESTAMP.match(evidence.completed_at):
            raise EvidenceRejectedError("completed_at must be RFC 3339 with a timezone", "malformed_evidence")
        return evidence

    def to_dict(self) -> dict[str, Any]:
        return {
            "control": self.control,
            "status": self.status.value,
            "actor_type": self.actor_type.value,
            "actor_id": self.actor_id,
            "evidence_reference": self.evidence_reference,
            "completed_at": self.completed_at,
            "decision_id": self.decision_id,
            "action_hash": self.action_hash,
        }


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key} must be a non-empty string")
    return value


@dataclass(frozen=True)
class GateDecision:
    """A decision with the control evidence recorded for it: the KYA gate decision document."""

    action: Mapping[str, Any]
    prepared: DecisionInput
    decision: Decision
    evidence: tuple[ControlEvidence, ...] = ()
    receipt_ttl_seconds: int = DEFAULT_RECEIPT_TTL_SECONDS
    inputs: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)

    @property
    def passed_controls(self) -> frozenset[str]:
        return frozenset(e.control for e in self.evidence if e.status is EvidenceStatus.PASSED)

    def to_dict(self) -> dict[str, Any]:
        """The contract's decision document plus ``control_evidence`` and ``blocked_actions``."""
        document = self.decision.to_dict()
        approved = document["authorization_status"] == "APPROVED"
        document["control_evidence"] = [e.to_dict() for e in self.evidence]
        document["blocked_actions"] = [] if approved else [str(self.action.get("requested_action", ""))]
        document["receipt_ttl_seconds"] = self.receipt_ttl_seconds
        return document


class ControlDesk:
    """Records control results against gate decisions for one bundle."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.engine = RegopyEngine(gate.bundle, EVIDENCE_ENTRYPOINT, preflight=False, plan_cache=gate.plan_cache)
        ttl = gate.bundle.data.get("kcp_data", {}).get("matrix", {}).get("parameters", {}).get("receipt_ttl_seconds")
        self.receipt_ttl_seconds = ttl if isinstance(ttl, int) else DEFAULT_RECEIPT_TTL_SECONDS

    def open(self, action: Mapping[str, Any], *, now: Any = None) -> GateDecision:
        """Decide ``action`` and start its control record (the action is frozen from here on)."""
        frozen = copy.deepcopy(dict(action))
        prepared = self.gate.prepare(frozen, now=now)
        decision, entry = self.gate.decide_recorded(prepared)
        evidence: tuple[ControlEvidence, ...] = ()
        if entry is not None:
            # The ledger entry is the evidence for the system's own control.
            evidence = (
                ControlEvidence(
                    control="standard_audit_logging",
                    status=EvidenceStatus.PASSED,
                    actor_type=ActorType.SYSTEM,
                    actor_id="kcp-opa-ledger",
                    evidence_reference=f"ledger:{entry['entry_hash']}",
                    completed_at=str(entry["timestamp"]),
                    decision_id=decision.decision_id,
                    action_hash=decision.action_hash,
                ),
            )
        return GateDecision(frozen, prepared, decision, evidence, self.receipt_ttl_seconds, (prepared.document,))

    def record_control_result(
        self, record: GateDecision, evidence: ControlEvidence | Mapping[str, Any], *, action: Mapping[str, Any]
    ) -> GateDecision:
        """Bind, judge (Rego) and add one control result; the policy then re-derives the status.

        Raises :class:`EvidenceRejectedError` with a distinct ``code`` for each refusal.
        """
        item = evidence if isinstance(evidence, ControlEvidence) else ControlEvidence.from_dict(evidence)
        if action_hash(action) != record.decision.action_hash:
            raise EvidenceRejectedError(
                "the action differs from the one decided; a changed action needs a new decision", "action_changed"
            )
        if item.action_hash != record.decision.action_hash:
            raise EvidenceRejectedError(
                f"evidence is for action {item.action_hash}, the decision is for {record.decision.action_hash}",
                "evidence_for_another_action",
            )
        if item.decision_id != record.decision.decision_id:
            raise EvidenceRejectedError(
                f"evidence is for decision {item.decision_id}, not {record.decision.decision_id}",
                "evidence_for_another_decision",
            )
        verdict = self.engine.evaluate(
            {
                "evidence": item.to_dict(),
                "action": dict(record.action),
                "required_controls": list(record.decision.required_controls),
            }
        )
        value = verdict.value or {}
        if verdict.error is not None or value.get("accepted") is not True:
            code = str(value.get("code", "evidence_unreadable"))
            message = str(value.get("message", verdict.error or "the evidence could not be judged"))
            if self.gate.audit is not None:
                self.gate.audit.event(
                    "failure", record.action, record.decision, code=code, message=message, evidence=item.to_dict()
                )
            raise EvidenceRejectedError(f"{item.control}: {message}", code)
        updated = self._rederive(replace(record, evidence=(*record.evidence, item)))
        if self.gate.audit is not None:
            self.gate.audit.event(
                "control",
                updated.action,
                updated.decision,
                decision_id=updated.decision.decision_id,
                action_hash=updated.decision.action_hash,
                evidence=item.to_dict(),
                authorization_status=updated.decision.authorization_status.value,
                missing_controls=list(updated.decision.missing_controls),
            )
        return updated

    def issue(
        self, record: GateDecision, key: Any, *, ttl_seconds: int | None = None, now: Any = None
    ) -> dict[str, Any]:
        """Issue a receipt for ``record`` (see receipts.issue_receipt) and audit it."""
        from kcp_opa.authorize.receipts import issue_receipt

        receipt = issue_receipt(record.to_dict(), record.action, key, ttl_seconds=ttl_seconds, now=now)
        if self.gate.audit is not None:
            self.gate.audit.event(
                "receipt",
                record.action,
                record.decision,
                decision_id=receipt["decision_id"],
                action_hash=receipt["action_hash"],
                receipt_id=receipt["receipt_id"],
                signature={"alg": receipt["signature"]["alg"], "kid": receipt["signature"]["kid"]},
                issued_at=receipt["issued_at"],
                expires_at=receipt["expires_at"],
                approver_ids=receipt["approver_ids"],
            )
        return receipt

    def _rederive(self, record: GateDecision) -> GateDecision:
        prepared = build_input(
            record.action,
            now=record.decision.evaluated_at,
            satisfied_controls=sorted(record.passed_controls | set(self.gate.system_controls)),
            bundle_revision=self.gate.bundle_revision,
            decision_id=record.decision.decision_id,
        )
        decision = self.gate.decide_prepared(prepared)
        # The trace id is the decision's, not a new one generated for the re-evaluation.
        decision = replace(decision, trace_id=record.decision.trace_id)
        return replace(record, prepared=prepared, decision=decision, inputs=(*record.inputs, prepared.document))


def evidence_for(
    record: GateDecision,
    controls: Sequence[str],
    *,
    actor_type: ActorType | str,
    actor_id: str,
    completed_at: str,
    reference: str,
    status: EvidenceStatus | str = EvidenceStatus.PASSED,
) -> list[ControlEvidence]:
    """Evidence items for ``controls`` bound to ``record`` (a convenience for callers and demos)."""
    return [
        ControlEvidence(
            control=control,
            status=EvidenceStatus(status),
            actor_type=ActorType(actor_type),
            actor_id=actor_id,
            evidence_reference=reference,
            completed_at=completed_at,
            decision_id=record.decision.decision_id,
            action_hash=record.decision.action_hash,
        )
        for control in controls
    ]
