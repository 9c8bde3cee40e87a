"""The decision, typed: what ``Gate.decide()`` returns and the contract's JSON for it.

The policy's output is parsed strictly: a field of the wrong type or an unknown routing state
is a malformed output, which the gate treats as an engine error (fail closed), never as
something to guess at. Serialization lives in ``to_dict``; the model holds no policy logic.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcp_opa.core.jsonread import JsonDict, JsonObject

SCHEMA_VERSION = "2.0"


class RoutingState(enum.StrEnum):
    """Routing states, strongest first (the policy picks the strongest; contract §3)."""

    DENY = "DENY"
    COMPLIANCE_REVIEW = "COMPLIANCE_REVIEW"
    ESCALATE = "ESCALATE"
    HUMAN_APPROVAL = "HUMAN_APPROVAL"
    IDENTITY_VERIFICATION = "IDENTITY_VERIFICATION"
    STEP_UP_AUTHENTICATION = "STEP_UP_AUTHENTICATION"
    USER_CONFIRMATION = "USER_CONFIRMATION"
    ALLOW = "ALLOW"


class Outcome(enum.StrEnum):
    """The knowledge-bound view of the routing state."""

    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    ESCALATE = "escalate"
    DENY = "deny"


class AuthorizationStatus(enum.StrEnum):
    APPROVED = "APPROVED"
    PENDING_CONTROLS = "PENDING_CONTROLS"
    DENIED = "DENIED"


class RiskLevel(enum.StrEnum):
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"


#: What routes an action: what the shadow's "changes the decision" compares (never the wording of
#: messages), and all a shadow entry keeps of each answer under no-logging.
SHAPE_FIELDS = (
    "decision",
    "authorization_status",
    "execution_allowed",
    "risk_level",
    "reason_codes",
    "required_controls",
    "missing_controls",
)
_HOLDS = frozenset({RoutingState.DENY, RoutingState.COMPLIANCE_REVIEW, RoutingState.ESCALATE})
_OUTCOME_OF = {
    RoutingState.DENY: Outcome.DENY,
    RoutingState.COMPLIANCE_REVIEW: Outcome.ESCALATE,
    RoutingState.ESCALATE: Outcome.ESCALATE,
    RoutingState.HUMAN_APPROVAL: Outcome.REQUIRE_APPROVAL,
    RoutingState.IDENTITY_VERIFICATION: Outcome.REQUIRE_APPROVAL,
    RoutingState.STEP_UP_AUTHENTICATION: Outcome.REQUIRE_APPROVAL,
    RoutingState.USER_CONFIRMATION: Outcome.REQUIRE_APPROVAL,
    RoutingState.ALLOW: Outcome.ALLOW,
}


class MalformedDecisionError(ValueError):
    """The policy answered, but not with the contract's decision document."""


@dataclass(frozen=True)
class Reason:
    """One matched rule, with the evaluator that matched it."""

    code: str
    rule: str
    evaluator_id: str
    evaluator_version: str
    message: str
    unit: str | None = None
    regulation: str | None = None
    #: The exception that waived this finding (it stays in the decision but routes nothing).
    waived_by: str | None = None

    def to_dict(self) -> JsonDict:
        out: JsonDict = {"code": self.code, "rule": self.rule}
        if self.unit is not None:
            out["unit"] = self.unit
        if self.regulation is not None:
            out["regulation"] = self.regulation
        out.update(evaluator_id=self.evaluator_id, evaluator_version=self.evaluator_version, message=self.message)
        if self.waived_by is not None:
            out["waived_by"] = self.waived_by
        return out


@dataclass(frozen=True)
class Violation:
    """Evaluator details, e.g. the fields read outside a unit's declared fields."""

    evaluator_id: str
    code: str
    fields: tuple[str, ...]

    def to_dict(self) -> JsonDict:
        return {"evaluator_id": self.evaluator_id, "code": self.code, "fields": list(self.fields)}


