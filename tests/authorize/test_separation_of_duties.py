"""Separation of duties: nobody approves their own action, one person answers one control, and a
FAILED result is final (issue 15)."""

from __future__ import annotations

import pytest
from trustkit import DECIDED, KYA, approve_all, refusal_code, signed

from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.core.errors import EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.signing import hmac_key

SCREENING = {**KYA, "action_id": "act_screening", "attributes": {**KYA["attributes"], "screening_uncertain": True}}
SECRET = b"kya-receipt-secret-0123456789abcdef"


@pytest.mark.parametrize(
    ("actor", "code"),
    [
        ("user_001", "self_approval"),
        ("agent_payments_001", "agent_cannot_satisfy_human_control"),
        ("treasury_approver_anna", "approver_role_mismatch"),
    ],
)
def test_compliance_review_needs_an_independent_compliance_officer(desk: ControlDesk, actor: str, code: str) -> None:
    record = desk.open(SCREENING, now=DECIDED)
    assert "compliance_review" in record.decision.required_controls
    assert refusal_code(desk, record, signed(record, "compliance_review", actor), SCREENING) == code
    accepted = desk.record_control_result(
        record, signed(record, "compliance_review", "compliance_officer_omar"), action=SCREENING
    )
    assert "compliance_review" in accepted.passed_controls


def test_failed_then_passed_stays_failed(desk: ControlDesk) -> None:
    record = approve_all(desk, skip="independent_human_approval")
    failed = signed(record, "independent_human_approval", "treasury_approver_anna", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    later = signed(record, "independent_human_approval", "treasury_approver_ben", done="2026-11-29T10:05:00Z")
    assert refusal_code(desk, record, later) == "control_failed"
    assert record.decision.authorization_status.value == "PENDING_CONTROLS"


def test_passed_then_failed_unsatisfies(desk: ControlDesk) -> None:
    record = approve_all(desk)
    assert record.decision.authorization_status.value == "APPROVED"
    failed = signed(record, "independent_human_approval", "treasury_approver_ben", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    assert record.decision.authorization_status.value == "PENDING_CONTROLS"
    assert "independent_human_approval" in record.decision.missing_controls
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(record, hmac_key("k", SECRET))
    assert caught.value.code == "not_approved"


def test_the_requester_who_is_not_the_subject_cannot_approve(desk: ControlDesk) -> None:
    """Kills: dropping ``authorization_context.requested_by`` from the parties that may not
    approve their own action. Every earlier test had requester == subject, so the subject rule
    alone refused it."""
    requester = "treasury_approver_ben"  # a registered approver, so only the requester rule can refuse him
    action = KYA | {"authorization_context": KYA["authorization_context"] | {"requested_by": requester}}
    assert action["subject_id"] != requester
    record = desk.open(action, now=DECIDED)
    item = signed(record, "independent_human_approval", requester, reference="r")
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(record, item, action=action)
    assert caught.value.code == "self_approval"
    other = signed(record, "independent_human_approval", "treasury_approver_anna", reference="r")
    accepted = desk.record_control_result(record, other, action=action)
    assert "independent_human_approval" not in accepted.decision.missing_controls
