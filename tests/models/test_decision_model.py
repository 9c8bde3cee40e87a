"""Behaviour tests for kcp_opa/models/decision.py that kill its mutmut survivors (docs/testing.md).

The typed layer is the last check between the policy's JSON and an allow: every field is
parsed strictly and the fields must agree with each other. Pure Python, fast per mutant.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_opa.models import decision as model
from kcp_opa.models.decision import (
    AUDIT_UNAVAILABLE_VERDICT,
    ENGINE_DIVERGENCE_VERDICT,
    ENGINE_ERROR_VERDICT,
    AuthorizationStatus,
    Decision,
    MalformedDecisionError,
    Outcome,
    PolicyVerdict,
    Reason,
    RiskLevel,
    RoutingState,
    Violation,
    fail_closed_verdict,
)

REASON = {
    "code": "amount_over_limit",
    "rule": "kcp.evaluators.financial",
    "evaluator_id": "financial",
    "evaluator_version": "1.0.0",
    "message": "over the limit",
}


def _raw(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "decision": "HUMAN_APPROVAL",
        "outcome": "require_approval",
        "authorization_status": "PENDING_CONTROLS",
        "execution_allowed": False,
        "risk_level": "HIGH",
        "required_controls": ["a_control", "b_control"],
        "satisfied_controls": ["a_control"],
        "missing_controls": ["b_control"],
        "reasons": [dict(REASON, unit="u1", regulation="PSD2")],
        "reason_codes": ["amount_over_limit"],
        "violations": [{"evaluator_id": "field_access", "code": "undeclared_fields", "fields": ["x", "y"]}],
        "obligations": ["audit"],
        "approver_roles": ["treasury"],
    }
    raw.update(overrides)
    return raw


def _refused(raw: dict[str, Any]) -> str:
    with pytest.raises(MalformedDecisionError) as caught:
        PolicyVerdict.from_policy(raw)
    message = str(caught.value)
    assert message.startswith("policy output is not a decision document: ")
    return message.removeprefix("policy output is not a decision document: ")


def test_enum_values_are_the_contract_spelling() -> None:
    assert [s.value for s in RoutingState] == [
        "DENY",
        "COMPLIANCE_REVIEW",
        "ESCALATE",
        "HUMAN_APPROVAL",
        "IDENTITY_VERIFICATION",
        "STEP_UP_AUTHENTICATION",
        "USER_CONFIRMATION",
        "ALLOW",
    ]
    assert [o.value for o in Outcome] == ["allow", "require_approval", "escalate", "deny"]
    assert [a.value for a in AuthorizationStatus] == ["APPROVED", "PENDING_CONTROLS", "DENIED"]
    assert [r.value for r in RiskLevel] == ["LOW", "MEDIUM", "HIGH", "CRITICAL"]
    assert model.SCHEMA_VERSION == "2.0"
    assert {"DENY", "COMPLIANCE_REVIEW", "ESCALATE"} == model._HOLDS


def test_a_valid_document_round_trips_field_for_field() -> None:
    raw = _raw()
    verdict = PolicyVerdict.from_policy(raw)
    assert verdict.to_dict() == raw
    assert list(verdict.to_dict()) == list(raw)
    assert list(verdict.to_dict()["reasons"][0]) == [
        "code",
        "rule",
        "unit",
        "regulation",
        "evaluator_id",
        "evaluator_version",
        "message",
    ]
    plain = PolicyVerdict.from_policy(_raw(reasons=[REASON]))
    assert (
        plain.to_dict()["reasons"] == [REASON] and plain.reasons[0].unit is None and plain.reasons[0].regulation is None
    )
    assert verdict.violations == (Violation("field_access", "undeclared_fields", ("x", "y")),)
    assert verdict.reasons[0] == Reason(**REASON, unit="u1", regulation="PSD2")


@pytest.mark.parametrize(
    ("state", "outcome"),
    [
        ("DENY", "deny"),
        ("COMPLIANCE_REVIEW", "escalate"),
        ("ESCALATE", "escalate"),
        ("HUMAN_APPROVAL", "require_approval"),
        ("IDENTITY_VERIFICATION", "require_approval"),
        ("STEP_UP_AUTHENTICATION", "require_approval"),
        ("USER_CONFIRMATION", "require_approval"),
        ("ALLOW", "allow"),
    ],
)
def test_each_state_has_exactly_one_outcome(state: str, outcome: str) -> None:
    status = "DENIED" if state == "DENY" else "PENDING_CONTROLS"
    PolicyVerdict.from_policy(_raw(decision=state, outcome=outcome, authorization_status=status))
    for other in ("allow", "require_approval", "escalate", "deny"):
        if other != outcome:
            assert _refused(_raw(decision=state, outcome=other, authorization_status=status)) == (
                f"outcome {other} does not belong to {state}"
            )


def test_approved_allow() -> None:
    approved = _raw(
        decision="ALLOW",
        outcome="allow",
        authorization_status="APPROVED",
        execution_allowed=True,
        satisfied_controls=["a_control", "b_control"],
        missing_controls=[],
    )
    assert PolicyVerdict.from_policy(approved).execution_allowed is True
    # approved after controls, with a non-hold state
    PolicyVerdict.from_policy({**approved, "decision": "HUMAN_APPROVAL", "outcome": "require_approval"})
    assert _refused({**approved, "execution_allowed": False}) == "execution_allowed False with APPROVED"
    assert _refused({**approved, "satisfied_controls": ["a_control"], "missing_controls": ["b_control"]}) == (
        "APPROVED with ALLOW and missing ['b_control']"
    )
    assert _refused({**approved, "decision": "ESCALATE", "outcome": "escalate"}) == (
        "APPROVED with ESCALATE and missing []"
    )


def test_deny_and_denied_go_together() -> None:
    assert _refused(_raw(decision="DENY", outcome="deny")) == "authorization_status PENDING_CONTROLS with DENY"
    assert _refused(_raw(authorization_status="DENIED")) == "authorization_status DENIED with HUMAN_APPROVAL"
    PolicyVerdict.from_policy(_raw(decision="DENY", outcome="deny", authorization_status="DENIED"))


def test_execution_allowed_only_when_approved() -> None:
    assert _refused(_raw(execution_allowed=True)) == "execution_allowed True with PENDING_CONTROLS"
    assert _refused(_raw(decision="DENY", outcome="deny", authorization_status="DENIED", execution_allowed=True)) == (
        "execution_allowed True with DENIED"
    )


def test_pending_needs_something_pending() -> None:
    nothing = _raw(satisfied_controls=["a_control", "b_control"], missing_controls=[])
    assert _refused(nothing) == "PENDING_CONTROLS with nothing missing"
    # a hold with nothing missing is pending on the hold
    PolicyVerdict.from_policy({**nothing, "decision": "COMPLIANCE_REVIEW", "outcome": "escalate"})
    PolicyVerdict.from_policy({**nothing, "decision": "ESCALATE", "outcome": "escalate"})


def test_controls_must_partition_the_required_ones() -> None:
    message = "satisfied and missing controls do not partition the required controls"
    assert _refused(_raw(satisfied_controls=["a_control", "b_control"])) == message  # b both
    assert _refused(_raw(satisfied_controls=[])) == message  # a nowhere
    assert _refused(_raw(missing_controls=["b_control", "c_control"])) == message  # c not required
    assert _refused(_raw(required_controls=["a_control"], satisfied_controls=["a_control"])) == message
    PolicyVerdict.from_policy(_raw(required_controls=["b_control", "a_control"]))  # order is free


def test_several_problems_are_all_named() -> None:
    message = _refused(_raw(outcome="allow", execution_allowed=True))
    assert message == "outcome allow does not belong to HUMAN_APPROVAL; execution_allowed True with PENDING_CONTROLS"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("decision", 1, "decision must be a string, got 1"),
        ("decision", "MAYBE", "'MAYBE' is not a valid RoutingState"),
        ("outcome", None, "outcome must be a string, got None"),
        ("authorization_status", "OK", "'OK' is not a valid AuthorizationStatus"),
        ("execution_allowed", 0, "execution_allowed must be a boolean, got 0"),
        ("execution_allowed", "false", "execution_allowed must be a boolean, got 'false'"),
        ("risk_level", "NONE", "'NONE' is not a valid RiskLevel"),
        ("required_controls", "a_control", "required_controls must be an array, got 'a_control'"),
        ("satisfied_controls", [1], "satisfied_controls must hold strings only"),
        ("missing_controls", None, "missing_controls must be an array, got None"),
        ("reasons", {}, "reasons must be an array, got {}"),
        ("reasons", ["r"], "a reason must be an object"),
        ("reasons", [{**REASON, "code": 5}], "code must be a string, got 5"),
        ("reasons", [{**REASON, "unit": 5}], "unit must be a string"),
        ("reasons", [{**REASON, "regulation": []}], "regulation must be a string"),
        ("reason_codes", [None], "reason_codes must hold strings only"),
        ("violations", [[]], "a violation must be an object"),
        ("violations", [{"evaluator_id": "e", "code": "c", "fields": "x"}], "fields must be an array, got 'x'"),
        ("obligations", [1], "obligations must hold strings only"),
        ("approver_roles", "r", "approver_roles must be an array, got 'r'"),
    ],
)
def test_each_field_is_typed(key: str, value: Any, message: str) -> None:
    assert _refused(_raw(**{key: copy.deepcopy(value)})) == message


def test_a_missing_field_is_refused() -> None:
    for key in _raw():
        raw = _raw()
        del raw[key]
        assert _refused(raw) == repr(key)
    for key in ("code", "rule", "evaluator_id", "evaluator_version", "message"):
        reason = dict(REASON)
        del reason[key]
        assert _refused(_raw(reasons=[reason])) == repr(key)
    for key in ("evaluator_id", "code", "fields"):
        violation = {"evaluator_id": "e", "code": "c", "fields": []}
        del violation[key]
        assert _refused(_raw(violations=[violation])) == repr(key)


def test_decision_properties_and_json() -> None:
    verdict = PolicyVerdict.from_policy(_raw())
    decision = Decision("dec_1", "sha256:a", verdict, "0.1.0", "rev-1", "trace-1", "2026-11-29T10:00:00Z")
    assert decision.decision is RoutingState.HUMAN_APPROVAL and decision.outcome is Outcome.REQUIRE_APPROVAL
    assert decision.authorization_status is AuthorizationStatus.PENDING_CONTROLS
    assert decision.execution_allowed is False and decision.risk_level is RiskLevel.HIGH
    assert decision.required_controls == ("a_control", "b_control") and decision.missing_controls == ("b_control",)
    assert decision.reason_codes == ("amount_over_limit",)
    assert decision.schema_version == "2.0" and decision.engine_error is None
    out = decision.to_dict()
    assert list(out)[:3] == ["schema_version", "decision_id", "action_hash"]
    assert list(out)[-4:] == ["policy_version", "bundle_revision", "trace_id", "evaluated_at"]
    assert out == {
        "schema_version": "2.0",
        "decision_id": "dec_1",
        "action_hash": "sha256:a",
        **verdict.to_dict(),
        "policy_version": "0.1.0",
        "bundle_revision": "rev-1",
        "trace_id": "trace-1",
        "evaluated_at": "2026-11-29T10:00:00Z",
    }
    failed = Decision("dec_2", "sha256:a", ENGINE_ERROR_VERDICT, "0.1.0", "rev", None, "t", engine_error="boom")
    assert failed.to_dict()["engine_error"] == "boom" and failed.to_dict()["trace_id"] is None
    assert list(failed.to_dict())[-1] == "engine_error"


def test_fail_closed_verdicts() -> None:
    verdict = fail_closed_verdict("code_x", "rule.x", "eval_x", "message x")
    assert verdict.to_dict() == {
        "decision": "DENY",
        "outcome": "deny",
        "authorization_status": "DENIED",
        "execution_allowed": False,
        "risk_level": "CRITICAL",
        "required_controls": [],
        "satisfied_controls": [],
        "missing_controls": [],
        "reasons": [
            {
                "code": "code_x",
                "rule": "rule.x",
                "evaluator_id": "eval_x",
                "evaluator_version": "1.0.0",
                "message": "message x",
            }
        ],
        "reason_codes": ["code_x"],
        "violations": [],
        "obligations": ["audit"],
        "approver_roles": [],
    }
    assert PolicyVerdict.from_policy(verdict.to_dict()) == verdict  # consistent by the same rules
    for constant, code, rule, evaluator, message in (
        (
            ENGINE_ERROR_VERDICT,
            "engine_error",
            "kcp_opa.engine",
            "kcp_opa_engine",
            "the policy engine did not produce a decision; failing closed",
        ),
        (
            ENGINE_DIVERGENCE_VERDICT,
            "engine_divergence",
            "kcp_opa.cross_check",
            "kcp_opa_engine",
            "regopy and the OPA reference engine decided differently; failing closed",
        ),
        (
            AUDIT_UNAVAILABLE_VERDICT,
            "audit_unavailable",
            "kcp_opa.audit",
            "kcp_opa_audit",
            "the decision could not be written to the audit ledger; failing closed",
        ),
    ):
        assert constant == fail_closed_verdict(code, rule, evaluator, message)


# --- the typed layer: a self-contradicting decision document is an engine error ---------------

#: The policy's fail-closed default decision (policies/kcp/gate/decision.rego), verbatim.
DEFAULT_DECISION: dict[str, Any] = {
    "decision": "DENY",
    "outcome": "deny",
    "authorization_status": "DENIED",
    "execution_allowed": False,
    "risk_level": "CRITICAL",
    "required_controls": ["standard_audit_logging"],
    "satisfied_controls": [],
    "missing_controls": ["standard_audit_logging"],
    "reasons": [
        {
            "code": "policy_undefined",
            "rule": "kcp.gate.default",
            "evaluator_id": "kcp_gate",
            "evaluator_version": "1.0.0",
            "message": "the policy produced no decision; failing closed",
        }
    ],
    "reason_codes": ["policy_undefined"],
    "violations": [],
    "obligations": ["audit"],
    "approver_roles": [],
}
APPROVED_ALLOW = DEFAULT_DECISION | {
    "decision": "ALLOW",
    "outcome": "allow",
    "authorization_status": "APPROVED",
    "execution_allowed": True,
    "risk_level": "LOW",
    "satisfied_controls": ["standard_audit_logging"],
    "missing_controls": [],
}


def test_consistent_documents_parse() -> None:
    assert PolicyVerdict.from_policy(DEFAULT_DECISION).execution_allowed is False
    assert PolicyVerdict.from_policy(APPROVED_ALLOW).execution_allowed is True
    # A routing state that asks for approval is APPROVED once nothing is missing (contract §5).
    approved_hold = APPROVED_ALLOW | {"decision": "HUMAN_APPROVAL", "outcome": "require_approval"}
    assert PolicyVerdict.from_policy(approved_hold).execution_allowed is True


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("default decision says execution_allowed", {"execution_allowed": True}),
        ("DENY but APPROVED", {"authorization_status": "APPROVED", "execution_allowed": True, "missing_controls": []}),
        ("allowed with a control missing", {"missing_controls": ["standard_audit_logging"], "satisfied_controls": []}),
        ("allowed while PENDING_CONTROLS", {"authorization_status": "PENDING_CONTROLS"}),
        ("APPROVED but not allowed", {"execution_allowed": False}),
        ("ESCALATE approved", {"decision": "ESCALATE", "outcome": "escalate"}),
        ("outcome of another state", {"outcome": "deny"}),
        ("ALLOW but DENIED", {"authorization_status": "DENIED", "execution_allowed": False}),
        ("pending with nothing missing", {"authorization_status": "PENDING_CONTROLS", "execution_allowed": False}),
        ("a control both satisfied and missing", {"missing_controls": ["standard_audit_logging"]}),
        ("a missing control that is not required", {"missing_controls": ["safe_stop"]}),
    ],
)
def test_contradicting_documents_are_malformed(name: str, changes: dict[str, Any]) -> None:
    """Kills: the default decision with ``execution_allowed: true`` (the typed layer used to trust
    the flag without checking it against the state, the status and the missing controls)."""
    base = DEFAULT_DECISION if name.startswith(("default", "DENY")) else APPROVED_ALLOW
    with pytest.raises(MalformedDecisionError):
        PolicyVerdict.from_policy(base | changes)
