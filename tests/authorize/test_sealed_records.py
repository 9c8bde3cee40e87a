"""Records the caller cannot edit: a prepared input or a decision record edited after the gate
sealed it is refused (issue 15)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
from conftest import vouched_gate
from trustkit import DECIDED, KYA, KYA_APPROVALS, approve_all, make_desk, signed

from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.authorize.documents import Attestation
from kcp_opa.core.errors import ActionRejectedError, EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.signing import hmac_key
from kcp_opa.trail.ledger import AuditLedger

SECRET = b"kya-receipt-secret-0123456789abcdef"
SIX = list(KYA_APPROVALS)


def test_an_edited_prepared_input_is_refused(trust_bundle: Path, tmp_path: Path) -> None:
    ledger = AuditLedger(tmp_path / "ledger.jsonl")
    gate = vouched_gate(trust_bundle, ledger=ledger)
    prepared = gate.prepare(KYA, now=DECIDED)
    edited = copy.deepcopy(dict(prepared.document))
    edited["context"]["satisfied_controls"] = sorted(SIX_CONTROLS)
    forged = dataclasses.replace(prepared, document=edited)
    with pytest.raises(ActionRejectedError, match="edited"):
        gate.decide_prepared(forged)
    prepared.document["context"]["satisfied_controls"].extend(SIX_CONTROLS)  # edited in place
    with pytest.raises(ActionRejectedError, match="edited"):
        gate.decide_prepared(prepared)
    assert not (tmp_path / "ledger.jsonl").exists()  # nothing was evaluated, nothing archived
    assert gate.decide_prepared(gate.prepare(KYA, now=DECIDED)).authorization_status.value == "PENDING_CONTROLS"


SIX_CONTROLS = [c for c, _ in SIX]


def test_an_edited_record_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    approved = approve_all(desk)
    forged = dataclasses.replace(record, decision=approved.decision)  # APPROVED pasted on a pending record
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(forged, signed(record, "user_confirmation", "user_001"), action=KYA)
    assert caught.value.code == "record_tampered"
    with pytest.raises(ReceiptIssueError) as issue:
        desk.issue(forged, hmac_key("k", SECRET))
    assert issue.value.code == "record_tampered"


def test_ai_agent_evidence_is_refused_at_issuance(desk: ControlDesk) -> None:
    approved = approve_all(desk)
    human = next(e for e in approved.evidence if e.control == "independent_human_approval")
    by_agent = dataclasses.replace(human, actor_type="ai_agent", actor_id="agent_payments_001")
    forged = dataclasses.replace(
        approved, evidence=tuple(by_agent if e is human else e for e in approved.evidence), seal=approved.seal
    )
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(forged, hmac_key("k", SECRET))
    assert caught.value.code == "record_tampered"
    # a desk with the same seal key still re-judges the attestations themselves
    agent_signed = signed(approved, "independent_human_approval", "agent_payments_001")
    swapped = dataclasses.replace(human, attestation=Attestation.from_dict(agent_signed))
    resealed = desk._sealed(
        dataclasses.replace(approved, evidence=tuple(swapped if e is human else e for e in approved.evidence))
    )
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(resealed, hmac_key("k", SECRET))
    assert caught.value.code == "agent_cannot_satisfy_human_control"
    assert desk.issue(approved, hmac_key("k", SECRET)).approver_ids == ("treasury_approver_anna",)


def test_a_desk_refuses_a_bundle_compiled_with_another_registry(tmp_path: Path) -> None:
    from conftest import DEPLOYMENTS, POLICIES

    from kcp_opa.compile.compiler import compile_bundle

    base = DEPLOYMENTS / "finance"
    out = compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, tmp_path / "plain.tar.gz").output
    with pytest.raises(EvidenceRejectedError) as caught:
        make_desk(vouched_gate(out, preflight=False))
    assert caught.value.code == "registry_mismatch"
