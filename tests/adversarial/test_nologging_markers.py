"""Attack class: no-logging leaks. A unique marker in every string of an action and of its
evidence; under no-logging none reaches the raw ledger bytes except in the documented
allow-list of non-content fields (kcp_opa/trail/redaction.py), for every event type."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import trustkit
from conftest import receipt_for, vouched_gate

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import EvidenceRejectedError, ExecutionError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.ledger import AuditLedger
from kcp_opa.trail.redaction import ACTION_FIELDS

REPO = Path(__file__).resolve().parents[2]
NOW = "2026-11-29T10:00:00Z"
ACTION: dict[str, Any] = {
    "schema_version": "2.0",
    "action_id": "act_co_nolog",
    "idempotency_key": "idem_co_nolog_0001",
    "tenant_id": "bank_eu",
    "subject_id": "applicant_42",
    "agent_id": "customer-onboarding-agent/v2.3",
    "scenario": "customer onboarding, free text",
    "action_type": "read",
    "requested_action": "kyc.read_applicant",
    "target": {
        "type": "customer_record",
        "reference": "applicant_42",
        "tenant_id": "bank_eu",
        "account_fingerprint": "fp",
    },
    "authorization_context": {
        "requested_by": "applicant_42",
        "authenticated_principal": "applicant_42",
        "principal_scopes": ["compliance:gdpr"],
        "agent_scope": ["kyc.read_applicant"],
        "session_id": "sess",
        "actor_role": "onboarding_agent",
    },
    "evidence_references": ["crm:1", "doc:2"],
    "attributes": {"customer_notes": "notes", "nested": {"deeper": ["a", "b"]}},
    "knowledge": {
        "project": "customer-onboarding",
        "unit": "gdpr_data_minimisation",
        "fields_read": ["email", "name"],
        "purpose": "kyc",
    },
    "runtime": {
        "deployment_region": "EEA",
        "model": {"id": "onboarding-llm-3", "hosting": "self_hosted"},
        "risk_level": "low",
        "evidence_status": "present",
        "budget_state": "within_budget",
        "prompt": "the user's prompt",
    },
    "trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=state"},
    "created_at": "2026-11-29T09:58:00Z",
}


def _allowed(path: tuple[str, ...]) -> bool:
    spec: Any = ACTION_FIELDS
    for part in path:
        if spec is True:
            return True
        if isinstance(spec, list):
            spec = spec[0]
            if part.isdigit():
                continue
        if not isinstance(spec, dict) or part not in spec:
            return False
        spec = spec[part]
    return spec is True


def _plant(value: Any, path: tuple[str, ...], markers: list[str]) -> Any:
    """Every string that is not allow-listed becomes a unique marker (keys too)."""
    if isinstance(value, dict):
        planted = {}
        for key, item in value.items():
            new_key = f"{key}_MKK{len(markers)}" if path[:1] == ("attributes",) else key  # free-form keys
            if new_key != key:
                markers.append(new_key.rsplit("_", 1)[1])
            planted[new_key] = _plant(item, (*path, key), markers)
        return planted
    if isinstance(value, list):
        return [_plant(item, (*path, str(i)), markers) for i, item in enumerate(value)]
    if isinstance(value, str) and not _allowed(path):
        marker = f"MKV{len(markers)}Z"
        markers.append(marker)
        return f"{marker}:{value}"
    return value


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nolog") / "co.tar.gz"
    base = REPO / "fixtures" / "deployments" / "customer-onboarding"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        REPO / "policies",
        out,
        options=CompileOptions(trust_path=trustkit.REGISTRY),
    )
    return out


def test_no_marker_of_action_or_evidence_reaches_the_ledger(bundle: Path, tmp_path: Path) -> None:
    markers: list[str] = []
    action = _plant(copy.deepcopy(ACTION), (), markers)
    assert len(markers) >= 10
    ledger = tmp_path / "ledger.jsonl"
    gate = vouched_gate(bundle, ledger=AuditLedger(ledger))
    desk = trustkit.make_desk(gate)
    record = desk.open(action, now=NOW)  # decision event
    assert record.decision.decision.value == "HUMAN_APPROVAL"
    good = trustkit.signed(
        record, "independent_human_approval", "onboarding_supervisor_olga", reference="evidence:MKE1Z-approval-ticket"
    )
    record = desk.record_control_result(record, good, action=action)  # control event
    bad = trustkit.signed(
        record, "independent_human_approval", "agent_payments_001", reference="evidence:MKE2Z-by-an-agent"
    )
    with pytest.raises(EvidenceRejectedError):
        desk.record_control_result(record, bad, action=action)  # failure event
    markers += ["MKE1Z", "MKE2Z"]
    # Receipt and execution events as the desk and the executor write them, with content-bearing
    # extras (an exception message, a handler outcome).
    assert gate.audit is not None
    gate.audit.event(
        "receipt", action, record.decision, receipt_id="rcpt_1", approver_ids=["approver_9"], note="MKR1Z receipt note"
    )
    gate.audit.event(
        "execution", action, None, idempotency_key=action["idempotency_key"], outcome="MKX1Z paid", replayed=False
    )
    gate.audit.event("failure", action, None, code="handler_failed", message="MKF1Z: card 4111 declined")
    markers += ["MKR1Z", "MKX1Z", "MKF1Z"]
    # The executor's own entries, for real: an intent and its outcome, then an intent and a failure.
    _execute(gate.audit, action, tmp_path, lambda a: {"paid": "MKX2Z"})
    failing = {**action, "idempotency_key": "idem_co_nolog_0002"}
    with pytest.raises(ExecutionError):
        _execute(gate.audit, failing, tmp_path, lambda a: (_ for _ in ()).throw(RuntimeError("MKF2Z declined")))
    markers += ["MKX2Z", "MKF2Z"]
    raw = ledger.read_bytes()
    leaked = sorted({m for m in markers if m.encode() in raw})
    assert not leaked, f"no-logging content in the ledger: {leaked}"
    lines = [json.loads(line) for line in raw.splitlines()]
    assert "kcp_opa_ledger" in lines[0]  # the ledger's header line names no content either
    entries = lines[1:]
    assert {e["type"] for e in entries} == {"decision", "control", "failure", "receipt", "intent", "execution"}
    intents = [e for e in entries if e["type"] == "intent"]
    assert [e["idempotency_key"] for e in intents] == ["idem_co_nolog_0001", "idem_co_nolog_0002"]
    assert [e["intent_seq"] for e in entries if e.get("intent_seq")] == [i["seq"] for i in intents]
    for entry in entries:
        assert entry["kcp_unit_applied"] == "customer-onboarding/gdpr_data_minimisation"  # the access is recorded
        assert "erased" in entry, entry["type"]  # every entry went through the allow-list
    # content was there to erase in all but the executor's intents and executions (ids only)
    assert all(e["erased"] for e in entries if e["type"] in {"decision", "control", "receipt", "failure"})
    assert "/input/runtime/prompt" not in entries[0]["erased"]  # pointers are exact, under /input/action
    assert "/input/action/runtime/prompt" in entries[0]["erased"]
    assert any(re.fullmatch(r"/input/action/attributes", p) for p in entries[0]["erased"])


def _execute(audit: Any, action: dict[str, Any], tmp_path: Path, handler: Any) -> Any:
    """Run ``action`` through a real executor writing to ``audit`` (a receipt signed for it)."""
    key = hmac_key("nolog-1", b"nolog-executor-secret-0123456789abcdef")
    decision = {
        "decision_id": "dec_nolog_exec",
        "action_hash": action_hash(action),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    executor = Executor(
        keyring=Keyring({"nolog-1": key}, "nolog-1"),
        policy_versions={"0.1.0"},
        store=SQLiteStore(tmp_path / "exec.db"),
        audit=audit,
    )
    return executor.execute_authorized_action(action, receipt_for(decision, action, key), handler)


def test_audit_replay_reports_the_erased_decision_as_not_reproducible(bundle: Path, tmp_path: Path) -> None:
    from kcp_opa.audit.auditor import replay

    ledger = tmp_path / "ledger.jsonl"
    vouched_gate(bundle, ledger=AuditLedger(ledger)).decide(ACTION, now=NOW)
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / bundle.name).write_bytes(bundle.read_bytes())
    report = replay(ledger, bundles).to_dict()
    assert report["decisions"] == 1, report
    assert len(report["erased_unverifiable"]) == 2 and not report["mismatches"] and not report["reproduced"]
