"""Behaviour tests for kcp_opa/authorize/controls.py that kill mutmut survivors (docs/testing.md).

The desk needs a real Gate over a bundle compiled with the trust registry (once per module).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from conftest import REPO
from trustkit import compile_with_trust, make_desk, registry, signed

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.core.errors import ReceiptIssueError
from kcp_opa.core.signing import hmac_key
from kcp_opa.decide.gate import Gate

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
DECIDED = "2026-11-29T10:00:00Z"
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
SIX = [
    ("standard_audit_logging", "kcp-opa-ledger"),
    ("user_confirmation", "user_001"),
    ("identity_verification", "kyc-provider"),
    ("authority_verification", "scope-service"),
    ("beneficiary_verification", "bank-registry"),
    ("independent_human_approval", "treasury_approver_anna"),
]
KEY = hmac_key("kya-1", b"mutant-controls-secret-0123456789abcdef")


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> ControlDesk:
    return make_desk(Gate.from_bundle(compile_with_trust(tmp_path_factory.mktemp("mc") / "finance.tar.gz")))


def _approved(desk: ControlDesk) -> GateDecision:
    record = desk.open(KYA, now=DECIDED)
    for control, actor in SIX:
        record = desk.record_control_result(record, signed(record, control, actor), action=KYA)
    return record


def test_issue_passes_the_ttl_and_the_clock_through(desk: ControlDesk) -> None:
    receipt = desk.issue(_approved(desk), KEY, ttl_seconds=60, now=ISSUED)
    assert (receipt["issued_at"], receipt["expires_at"]) == ("2026-11-29T10:02:00Z", "2026-11-29T10:03:00Z")


def test_a_record_that_does_not_stand_is_named(desk: ControlDesk) -> None:
    record = _approved(desk)
    edited = dataclasses.replace(record, seal="0" * 64)
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(edited, KEY, now=ISSUED)
    assert str(caught.value).startswith("the record does not stand: ")


def test_rederive_without_evidence(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    again = desk.rederive(record)
    assert again.decision.decision == record.decision.decision
    assert again.decision.missing_controls == record.decision.missing_controls


def test_the_default_gate_issuer(desk: ControlDesk) -> None:
    assert ControlDesk(desk.gate, registry()).gate_issuer == "kcp-opa-gate"
