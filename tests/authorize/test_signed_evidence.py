"""Control evidence counts only signed by an issuer the trust registry allows for that control
(issue 15). Every attack here was accepted before the fix."""

from __future__ import annotations

import pytest
from trustkit import DECIDED, KYA, approve_all, issuer_key, refusal_code, registry, signed

from kcp_opa.authorize.attestations import attestation_bytes, sign_attestation, verify_attestation
from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.core.errors import EvidenceRejectedError
from kcp_opa.core.signing import Keyring, generate_ed25519, hmac_key

SECRET = b"kya-receipt-secret-0123456789abcdef"


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