@dataclass(frozen=True)
class PolicyVerdict:
    """Exactly what the Rego entrypoint returned: the part of a decision an auditor replays."""

    decision: RoutingState
    outcome: Outcome
    authorization_status: AuthorizationStatus
    execution_allowed: bool
    risk_level: RiskLevel
    required_controls: tuple[str, ...]
    satisfied_controls: tuple[str, ...]
    missing_controls: tuple[str, ...]
    reasons: tuple[Reason, ...]
    reason_codes: tuple[str, ...]
    violations: tuple[Violation, ...]
    obligations: tuple[str, ...]
    approver_roles: tuple[str, ...]

    @classmethod
    def from_policy(cls, raw: JsonObject) -> PolicyVerdict:
        """Parse the entrypoint's object; raise :class:`MalformedDecisionError` on any deviation."""
        try:
            return cls(
                decision=RoutingState(_str(raw, "decision")),
                outcome=Outcome(_str(raw, "outcome")),
                authorization_status=AuthorizationStatus(_str(raw, "authorization_status")),
                execution_allowed=_bool(raw, "execution_allowed"),
                risk_level=RiskLevel(_str(raw, "risk_level")),
                required_controls=_strings(raw, "required_controls"),
                satisfied_controls=_strings(raw, "satisfied_controls"),
                missing_controls=_strings(raw, "missing_controls"),
                reasons=tuple(_reason(item) for item in _list(raw, "reasons")),
                reason_codes=_strings(raw, "reason_codes"),
                violations=tuple(_violation(item) for item in _list(raw, "violations")),
                obligations=_strings(raw, "obligations"),
                approver_roles=_strings(raw, "approver_roles"),
            )._consistent()
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedDecisionError(f"policy output is not a decision document: {exc}") from None

    def _consistent(self) -> PolicyVerdict:
        """Refuse a document whose fields contradict each other (the contract's shape, not policy):
        a policy bug that says ``execution_allowed: true`` beside a DENY, a hold or a missing
        control must become an engine error, never an allow."""
        problems = []
        if self.outcome is not _OUTCOME_OF[self.decision]:
            problems.append(f"outcome {self.outcome.value} does not belong to {self.decision.value}")
        if (self.decision is RoutingState.DENY) != (self.authorization_status is AuthorizationStatus.DENIED):
            problems.append(f"authorization_status {self.authorization_status.value} with {self.decision.value}")
        approved = self.authorization_status is AuthorizationStatus.APPROVED
        if self.execution_allowed != approved:
            problems.append(f"execution_allowed {self.execution_allowed} with {self.authorization_status.value}")
        if approved and (self.missing_controls or self.decision in _HOLDS):
            problems.append(f"APPROVED with {self.decision.value} and missing {list(self.missing_controls)}")
        if self.authorization_status is AuthorizationStatus.PENDING_CONTROLS and not (
            self.missing_controls or self.decision in _HOLDS
        ):
            problems.append("PENDING_CONTROLS with nothing missing")
        required, missing = set(self.required_controls), set(self.missing_controls)
        satisfied = set(self.satisfied_controls)
        if missing & satisfied or missing | satisfied != required:
            problems.append("satisfied and missing controls do not partition the required controls")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_dict(self) -> JsonDict:
        """The policy's own JSON, field for field (what ``opa eval`` prints for the entrypoint)."""
        return {
            "decision": self.decision.value,
            "outcome": self.outcome.value,
            "authorization_status": self.authorization_status.value,
            "execution_allowed": self.execution_allowed,
            "risk_level": self.risk_level.value,
            "required_controls": list(self.required_controls),
            "satisfied_controls": list(self.satisfied_controls),
            "missing_controls": list(self.missing_controls),
            "reasons": [reason.to_dict() for reason in self.reasons],
            "reason_codes": list(self.reason_codes),
            "violations": [violation.to_dict() for violation in self.violations],
            "obligations": list(self.obligations),
            "approver_roles": list(self.approver_roles),
        }


