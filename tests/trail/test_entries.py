"""Whom a decision entry is attributed to: the principal it was decided for, else the stated
agent marked unauthenticated (``kcp_opa.trail.entries.attribution``), and how reports show it."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import REPO, VOUCH, run_cli

from kcp_opa.audit.rows import row
from kcp_opa.audit.summary import summarize
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.trail.entries import attribution
from kcp_opa.trail.ledger import AuditLedger, read_entries

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
NOW = "2026-11-29T10:00:00Z"


def test_attribution_prefers_the_principal_and_keeps_a_differing_spelling() -> None:
    action = {"agent_id": "Agent_Payments_001"}
    with_principal = {"context": {"facts_principal": "agent_payments_001"}}
    assert attribution(with_principal, action) == {
        "agent_id": "agent_payments_001",
        "stated_agent_id": "Agent_Payments_001",
    }
    assert attribution(with_principal, {"agent_id": "agent_payments_001"}) == {"agent_id": "agent_payments_001"}
    # No principal, or one the action does not name (a vouching host's stand-in): nothing vouches.
    for unvouched in ({"context": {"facts_principal": None}}, {"context": {}}, {}):
        assert attribution(unvouched, action) == {"agent_id": "Agent_Payments_001", "unauthenticated": True}
    stand_in = {"context": {"facts_principal": "case-agent"}}
    assert attribution(stand_in, action) == {"agent_id": "Agent_Payments_001", "unauthenticated": True}
    assert attribution(with_principal, {"agent_id": "agent\u200b_payments_001"})["unauthenticated"] is True


def test_the_cli_decide_ledger_names_the_stated_agent_as_unauthenticated(finance_bundle: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "decide.jsonl"
    action = REPO / "fixtures" / "kya-supplier-payment-action.json"
    decided = run_cli(
        "decide", *VOUCH, "-b", str(finance_bundle), "-i", str(action), "--now", NOW, "--ledger", str(ledger)
    )
    assert decided.returncode == 0, decided.stderr
    (entry,) = [e for _, e in read_entries(ledger) if e["type"] == "decision"]
    assert entry["agent_id"] == "agent_payments_001" and entry["unauthenticated"] is True
    assert "stated_agent_id" not in entry  # the vouched context's stand-in principal is not the agent
    report = run_cli("audit", "report", str(ledger), "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["by_agent"] == {"agent_payments_001 (unauthenticated)": 1}
    assert row(entry)["who"] == "agent_payments_001 (unauthenticated)"


def test_a_library_decision_for_a_principal_is_attributed_to_it(finance_bundle: Path, tmp_path: Path) -> None:
    path = tmp_path / "gate.jsonl"
    gate = Gate.from_bundle(finance_bundle, config=GateConfig(ledger=AuditLedger(path)))
    gate.decide({**KYA, "agent_id": "AGENT_payments_001"}, now=NOW, principal="agent_payments_001")
    (entry,) = [e for _, e in read_entries(path) if e["type"] == "decision"]
    assert entry["agent_id"] == "agent_payments_001" and entry["stated_agent_id"] == "AGENT_payments_001"
    assert "unauthenticated" not in entry
    assert summarize(path).by_agent == {"agent_payments_001": 1}
