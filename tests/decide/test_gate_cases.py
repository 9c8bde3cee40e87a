"""The gate decision on the compiled reference bundles, on regopy and on OPA: same answer.

A first slice of the decision-case corpus (issue 3): the contract's worked examples.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from actionkit import support_read, with_
from conftest import DEPLOYMENTS, POLICIES, REPO, SHARED, opa_query, regopy_query, vouched_context

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle

KYA_ACTION = REPO / "fixtures" / "kya-supplier-payment-action.json"
TODAY = (dt.date(2026, 11, 29) - dt.date(1970, 1, 1)).days


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedBundle]:
    out = tmp_path_factory.mktemp("bundles")
    loaded = {}
    for name in ("customer-onboarding", "support-desk", "finance"):
        base = DEPLOYMENTS / name
        path = out / f"{name}.tar.gz"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, path)
        loaded[name] = read_bundle(path)
    return loaded


def _decide(bundle: LoadedBundle, action: dict[str, Any]) -> dict[str, Any]:
    # The clock the gate puts in input (decision time, and the action created a minute before).
    now = TODAY * 86400 + 36000
    clock = {"decision_epoch_day": TODAY, "decision_epoch_seconds": now, "action_created_epoch_seconds": now - 60}
    doc = {"action": action, "context": {**clock, **vouched_context(action, "2026-11-29T10:00:00Z")}}
    on_regopy = regopy_query(bundle, "data.kcp.gate.decision", doc)
    on_opa = opa_query(bundle, "data.kcp.gate.decision", doc)
    assert on_regopy == on_opa, f"engines diverge:\nregopy {on_regopy}\nopa    {on_opa}"
    decision: dict[str, Any] = on_opa
    return decision


def test_kya_supplier_payment_worked_example(bundles: dict[str, LoadedBundle]) -> None:
    action = json.loads(KYA_ACTION.read_text())
    d = _decide(bundles["finance"], action)
    assert d["decision"] == "HUMAN_APPROVAL"
    assert d["risk_level"] == "HIGH"
    assert d["required_controls"] == sorted(
        [
            "standard_audit_logging",
            "user_confirmation",
            "identity_verification",
            "authority_verification",
            "beneficiary_verification",
            "independent_human_approval",
        ]
    )
    assert d["execution_allowed"] is False


def test_gdpr_minimisation_denies_phone(bundles: dict[str, LoadedBundle]) -> None:
    action = with_(
        support_read(),
        {"runtime.deployment_region": "EEA"},
        knowledge={
            "project": "customer-onboarding",
            "unit": "gdpr_data_minimisation",
            "fields_read": ["email", "name", "phone"],
        },
    )
    d = _decide(bundles["customer-onboarding"], action)
    assert d["decision"] == "DENY"
    assert d["violations"] == [
        {"evaluator_id": "field_access_check", "code": "field_access_violation", "fields": ["phone"]}
    ]
    assert "redact_content" in d["obligations"] and "audit" in d["obligations"]


def test_clean_support_read_is_allowed(bundles: dict[str, LoadedBundle]) -> None:
    d = _decide(bundles["support-desk"], support_read())
    assert d["decision"] == "ALLOW"
    assert d["reason_codes"] == ["policy_passed"]
    assert d["missing_controls"] == ["standard_audit_logging"]


def test_cross_tenant_read_is_denied(bundles: dict[str, LoadedBundle]) -> None:
    action = with_(support_read(), {"target.tenant_id": "tenant_b"})
    d = _decide(bundles["support-desk"], action)
    assert d["decision"] == "DENY"
    assert d["reason_codes"] == ["tenant_boundary"]
    assert d["reasons"][0]["unit"] == "support-desk/customer-records"
    assert d["execution_allowed"] is False


def test_tenant_breach_and_high_risk_refund_lists_both(bundles: dict[str, LoadedBundle]) -> None:
    action = with_(
        support_read(),
        {"runtime.risk_level": "high"},
        action_type="refund",
        requested_action="billing.refund",
        amount={"value_minor": 2500, "currency": "EUR"},
        target={"type": "refund", "reference": "ord_1", "tenant_id": "tenant_b"},
        knowledge={"project": "support-desk", "unit": "refunds", "fields_read": ["order_id", "amount"]},
    )
    d = _decide(bundles["support-desk"], action)
    assert d["decision"] == "DENY"
    assert {"tenant_boundary", "refund_requires_review"} <= set(d["reason_codes"])
    # A DENY invites no approval: no approver, no controls to collect (docs/contract.md).
    assert d["approver_roles"] == [] and d["missing_controls"] == [] and d["required_controls"] == []


def test_unknown_unit_fails_closed(bundles: dict[str, LoadedBundle]) -> None:
    action = with_(support_read(), {"knowledge.unit": "no-such-unit", "knowledge.fields_read": []})
    d = _decide(bundles["support-desk"], action)
    assert d["decision"] == "DENY"
    assert "unknown_unit" in d["reason_codes"]


def test_kya_fixture_is_the_reference_one_with_its_known_hash() -> None:
    """The vendored copy is byte-identical to shared/ (when present) and hashes to the
    contract's KYA-CJ-1 known answer."""
    import hashlib

    shared_copy = SHARED / "fixtures" / "kya-supplier-payment-action.json"
    if shared_copy.exists():
        assert shared_copy.read_bytes() == KYA_ACTION.read_bytes()
    action = json.loads(KYA_ACTION.read_text())
    canonical = json.dumps(action, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    digest = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert digest == "sha256:29a918d0341fc6c5fa77914b24525c23becdeef3de7db8e6171f2ebeecc8bf2b"
