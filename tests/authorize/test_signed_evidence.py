"""Control evidence counts only signed by an issuer the trust registry allows for that control
(issue 15). Every attack here was accepted before the fix."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import receipt_for
from trustkit import DECIDED, KYA, approve_all, issuer_key, refusal_code, registry, signed

from kcp_opa.authorize.attestations import attestation_bytes, sign_attestation, verify_attestation
from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.core.errors import EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.signing import Keyring, generate_ed25519, hmac_key

SECRET = b"kya-receipt-secret-0123456789abcdef"
KYA_HASH = "sha256:29a918d0341fc6c5fa77914b24525c23becdeef3de7db8e6171f2ebeecc8bf2b"
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)


def test_an_agent_declaring_itself_human_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "agent_payments_001")
    declared = {k: v for k, v in item.items() if k != "signature"} | {"actor_type": "human"}
    forged = sign_attestation(declared, "approval-app", issuer_key("approval-app")) | {"actor_type": "human"}
    forged = dict(declared) | {"signature": {"alg": "Ed25519", "kid": "approval-app-ed25519-test"}}
    forged["signature"]["value"] = issuer_key("approval-app").sign(attestation_bytes(forged))
    assert refusal_code(desk, record, forged) == "actor_type_mismatch"
    # without the claim the registry still says ai_agent
    assert refusal_code(desk, record, item) == "agent_cannot_satisfy_human_control"


def test_actor_type_comes_from_the_registry(desk: ControlDesk) -> None:
    record = approve_all(desk)
    kinds = {e.control: e.actor_type for e in record.evidence}
    assert kinds["independent_human_approval"] == "human" and kinds["user_confirmation"] == "user"
    assert kinds["standard_audit_logging"] == "system"


def test_unsigned_evidence_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna")
    unsigned = {k: v for k, v in item.items() if k != "signature"} | {"actor_type": "human"}
    assert refusal_code(desk, record, unsigned) == "unsigned_evidence"


def test_unknown_issuer_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna")
    rogue = generate_ed25519("approval-app-ed25519-test")
    fields = {k: v for k, v in item.items() if k not in {"signature", "issuer"}}
    assert refusal_code(desk, record, sign_attestation(fields, "rogue-approvals", rogue)) == "unknown_issuer"
    # a registered issuer's name with somebody else's key
    assert refusal_code(desk, record, sign_attestation(fields, "approval-app", rogue)) == "bad_signature"
    assert refusal_code(desk, record, sign_attestation(fields, "approval-app", generate_ed25519("other"))) == (
        "unknown_issuer_key"
    )


def test_an_issuer_not_allowed_for_the_control_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna", issuer="bank-idp")
    assert refusal_code(desk, record, item) == "issuer_not_allowed"


def test_an_edited_attestation_does_not_verify(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna", status="FAILED")
    assert refusal_code(desk, record, item | {"status": "PASSED"}) == "bad_signature"


def test_hmac_issuer_keys_come_from_the_keyring() -> None:

    trust = registry()
    key = hmac_key("kya-gate", SECRET)
    fields = {
        "control": "identity_verification",
        "status": "PASSED",
        "actor_id": "kyc-provider",
        "evidence_reference": "r",
        "completed_at": DECIDED,
        "decision_id": "dec_1",
        "action_hash": "sha256:" + "0" * 64,
    }
    item = sign_attestation(fields, "kya-reference-gate", key)
    assert verify_attestation(item, trust, Keyring({"kya-gate": key})).issuer == "kya-reference-gate"
    with pytest.raises(EvidenceRejectedError) as caught:
        verify_attestation(item, trust, None)
    assert caught.value.code == "unknown_issuer_key"


# --- control evidence ------------------------------------------------------------------------


def test_six_controls_approve_the_kya_payment(approved: GateDecision) -> None:
    assert approved.decision.authorization_status.value == "APPROVED"
    assert approved.decision.decision.value == "HUMAN_APPROVAL"  # the routing state stays; nothing is missing
    assert approved.decision.missing_controls == ()
    document = approved.to_dict()
    assert document["blocked_actions"] == [] and len(document["control_evidence"]) == 6
    assert document["action_hash"] == KYA_HASH


@pytest.mark.parametrize(
    ("control", "actor", "issuer", "code"),
    [
        ("independent_human_approval", "agent_payments_001", None, "agent_cannot_satisfy_human_control"),
        ("user_confirmation", "agent_payments_001", None, "agent_cannot_satisfy_human_control"),
        ("independent_human_approval", "user_001", None, "self_approval"),
        ("user_confirmation", "treasury_approver_anna", None, "actor_type_not_allowed"),
        ("standard_audit_logging", "treasury_approver_anna", None, "actor_type_not_allowed"),
        ("independent_human_approval", "support_sam", None, "approver_role_mismatch"),
        ("independent_human_approval", "mallory", None, "unknown_principal"),
        ("compliance_review", "compliance_officer_omar", None, "control_not_required"),
    ],
)
def test_evidence_refusals(desk: ControlDesk, control: str, actor: str, issuer: str | None, code: str) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, control, actor, issuer=issuer, reference="r")
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(record, item, action=KYA)
    assert caught.value.code == code


def test_evidence_for_another_action_or_decision(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    other = desk.open({**KYA, "action_id": "act_other"}, now=DECIDED)
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(
            record,
            signed(other, "user_confirmation", "user_001") | {"decision_id": record.decision.decision_id},
            action=KYA,
        )
    assert caught.value.code == "bad_signature"  # a re-bound attestation no longer verifies
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(record, signed(other, "user_confirmation", "user_001"), action=KYA)
    assert caught.value.code == "evidence_for_another_action"


def test_a_changed_action_never_inherits_evidence(desk: ControlDesk, approved: GateDecision) -> None:
    changed = {**KYA, "amount": {"value_minor": 900000, "currency": "USD"}}
    item = signed(approved, "user_confirmation", "user_001")
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(approved, item, action=changed)
    assert caught.value.code == "action_changed"
    with pytest.raises(ReceiptIssueError) as issue:
        receipt_for(approved.to_dict(), changed, hmac_key("k", SECRET), now=ISSUED)
    assert issue.value.code == "action_mismatch"


def test_failed_result_never_counts_as_passed(desk: ControlDesk) -> None:
    record = approve_all(desk, KYA, skip="independent_human_approval")
    failed = signed(record, "independent_human_approval", "treasury_approver_anna", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    assert record.decision.authorization_status.value == "PENDING_CONTROLS"
    assert record.decision.missing_controls == ("independent_human_approval",)
    forged = record.to_dict() | {"authorization_status": "APPROVED", "blocked_actions": []}
    with pytest.raises(ReceiptIssueError) as caught:
        receipt_for(forged, KYA, hmac_key("k", SECRET), now=ISSUED)
    assert caught.value.code == "controls_missing"
