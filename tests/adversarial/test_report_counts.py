"""The report counts what happened, however many ledger entries each step writes, and agrees with /metrics.

A real `kcp-opa serve` (file ledger): two payments are decided, their controls answered, receipts
issued and executed, and each receipt replayed (an agent probing for a second execution); a third
payment stays pending after its subject tries to approve it itself (refused by the policy). Every
one of those steps re-decides or records a refusal; the report must still say 3 decisions (each
re-decision listed as one, linked to its decision), one refusal per refused call, and the same
figures as the service's /metrics for the same period.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from uikit import KYA, _action, _api, _pending_payment, ui_servers

from kcp_opa.audit.summary import LedgerSummary, summarize
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.trail.ledger import AuditLedger, read_entries


def _metric(text: str, name: str, label: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for value_label, value in re.findall(rf'^{name}_total\{{{label}="([^"]+)"\}} ([0-9.e+]+)$', text, re.MULTILINE):
        found[value_label] = int(float(value))
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with ui_servers(tmp_path_factory.mktemp("report-counts")) as (server,):
        executed: list[str] = []
        for name in ("one", "two"):
            action = _action(f"counted_{name}")
            decision_id, ids = _pending_payment(server, action)
            approval = {"status": "PASSED", "evidence_reference": f"call:anna-{name}"}
            answered = _api(
                server, "approver", "POST", f"/v1/challenges/{ids['independent_human_approval']}/result", approval
            )
            assert answered.status_code == 200, answered.text
            issued = _api(server, "issuer", "POST", "/v1/receipts", {"decision_id": decision_id})
            assert issued.status_code == 200, issued.text
            run = {"action": action, "receipt": issued.json()["receipt"], "handler": "pay"}
            assert _api(server, "executor", "POST", "/v1/executions", run).status_code == 200
            replayed = _api(server, "executor", "POST", "/v1/executions", run)  # the same receipt again
            assert replayed.status_code == 409 and replayed.json()["code"] == "replay", replayed.text
            executed.append(decision_id)
        pending, ids = _pending_payment(server, _action("counted_pending"))
        own = {"status": "PASSED", "evidence_reference": "self-approval"}  # the subject approving its own payment
        refused = _api(server, "subject", "POST", f"/v1/challenges/{ids['independent_human_approval']}/result", own)
        assert refused.status_code >= 400, refused.text
        metrics = _api(server, "auditor", "GET", "/metrics")
        assert metrics.status_code == 200, metrics.text
        yield {
            "summary": summarize(server["ledger"]),
            "ledger": Path(server["ledger"]),
            "metrics": metrics.text,
            "executed": executed,
            "pending": pending,
            "refused_code": refused.json()["code"],
        }


def test_two_payments_approved_and_executed_are_two_decisions_with_their_redecisions(run: dict[str, Any]) -> None:
    summary: LedgerSummary = run["summary"]
    executed, pending = run["executed"], run["pending"]
    assert summary.decisions == 3, summary.to_dict()["by_state"]
    assert set(summary.final) == {*executed, pending}
    assert summary.by_status == Counter({"APPROVED": 2, "PENDING_CONTROLS": 1})
    assert summary.by_model == Counter({"treasury-llm": 3})  # the registry's model, not "(none)"
    # Every re-decision is listed as one, linked to the decision it re-decides.
    assert {r["original_decision_id"] for r in summary.redecisions} == {*executed, pending}
    for decision_id in executed:
        at_execution = [
            r for r in summary.redecisions if r["original_decision_id"] == decision_id and r["step"] == "execution"
        ]
        assert len(at_execution) == 2  # the execution and the refused replay each re-decided it
        assert all(r["decision_id"] != decision_id for r in at_execution)  # under ids of their own
        assert (
            sum(1 for r in summary.redecisions if r["decision_id"] == decision_id and r["step"] == "control_answer")
            >= 4
        )
    assert summary.redecisions_by_step["execution"] == 4 and summary.redecisions_by_step["receipt_issue"] == 2
    assert summary.refusals == Counter({"replay": 2, run["refused_code"]: 1})
    assert summary.executions == 2 and summary.receipts == 2


def test_the_execution_entry_names_its_decision_and_outcome(run: dict[str, Any]) -> None:
    outcomes = [e for _, e in read_entries(run["ledger"]) if e.get("type") in ("intent", "execution")]
    assert [e.get("decision_id") for e in outcomes] == [d for d in run["executed"] for _ in range(2)]
    assert [e.get("outcome") for e in outcomes if e["type"] == "execution"] == ["succeeded", "succeeded"]


def test_every_count_in_the_report_equals_metrics_for_the_same_period(run: dict[str, Any]) -> None:
    summary: LedgerSummary = run["summary"]
    decided, refusals = (
        _metric(run["metrics"], "kcp_opa_decisions", "state"),
        _metric(run["metrics"], "kcp_opa_refusals", "code"),
    )
    assert sum(decided.values()) == summary.decisions
    assert decided == summary.by_state
    assert refusals == summary.refusals
    assert sum(refusals.values()) == sum(summary.refusals.values()) == len(summary.refusal_rows)
    # A replay is recorded twice (by the executor, then by the service refusing the call), counted once;
    # the self-approval is refused by the service alone (one entry).
    linked = [e for _, e in read_entries(run["ledger"]) if e.get("type") == "failure" and "refusal_seq" in e]
    assert [e["code"] for e in linked] == ["replay", "replay"]


def test_the_report_shows_the_policy_version_timeline(run: dict[str, Any]) -> None:
    summary: LedgerSummary = run["summary"]
    entries = [e for _, e in read_entries(run["ledger"]) if isinstance(e.get("bundles"), dict)]
    (version,) = summary.policy_timeline
    assert version["revision"] == entries[0]["bundles"]["kcp-opa"]["revision"]
    assert (version["first_seen"]["seq"], version["last_seen"]["seq"]) == (entries[0]["seq"], entries[-1]["seq"])
    assert version["decision_entries"] == summary.decisions + len(summary.redecisions)


def test_a_decision_relabelled_as_a_re_decision_is_refused_before_it_is_recorded(
    finance_bundle: Path, tmp_path: Path
) -> None:
    """A caller hiding a decision from the count (marking its prepared input a re-decision of another) is refused."""
    ledger = tmp_path / "gate.jsonl"
    gate = Gate.from_bundle(finance_bundle, config=GateConfig(ledger=AuditLedger(ledger)))
    prepared = gate.prepare(KYA, now="2026-11-29T10:00:00Z")
    hidden = replace(prepared, redecision="execution", original_decision_id="dec_someone_elses")
    with pytest.raises(ActionRejectedError, match="edited after prepare"):
        gate.decide_prepared(hidden)
    gate.decide_prepared(prepared)
    assert summarize(ledger).decisions == 1 and not summarize(ledger).redecisions