@dataclass(frozen=True)
class Decision:
    """A gate decision bound to one frozen action (contract §3)."""

    decision_id: str
    action_hash: str
    verdict: PolicyVerdict
    policy_version: str
    bundle_revision: str
    trace_id: str | None
    evaluated_at: str
    engine_error: str | None = None
    schema_version: str = field(default=SCHEMA_VERSION)
    #: The sha256 of the bundle file that decided, and the key id that signed it (when signed).
    bundle_sha256: str = ""
    bundle_signer: str | None = None
    #: ``log_only``: computed and archived as it would be, but the gate did not enforce it.
    mode: str = "enforce"

    @property
    def decision(self) -> RoutingState:
        return self.verdict.decision

    @property
    def outcome(self) -> Outcome:
        return self.verdict.outcome

    @property
    def authorization_status(self) -> AuthorizationStatus:
        return self.verdict.authorization_status

    @property
    def execution_allowed(self) -> bool:
        return self.verdict.execution_allowed

    @property
    def risk_level(self) -> RiskLevel:
        return self.verdict.risk_level

    @property
    def required_controls(self) -> tuple[str, ...]:
        return self.verdict.required_controls

    @property
    def missing_controls(self) -> tuple[str, ...]:
        return self.verdict.missing_controls

    @property
    def reason_codes(self) -> tuple[str, ...]:
        return self.verdict.reason_codes

    def to_dict(self) -> dict[str, Any]:
        """The contract's decision JSON (kcp_opa.authoring.cases indexes it by field name, unchecked)."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "decision_id": self.decision_id,
            "action_hash": self.action_hash,
        }
        out.update(self.verdict.to_dict())
        out.update(policy_version=self.policy_version, bundle_revision=self.bundle_revision)
        if self.bundle_sha256:  # the bytes that decided, beside the revision that names them
            out["bundle_sha256"] = self.bundle_sha256
        if self.bundle_signer is not None:
            out["bundle_signer"] = self.bundle_signer
        out.update(trace_id=self.trace_id, evaluated_at=self.evaluated_at)
        if self.mode != "enforce":
            out.update(mode=self.mode, enforced=False)
        if self.engine_error is not None:
            out["engine_error"] = self.engine_error
        return out


def fail_closed_verdict(code: str, rule: str, evaluator_id: str, message: str) -> PolicyVerdict:
    """A DENY for when there is no policy answer to trust (contract principle 3): not policy,
    the absence of one. Like every DENY it lists no controls (docs/contract.md)."""
    return PolicyVerdict(
        decision=RoutingState.DENY,
        outcome=Outcome.DENY,
        authorization_status=AuthorizationStatus.DENIED,
        execution_allowed=False,
        risk_level=RiskLevel.CRITICAL,
        required_controls=(),
        satisfied_controls=(),
        missing_controls=(),
        reasons=(Reason(code, rule, evaluator_id, "1.0.0", message),),
        reason_codes=(code,),
        violations=(),
        obligations=("audit",),
        approver_roles=(),
    )


ENGINE_ERROR_VERDICT = fail_closed_verdict(
    "engine_error", "kcp_opa.engine", "kcp_opa_engine", "the policy engine did not produce a decision; failing closed"
)
ENGINE_DIVERGENCE_VERDICT = fail_closed_verdict(
    "engine_divergence",
    "kcp_opa.cross_check",
    "kcp_opa_engine",
    "regopy and the OPA reference engine decided differently; failing closed",
)
AUDIT_UNAVAILABLE_VERDICT = fail_closed_verdict(
    "audit_unavailable",
    "kcp_opa.audit",
    "kcp_opa_audit",
    "the decision could not be written to the audit ledger; failing closed",
)


def _str(raw: JsonObject, key: str) -> str:
    value = raw[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string, got {value!r}")
    return value


def _bool(raw: JsonObject, key: str) -> bool:
    value = raw[key]
    if not isinstance(value, bool):
        raise TypeError(f"{key} must be a boolean, got {value!r}")
    return value


def _list(raw: JsonObject, key: str) -> list[object]:
    value = raw[key]
    if not isinstance(value, list):
        raise TypeError(f"{key} must be an array, got {value!r}")
    return value


def _strings(raw: JsonObject, key: str) -> tuple[str, ...]:
    values = _list(raw, key)
    texts = tuple(value for value in values if isinstance(value, str))
    if len(texts) != len(values):
        raise TypeError(f"{key} must hold strings only")
    return texts


def _optional_str(raw: JsonObject, key: str) -> str | None:
    value = raw.get(key)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{key} must be a string")


def _reason(raw: object) -> Reason:
    if not isinstance(raw, Mapping):
        raise TypeError("a reason must be an object")
    return Reason(
        code=_str(raw, "code"),
        rule=_str(raw, "rule"),
        evaluator_id=_str(raw, "evaluator_id"),
        evaluator_version=_str(raw, "evaluator_version"),
        message=_str(raw, "message"),
        unit=_optional_str(raw, "unit"),
        regulation=_optional_str(raw, "regulation"),
        waived_by=_optional_str(raw, "waived_by"),
    )


def _violation(raw: object) -> Violation:
    if not isinstance(raw, Mapping):
        raise TypeError("a violation must be an object")
    return Violation(evaluator_id=_str(raw, "evaluator_id"), code=_str(raw, "code"), fields=_strings(raw, "fields"))
