"""Behaviour tests for kcp_opa/authorize/controls.py that kill mutmut survivors (docs/testing.md).

The desk needs a real Gate over a bundle compiled with the trust registry. The bundle is compiled
once per content (trustkit's cache) and the rego-cpp plans are kept beside it, so a fresh pytest
run (mutmut starts one per mutant) costs a copy and a plan load, not a compile. Two desks: one
over a gate with a real hash-chained ledger (the audit events and the gate's own attestation),
one without (no audit, no system control).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, vouched_gate
from trustkit import KYA_APPROVALS, bundle_cache, issuer_key, make_desk, registry, signed

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.evidence import EvidenceStatus, evidence_for
from kcp_opa.authorize.parties import parties
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.core.errors import BundleError, EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.trust import load_trust
from kcp_opa.trail.ledger import AuditLedger, read_entries

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
DECIDED = "2026-11-29T10:00:00Z"
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
SIX = list(KYA_APPROVALS)
HUMAN = [(c, a) for c, a in SIX if c != "standard_audit_logging"]
KEY = hmac_key("kya-1", b"mutant-controls-secret-0123456789abcdef")


def _gate(trust_bundle: Path, **kwargs: Any) -> Gate:
    # preflight off: the full suite preflights this same bundle (the shared `desk` fixture)
    return vouched_gate(trust_bundle, preflight=False, plan_cache=bundle_cache(), **kwargs)


@pytest.fixture(scope="module")
def desk(trust_bundle: Path) -> ControlDesk:
    return make_desk(_gate(trust_bundle))


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mc-ledger") / "ledger.jsonl"


@pytest.fixture(scope="module")
def audited(trust_bundle: Path, ledger_path: Path) -> ControlDesk:
    return make_desk(_gate(trust_bundle, ledger=AuditLedger(ledger_path)))


def _approved(desk: ControlDesk, controls: list[tuple[str, str]] = SIX) -> GateDecision:
    record = desk.open(KYA, now=DECIDED)
    for control, actor in controls:
        record = desk.record_control_result(record, signed(record, control, actor), action=KYA)
    return record


def _events(path: Path, since: int, kind: str) -> list[dict[str, Any]]:
    return [e for n, e in read_entries(path) if n > since and e.get("type") == kind]


def _last(path: Path) -> int:
    return max((n for n, _ in read_entries(path)), default=0)


def _refusal(desk: ControlDesk, record: GateDecision, item: Any, action: Any = None) -> EvidenceRejectedError:
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(record, item, action=KYA if action is None else action)
    return caught.value


# --- issue ---------------------------------------------------------------------------------------


def test_issue_passes_the_ttl_and_the_clock_through(desk: ControlDesk) -> None:
    receipt = desk.issue(_approved(desk), KEY, ttl_seconds=60, now=ISSUED).to_dict()
    assert (receipt["issued_at"], receipt["expires_at"]) == ("2026-11-29T10:02:00Z", "2026-11-29T10:03:00Z")


def test_issue_defaults_to_the_record_s_ttl(desk: ControlDesk) -> None:
    receipt = desk.issue(_approved(desk), KEY, now=ISSUED).to_dict()
    assert (receipt["issued_at"], receipt["expires_at"]) == ("2026-11-29T10:02:00Z", "2026-11-29T10:07:00Z")


def test_a_record_that_does_not_stand_is_named(desk: ControlDesk) -> None:
    record = _approved(desk)
    edited = dataclasses.replace(record, seal="0" * 64)
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(edited, KEY, now=ISSUED)
    assert str(caught.value) == "the record does not stand: the record was edited or not made by this desk"
    assert caught.value.code == "record_tampered"


def test_issue_writes_the_receipt_event(audited: ControlDesk, ledger_path: Path) -> None:
    record = _approved(audited, HUMAN)
    since = _last(ledger_path)
    receipt = audited.issue(record, KEY, now=ISSUED).to_dict()
    (event,) = _events(ledger_path, since, "receipt")
    assert {k: event[k] for k in ("decision_id", "action_hash", "receipt_id", "issued_at", "expires_at")} == {
        k: receipt[k] for k in ("decision_id", "action_hash", "receipt_id", "issued_at", "expires_at")
    }
    assert event["signature"] == {"alg": receipt["signature"]["alg"], "kid": "kya-1"}
    assert event["approver_ids"] == receipt["approver_ids"] == ["treasury_approver_anna"]
    # the KCP fields of the action and of the (re-derived) decision
    assert (event["action_id"], event["trace_id"], event["passed"]) == (
        KYA["action_id"],
        record.decision.trace_id,
        True,
    )


# --- rederive ------------------------------------------------------------------------------------


def test_rederive_without_evidence(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    again = desk.rederive(record)
    assert again.decision.decision == record.decision.decision
    assert again.decision.missing_controls == record.decision.missing_controls


def test_rederive_replays_every_item_in_order(desk: ControlDesk) -> None:
    record = _approved(desk)
    failed = signed(record, "independent_human_approval", "treasury_approver_ben", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    again = desk.rederive(record)
    assert [(e.control, e.status, e.actor_id) for e in again.evidence] == [
        (e.control, e.status, e.actor_id) for e in record.evidence
    ]
    assert again.decision.authorization_status.value == "PENDING_CONTROLS"
    assert again.decision.missing_controls == ("independent_human_approval",)
    assert again.decision.trace_id == record.decision.trace_id
    assert again.decision.decision_id == record.decision.decision_id
    desk.check_seal(again)  # sealed by this desk


def test_rederive_re_verifies_each_signature(desk: ControlDesk) -> None:
    record = _approved(desk)
    item = record.evidence[0]
    forged = dataclasses.replace(item.attestation, evidence_reference="ev:forged")
    edited = desk._sealed(
        dataclasses.replace(record, evidence=(dataclasses.replace(item, attestation=forged), *record.evidence[1:]))
    )
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.rederive(edited)
    assert caught.value.code == "bad_signature"


def test_rederive_refuses_an_unsealed_record(desk: ControlDesk) -> None:
    record = dataclasses.replace(_approved(desk), receipt_ttl_seconds=3600)
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.rederive(record)
    assert (caught.value.code, str(caught.value)) == (
        "record_tampered",
        "the record was edited or not made by this desk",
    )


# --- the record and its seal ---------------------------------------------------------------------


def test_the_default_gate_issuer(desk: ControlDesk) -> None:
    assert ControlDesk(desk.gate, registry()).gate_issuer == "kcp-opa-gate"


def test_a_pending_record_as_a_document(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    record = desk.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    document = record.to_dict()
    assert document["authorization_status"] == "PENDING_CONTROLS"
    assert document["blocked_actions"] == ["execute_payment"]
    assert document["receipt_ttl_seconds"] == 300 == record.receipt_ttl_seconds
    (item,) = document["control_evidence"]
    assert item == {
        "control": "user_confirmation",
        "status": "PASSED",
        "actor_type": "user",
        "actor_id": "user_001",
        "evidence_reference": "ev:user_confirmation",
        "completed_at": "2026-11-29T10:01:00Z",
        "decision_id": record.decision.decision_id,
        "action_hash": record.decision.action_hash,
        "issuer": "bank-idp",
        "signature": record.evidence[0].attestation.signature.to_dict(),
    }
    assert record.passed_controls == frozenset({"user_confirmation"})
    assert document["missing_controls"] == [
        "authority_verification",
        "beneficiary_verification",
        "identity_verification",
        "independent_human_approval",
        "standard_audit_logging",
    ]


def test_an_approved_record_blocks_nothing(desk: ControlDesk) -> None:
    record = _approved(desk)
    document = record.to_dict()
    assert (document["authorization_status"], document["blocked_actions"]) == ("APPROVED", [])
    assert record.passed_controls == frozenset(c for c, _ in SIX)
    assert [e["control"] for e in document["control_evidence"]] == [c for c, _ in SIX]


def test_an_action_without_requested_action_is_blocked_by_name(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    bare = dataclasses.replace(record, action={k: v for k, v in KYA.items() if k != "requested_action"})
    assert bare.to_dict()["blocked_actions"] == [""]


@pytest.mark.parametrize(
    "edit",
    [
        {"receipt_ttl_seconds": 301},
        {"action": {**KYA, "amount": {"currency": "USD", "value_minor": 1}}},
        {"inputs": ()},  # not sealed: changing it alone keeps the seal valid
    ],
)
def test_the_seal_covers_the_record(desk: ControlDesk, edit: dict[str, Any]) -> None:
    record = desk.open(KYA, now=DECIDED)
    edited = dataclasses.replace(record, **edit)
    if "inputs" in edit:
        desk.check_seal(edited)
        return
    assert _refusal(desk, edited, signed(record, "user_confirmation", "user_001")).code == "record_tampered"


def test_the_seal_covers_trace_id_evidence_and_actor_types(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    record = desk.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    item = record.evidence[0]
    for edited in (
        dataclasses.replace(record, decision=dataclasses.replace(record.decision, trace_id="0" * 32)),
        dataclasses.replace(record, evidence=()),
        dataclasses.replace(record, evidence=(dataclasses.replace(item, actor_type="approver"),)),
        dataclasses.replace(record, prepared=dataclasses.replace(record.prepared, document={})),
    ):
        with pytest.raises(EvidenceRejectedError) as caught:
            desk.check_seal(edited)
        assert caught.value.code == "record_tampered"
    desk.check_seal(record)


def test_seal_keys(desk: ControlDesk) -> None:
    one = ControlDesk(desk.gate, registry(), seal_key=b"k" * 32)
    two = ControlDesk(desk.gate, registry(), seal_key=b"k" * 32)
    other = ControlDesk(desk.gate, registry(), seal_key=b"j" * 32)
    record = one.open(KYA, now=DECIDED)
    two.check_seal(record)
    assert record.seal == two._sealed(record).seal
    with pytest.raises(EvidenceRejectedError):
        other.check_seal(record)
    with pytest.raises(EvidenceRejectedError):  # a random key per desk by default
        ControlDesk(desk.gate, registry()).check_seal(desk.open(KYA, now=DECIDED))
    assert len(record.seal) == 64 and int(record.seal, 16) >= 0


# --- the desk's configuration --------------------------------------------------------------------


def test_a_desk_refuses_another_registry(desk: ControlDesk, tmp_path: Path) -> None:
    other = tmp_path / "registry.yaml"
    other.write_text(Path(registry().file).read_text() + "\n# another file\n")
    changed = load_trust(other)
    with pytest.raises(EvidenceRejectedError) as caught:
        ControlDesk(desk.gate, changed)
    assert caught.value.code == "registry_mismatch"
    assert str(caught.value) == (
        f"the bundle was compiled with trust registry {registry().sha256}, not {other} ({changed.sha256}):"
        f" compile with --trust {other}"
    )


def test_a_bundle_without_trust_metadata_is_refused(trust_bundle: Path) -> None:
    loaded = read_bundle(trust_bundle)
    manifest = copy.deepcopy(dict(loaded.manifest))
    del manifest["metadata"]["kcp_opa"]["trust"]
    gate = Gate(dataclasses.replace(loaded, manifest=manifest), config=GateConfig(preflight=False))
    with pytest.raises(EvidenceRejectedError) as caught:
        ControlDesk(gate, registry())
    assert caught.value.code == "registry_mismatch"
    assert str(caught.value).startswith("the bundle was compiled with trust registry None, not ")


@pytest.mark.parametrize(("ttl", "expected"), [(60, 60), (None, 300)])
def test_the_receipt_ttl_comes_from_the_matrix(trust_bundle: Path, ttl: Any, expected: int) -> None:
    loaded = read_bundle(trust_bundle)
    data = copy.deepcopy(dict(loaded.data))
    if ttl is None:
        del data["kcp_data"]["matrix"]["parameters"]["receipt_ttl_seconds"]
    else:
        data["kcp_data"]["matrix"]["parameters"]["receipt_ttl_seconds"] = ttl
    gate = Gate(dataclasses.replace(loaded, data=data), config=GateConfig(preflight=False))
    desk = ControlDesk(gate, registry())
    assert desk.receipt_ttl_seconds == expected
    assert desk.open(KYA, now=DECIDED).to_dict()["receipt_ttl_seconds"] == expected


@pytest.mark.parametrize("ttl", ["60", 60.0, True, [60]])
def test_a_receipt_ttl_of_the_wrong_type_is_refused_not_read_as_the_default(trust_bundle: Path, ttl: Any) -> None:
    """Read as absent, a receipt TTL the bundle carries as "60" gave receipts the 300 s default."""
    loaded = read_bundle(trust_bundle)
    data = copy.deepcopy(dict(loaded.data))
    data["kcp_data"]["matrix"]["parameters"]["receipt_ttl_seconds"] = ttl
    with pytest.raises(BundleError, match="kcp_data/matrix/parameters/receipt_ttl_seconds is not an integer"):
        ControlDesk(Gate(dataclasses.replace(loaded, data=data), config=GateConfig(preflight=False)), registry())


@pytest.mark.parametrize("data", [{}, {"kcp_data": {}}, {"kcp_data": {"matrix": {}}}])
def test_the_receipt_ttl_defaults_without_a_matrix(trust_bundle: Path, data: dict[str, Any]) -> None:
    loaded = read_bundle(trust_bundle)
    gate = Gate(dataclasses.replace(loaded, data={**loaded.data, **data}), config=GateConfig(preflight=False))
    if data:  # replace kcp_data by the partial one, keep the rest
        assert ControlDesk(gate, registry()).receipt_ttl_seconds == 300
    stripped = Gate(dataclasses.replace(loaded, data={}), config=GateConfig(preflight=False))
    assert ControlDesk(stripped, registry()).receipt_ttl_seconds == 300


# --- open: the gate's own attestation ------------------------------------------------------------


def test_open_freezes_a_copy_of_the_action(desk: ControlDesk) -> None:
    action = copy.deepcopy(KYA)
    record = desk.open(action, now=DECIDED)
    action["amount"]["value_minor"] = 1
    assert record.action["amount"]["value_minor"] == KYA["amount"]["value_minor"]
    assert record.decision.evaluated_at == DECIDED
    assert record.inputs == (record.prepared.document,)
    assert record.evidence == ()  # no ledger: no audit-logging attestation
    desk.check_seal(record)


def test_open_attests_standard_audit_logging_from_the_ledger(audited: ControlDesk, ledger_path: Path) -> None:
    since = _last(ledger_path)
    record = audited.open(KYA, now=DECIDED)
    decision = _events(ledger_path, since, "decision")[0]  # then the re-evaluation with the attestation
    (item,) = record.evidence
    assert (item.control, item.status, item.actor_type, item.actor_id, item.issuer) == (
        "standard_audit_logging",
        EvidenceStatus.PASSED,
        "system",
        "kcp-opa-ledger",
        "kcp-opa-gate",
    )
    assert item.evidence_reference == f"ledger:{decision['entry_hash']}"
    assert item.completed_at == decision["timestamp"]
    assert (item.decision_id, item.action_hash) == (record.decision.decision_id, record.decision.action_hash)
    assert item.attestation.signature.kid == "kcp-opa-gate-ed25519-test"
    assert "standard_audit_logging" in record.passed_controls
    assert "standard_audit_logging" not in record.decision.missing_controls
    (control,) = _events(ledger_path, since, "control")
    assert control["evidence"] == item.to_dict()


def test_open_without_a_gate_key_attests_nothing(audited: ControlDesk) -> None:
    plain = ControlDesk(audited.gate, registry())
    record = plain.open(KYA, now=DECIDED)
    assert record.evidence == ()
    # the ledger is there, so the system control counts as satisfied on re-evaluation
    record = plain.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    assert "standard_audit_logging" in record.decision.verdict.satisfied_controls


def test_a_desk_with_another_gate_issuer(audited: ControlDesk) -> None:
    desk = ControlDesk(audited.gate, registry(), gate_issuer="bank-idp", gate_key=issuer_key("bank-idp"))
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.open(KYA, now=DECIDED)
    assert caught.value.code == "issuer_not_allowed"


# --- record_control_result -----------------------------------------------------------------------


def test_a_changed_action_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    changed = {**KYA, "amount": {"currency": "USD", "value_minor": 1}}
    error = _refusal(desk, record, signed(record, "user_confirmation", "user_001"), changed)
    assert (error.code, str(error)) == (
        "action_changed",
        "the action differs from the one decided; a changed action needs a new decision",
    )


def test_a_refusal_is_audited(audited: ControlDesk, ledger_path: Path) -> None:
    record = audited.open(KYA, now=DECIDED)
    item = signed(record, "user_confirmation", "agent_payments_001")
    since = _last(ledger_path)
    error = _refusal(audited, record, item)
    (event,) = _events(ledger_path, since, "failure")
    assert (
        (event["code"], event["message"])
        == (error.code, str(error))
        == (
            "agent_cannot_satisfy_human_control",
            "user_confirmation: an AI agent cannot satisfy a human control",
        )
    )
    assert event["evidence"] == item
    assert (event["action_id"], event["trace_id"], event["passed"]) == (
        KYA["action_id"],
        record.decision.trace_id,
        True,
    )
    since = _last(ledger_path)
    assert _refusal(audited, record, ["not", "an", "object"]).code == "malformed_evidence"
    (event,) = _events(ledger_path, since, "failure")
    assert event["evidence"] == {"evidence": "['not', 'an', 'object']"}
    since = _last(ledger_path)
    _refusal(audited, record, "x" * 300)
    (event,) = _events(ledger_path, since, "failure")
    assert event["evidence"] == {"evidence": repr("x" * 300)[:200]}


def test_a_control_result_is_audited(audited: ControlDesk, ledger_path: Path) -> None:
    record = audited.open(KYA, now=DECIDED)
    since = _last(ledger_path)
    record = audited.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    (event,) = _events(ledger_path, since, "control")
    assert event["decision_id"] == record.decision.decision_id
    assert event["action_hash"] == record.decision.action_hash
    assert event["evidence"] == record.evidence[-1].to_dict()
    assert event["authorization_status"] == "PENDING_CONTROLS"
    assert event["missing_controls"] == [
        "authority_verification",
        "beneficiary_verification",
        "identity_verification",
        "independent_human_approval",
    ]
    assert (event["action_id"], event["trace_id"], event["passed"]) == (
        KYA["action_id"],
        record.decision.trace_id,
        True,
    )


def test_evidence_for_another_action_or_decision(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    other = desk.open({**KYA, "action_id": "act_other_001"}, now=DECIDED)
    same_action = desk.open(KYA, now=DECIDED)
    error = _refusal(desk, record, signed(other, "user_confirmation", "user_001"))
    assert (error.code, str(error)) == (
        "evidence_for_another_action",
        f"evidence is for action {other.decision.action_hash}, the decision is for {record.decision.action_hash}",
    )
    error = _refusal(desk, record, signed(same_action, "user_confirmation", "user_001"))
    assert (error.code, str(error)) == (
        "evidence_for_another_decision",
        f"evidence is for decision {same_action.decision.decision_id}, not {record.decision.decision_id}",
    )


def test_the_policy_judges_with_the_record_s_facts(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    # the subject confirms its own action as "user" (input.subject)
    record = desk.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    assert record.evidence[-1].actor_type == "user"
    # the subject cannot approve (input.parties)
    error = _refusal(desk, record, signed(record, "independent_human_approval", "user_001"))
    assert error.code == "self_approval"
    assert str(error).startswith("independent_human_approval: ")
    # a control the decision does not require (input.required_controls)
    error = _refusal(desk, record, signed(record, "compliance_review", "compliance_officer_omar"))
    assert error.code == "control_not_required"
    # a human without an approver role (input.approver_roles)
    error = _refusal(desk, record, signed(record, "independent_human_approval", "support_sam"))
    assert error.code == "approver_role_mismatch"


def test_a_failed_result_is_final(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    failed = signed(record, "user_confirmation", "user_001", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    assert record.evidence[-1].status is EvidenceStatus.FAILED
    assert "user_confirmation" not in record.passed_controls
    later = signed(record, "user_confirmation", "user_001", done="2026-11-29T10:05:00Z")
    assert _refusal(desk, record, later).code == "control_failed"  # input.prior
    assert "user_confirmation" in record.decision.missing_controls


def test_each_result_re_evaluates_the_decision(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    before = len(record.inputs)
    record = desk.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    assert len(record.inputs) == before + 1
    assert record.inputs[-1] == record.prepared.document
    context = record.prepared.document["context"]
    assert context["satisfied_controls"] == ["user_confirmation"]  # no ledger, no system control
    assert record.prepared.decision_id == record.decision.decision_id
    assert record.decision.evaluated_at == DECIDED


# --- parties and evidence_for --------------------------------------------------------------------


def test_parties() -> None:
    action = {
        "subject_id": "User_001",
        "agent_id": "agent_a",
        "authorization_context": {"requested_by": "requester_r"},
        "delegation_chain": [{"agent_id": "agent_b"}, "not a hop", {"agent_id": "agent_a"}, {"other": 1}],
    }
    assert parties(action) == ["agent_a", "agent_b", "requester_r", "user_001"]
    assert parties({"subject_id": "s", "authorization_context": "none", "delegation_chain": {"agent_id": "x"}}) == ["s"]
    assert parties({}) == []
    with pytest.raises(EvidenceRejectedError) as caught:
        parties({"subject_id": "s", "agent_id": "a\u200bb"})
    assert caught.value.code == "non_canonical_id"
    assert str(caught.value).startswith("the action names a party that cannot be compared: principal id ")


def test_evidence_for(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    key = issuer_key("approval-app")
    items = evidence_for(
        record,
        ["independent_human_approval", "compliance_review"],
        issuer="approval-app",
        key=key,
        actor_id="anna",
        completed_at="2026-11-29T10:01:00Z",
        reference="ev:1",
        status="FAILED",
    )
    assert [i["control"] for i in items] == ["independent_human_approval", "compliance_review"]
    first = {k: v for k, v in items[0].items() if k not in ("signature", "issuer")}
    assert first == {
        "control": "independent_human_approval",
        "status": "FAILED",
        "actor_id": "anna",
        "evidence_reference": "ev:1",
        "completed_at": "2026-11-29T10:01:00Z",
        "decision_id": record.decision.decision_id,
        "action_hash": record.decision.action_hash,
    }
    assert items[0]["issuer"] == "approval-app"
    (default,) = evidence_for(
        record, ["x"], issuer="approval-app", key=key, actor_id="a", completed_at="t", reference="r"
    )
    assert default["status"] == "PASSED"


def test_hmac_evidence_is_re_verified_with_the_desk_s_keyring(desk: ControlDesk) -> None:
    key = hmac_key("kya-gate", b"kya-gate-hmac-secret-0123456789abcdef")
    with_keyring = ControlDesk(desk.gate, registry(), keyring=Keyring({"kya-gate": key}))
    record = with_keyring.open(KYA, now=DECIDED)
    (item,) = evidence_for(
        record,
        ["identity_verification"],
        issuer="kya-reference-gate",
        key=key,
        actor_id="kyc-provider",
        completed_at="2026-11-29T10:01:00Z",
        reference="ev:hmac",
    )
    record = with_keyring.record_control_result(record, item, action=KYA)
    again = with_keyring.rederive(record)  # verified again with the same keyring
    assert [(e.issuer, e.control) for e in again.evidence] == [("kya-reference-gate", "identity_verification")]
    assert "identity_verification" in again.passed_controls


def test_rederive_rebuilds_each_item_from_its_attestation(desk: ControlDesk) -> None:
    record = _approved(desk)
    item = record.evidence[-1]
    relabelled = desk._sealed(
        dataclasses.replace(
            record, evidence=(*record.evidence[:-1], dataclasses.replace(item, actor_type="user", issuer="x"))
        )
    )
    again = desk.rederive(relabelled)
    assert (again.evidence[-1].actor_type, again.evidence[-1].issuer) == (item.actor_type, item.issuer)
    assert [e.to_dict() for e in again.evidence] == [e.to_dict() for e in record.evidence]


def test_a_desk_s_own_seal_key_is_32_random_bytes(desk: ControlDesk) -> None:
    keys = {ControlDesk(desk.gate, registry())._seal_key for _ in range(3)}
    assert len(keys) == 3 and {len(k) for k in keys} == {32}


def test_the_desk_plans_its_evidence_query_into_the_gate_s_plan_cache(trust_bundle: Path, tmp_path: Path) -> None:
    gate = vouched_gate(trust_bundle, preflight=False, plan_cache=tmp_path)
    assert len(list(tmp_path.glob("*.rbb"))) == 1  # the decision entrypoint
    ControlDesk(gate, registry())
    assert len(list(tmp_path.glob("*.rbb"))) == 2  # and kcp/controls/verdict beside it


def test_a_control_answer_re_decides_linked_and_a_refusal_names_its_entry(
    audited: ControlDesk, ledger_path: Path
) -> None:
    """Reports count a control answer's re-decision as one (linked to its decision) and a refused
    answer once: the error carries the seq of the entry that records it, for the service to name."""
    record = audited.open(KYA, now=DECIDED)
    since = _last(ledger_path)
    record = audited.record_control_result(record, signed(record, "user_confirmation", "user_001"), action=KYA)
    (redecided,) = _events(ledger_path, since, "decision")
    decision_id = record.decision.decision_id
    assert (redecided["decision_id"], redecided["original_decision_id"]) == (decision_id, decision_id)
    assert redecided["redecision"] == "control_answer"
    since = _last(ledger_path)
    error = _refusal(audited, record, signed(record, "authority_verification", "agent_payments_001"))
    (event,) = _events(ledger_path, since, "failure")
    assert error.ledger_seq == event["seq"]
