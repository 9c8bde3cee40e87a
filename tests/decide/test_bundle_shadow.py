"""Shadow evaluation: a candidate bundle beside the active one on live decisions, never deciding;
its differences in the ledger and `kcp-opa audit shadow-report` (JSON and Markdown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli, vouched_gate

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.trail.ledger import AuditLedger, read_entries

FINANCE = DEPLOYMENTS / "finance"
CASES = {c.case_id: c for c in load_cases(REPO / "fixtures" / "cases" / "finance.yaml")}


def _compile(out: Path, matrix: Path, revision: str) -> Path:
    compile_bundle([FINANCE / "knowledge.yaml"], matrix, POLICIES, out, options=CompileOptions(revision=revision))
    return out


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("shadow")
    matrix = yaml.safe_load((FINANCE / "matrix.yaml").read_text())
    matrix["parameters"]["money"]["high_value_minor"]["USD"] = 900_000_000  # the candidate's looser threshold
    looser = work / "matrix-looser.yaml"
    looser.write_text(yaml.safe_dump(matrix, sort_keys=False))
    return {
        "active": _compile(work / "active.tar.gz", FINANCE / "matrix.yaml", "finance-1"),
        "same": _compile(work / "same.tar.gz", FINANCE / "matrix.yaml", "finance-1-rebuilt"),
        "looser": _compile(work / "looser.tar.gz", looser, "finance-2-candidate"),
    }


def test_a_shadow_never_decides_and_records_only_differences(tmp_path: Path, bundles: dict[str, Path]) -> None:
    ledger = tmp_path / "audit.jsonl"
    gate = vouched_gate(bundles["active"], ledger=AuditLedger(ledger))
    candidate = gate.set_shadow(bundles["looser"])
    assert candidate is not None and candidate.revision == "finance-2-candidate"
    live = {
        case_id: gate.decide(CASES[case_id].action, now=CASES[case_id].now).decision.value
        for case_id in ("fin-threshold-exactly", "fin-just-below-threshold", "fin-withdrawal-needs-identity")
    }
    assert live == {  # the active bundle decided, as without a shadow
        "fin-threshold-exactly": "HUMAN_APPROVAL",
        "fin-just-below-threshold": "USER_CONFIRMATION",
        "fin-withdrawal-needs-identity": "IDENTITY_VERIFICATION",
    }
    entries = [e for _, e in read_entries(ledger)]
    decisions = [e for e in entries if e["type"] == "decision"]
    shadows = [e for e in entries if e["type"] == "shadow"]
    assert all(e["labels"]["shadow"] == candidate.sha256 for e in decisions) and len(decisions) == 3
    assert len(shadows) == 1
    (entry,) = shadows
    assert entry["decision_id"] == decisions[0]["decision_id"] and entry["weakens"] is True
    assert (entry["active"]["decision"], entry["candidate"]["decision"]) == ("HUMAN_APPROVAL", "USER_CONFIRMATION")
    assert "high_value" in entry["active"]["reason_codes"] and "high_value" not in entry["candidate"]["reason_codes"]
    assert entry["bundles"]["kcp-opa"]["revision"] == "finance-1"

    report = run_cli("audit", "shadow-report", str(ledger))
    assert report.returncode == 0, report.stderr
    (summary,) = json.loads(report.stdout)["candidates"]
    assert summary["sha256"] == candidate.sha256 and summary["revision"] == "finance-2-candidate"
    assert (summary["decisions"], summary["changed"], summary["weakened"]) == (3, 1, 1)
    assert summary["transitions"] == {"HUMAN_APPROVAL -> USER_CONFIRMATION": 1}
    markdown = run_cli("audit", "shadow-report", str(ledger), "--format", "markdown").stdout
    assert "would weaken: 1" in markdown and "| HUMAN_APPROVAL -> USER_CONFIRMATION | 1 |" in markdown


def test_an_identical_candidate_changes_nothing(tmp_path: Path, bundles: dict[str, Path]) -> None:
    ledger = tmp_path / "audit.jsonl"
    gate = vouched_gate(bundles["active"], ledger=AuditLedger(ledger))
    gate.set_shadow(bundles["same"])
    for case in CASES.values():
        gate.decide(case.action, now=case.now)
    assert not [e for _, e in read_entries(ledger) if e["type"] == "shadow"]
    gate.set_shadow(None)
    gate.decide(CASES["fin-threshold-exactly"].action, now=CASES["fin-threshold-exactly"].now)
    last = [e for _, e in read_entries(ledger) if e["type"] == "decision"][-1]
    assert "shadow" not in last["labels"]


def test_serve_in_log_only_with_a_shadow(tmp_path: Path, bundles: dict[str, Path]) -> None:
    """A real server: `--mode log_only` is recorded at start and told to callers; `--shadow-bundle` shadows."""
    import httpx2
    from servicekit import start_server, stop_server

    ledger = tmp_path / "l.jsonl"
    token = "t-agent-" + "b" * 32
    args = ["--bundle", str(bundles["active"]), "--store", str(tmp_path / "s.db"), "--ledger", str(ledger)]
    args += ["--mode", "log_only", "--shadow-bundle", str(bundles["looser"])]
    process, base = start_server(args, env={"KCP_OPA_SERVE_TOKEN": token})
    headers = {"Authorization": f"Bearer {token}"}
    case = CASES["fin-threshold-exactly"]
    try:
        assert httpx2.get(f"{base}/v1/status", headers=headers, timeout=30).json()["mode"]["mode"] == "log_only"
        action = json.loads(json.dumps(case.action))
        for name in ("authenticated_principal", "principal_scopes"):  # the caller is local-agent, no scopes
            del action["authorization_context"][name]
        action["agent_id"] = "local-agent"  # who acts is the caller
        body = {"action": action}  # the service takes its own clock
        decided = httpx2.post(f"{base}/v1/decisions", json=body, headers=headers, timeout=60).json()
        assert decided.get("mode") == "log_only" and decided["enforced"] is False, decided
    finally:
        stop_server(process)
    types = [e["type"] for _, e in read_entries(ledger)]
    assert "mode_change" in types and "shadow" in types
