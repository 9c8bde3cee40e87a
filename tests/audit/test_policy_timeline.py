"""The report's policy-version timeline: each bundle revision the ledger's entries name, first seen
to last seen, so a reload shows as a row of its own (not only inside a refusal's message)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.audit.report import render_html
from kcp_opa.audit.summary import entries_by_decision, summarize
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.trail.ledger import AuditLedger, read_entries

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
NOW = "2026-11-29T10:00:00Z"


def _bundle(out: Path, revision: str) -> Path:
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(revision=revision)
    )
    return out


def test_a_reload_shows_as_a_new_revision_first_and_last_seen(tmp_path: Path) -> None:
    ledger = tmp_path / "gate.jsonl"
    gate = Gate.from_bundle(
        _bundle(tmp_path / "a.tar.gz", "finance-2026-11-a"), config=GateConfig(ledger=AuditLedger(ledger))
    )
    for n in range(2):
        gate.decide({**KYA, "action_id": f"act_before_{n}"}, now=NOW)
    gate.activate(_bundle(tmp_path / "b.tar.gz", "finance-2026-11-b"))  # the reload
    gate.decide({**KYA, "action_id": "act_after"}, now=NOW)

    summary = summarize(ledger)
    seqs = [e["seq"] for _, e in read_entries(ledger) if e.get("type") == "decision"]
    assert [
        (t["revision"], t["first_seen"]["seq"], t["last_seen"]["seq"], t["decision_entries"])
        for t in summary.policy_timeline
    ] == [
        ("finance-2026-11-a", seqs[0], seqs[1], 2),
        ("finance-2026-11-b", seqs[2], seqs[2], 1),
    ]
    assert summary.decisions == 3 and not summary.redecisions  # three originals, nothing re-decided
    page = render_html(summary, entries_by_decision=entries_by_decision(ledger), charts=False)
    section = page[page.index("<h2>Policy versions</h2>") :]
    assert section.index("finance-2026-11-a") < section.index("finance-2026-11-b")
