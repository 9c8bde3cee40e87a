"""`kcp-opa decide` and `kcp-opa eval` as a shell or CI job meets them: the flags, the usage errors,
one-line messages (issues 17 and 32). Real command processes."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import REPO, VOUCH, run_cli
from deploykit import HR_LEAVE as HR

from kcp_opa.authoring.cases import load_cases


def test_a_bad_now_is_a_usage_error_not_a_refused_action(finance_bundle: Path) -> None:
    action = REPO / "fixtures" / "kya-supplier-payment-action.json"
    proc = run_cli("decide", *VOUCH, "-b", str(finance_bundle), "-i", str(action), "--now", "yesterday")
    assert proc.returncode == 2
    assert "Invalid value for '--now'" in proc.stderr and "RFC 3339" in proc.stderr
    assert proc.stdout == ""
    receipt = run_cli("receipt", "hash", "--action", str(action))
    assert receipt.returncode == 0


def test_decide_takes_action_like_receipt_and_prints_text_on_request(finance_bundle: Path) -> None:
    action = REPO / "fixtures" / "kya-supplier-payment-action.json"
    base = ("decide", *VOUCH, "-b", str(finance_bundle), "--now", "2026-11-29T10:00:00Z")
    proc = run_cli(*base, "--action", str(action), "--format", "text")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("HUMAN_APPROVAL risk HIGH") and "execution not allowed" in first
    assert "missing controls: authority_verification" in proc.stdout
    piped = run_cli(*base, "-i", str(action))
    assert json.loads(piped.stdout)["decision"] == "HUMAN_APPROVAL"  # JSON stays the default when piped


def test_eval_syntax_error_is_one_line_without_engine_internals(finance_bundle: Path) -> None:
    proc = run_cli("eval", "-b", str(finance_bundle), "x := 1 +")
    assert proc.returncode == 2
    assert proc.stdout == ""  # rego-cpp's report would otherwise land on stdout, before the JSON
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Invalid arithmetic operator at column 8 of `x := 1 +`" in proc.stderr
    assert "wellformed_error" not in proc.stderr and "Pass " not in proc.stderr


def test_eval_still_answers_a_good_query(finance_bundle: Path) -> None:
    proc = run_cli("eval", "-b", str(finance_bundle), "-f", "values", "1 + 1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [2]


def test_a_too_short_value_names_the_minimum(tmp_path: Path) -> None:
    bundle = tmp_path / "hr.tar.gz"
    compiled = run_cli(
        "compile", str(HR / "knowledge.yaml"), "--matrix", str(HR / "matrix.yaml"), "-o", str(bundle),
        "--no-engine-check", "--format", "json",
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    action = json.loads((HR / "action.json").read_text()) | {"idempotency_key": "idem_hr_1"}
    (tmp_path / "a.json").write_text(json.dumps(action))
    proc = run_cli("decide", "--bundle", str(bundle), "--action", str(tmp_path / "a.json"), "--format", "text")
    assert proc.returncode != 0
    assert "'idem_hr_1' has 9 characters; at least 16 are required" in proc.stderr, proc.stderr


def test_a_context_file_conflict_names_the_users_file_and_model(tmp_path: Path) -> None:
    """`decide --context FILE`: a fact the file declares is cited as the file's (its path and the
    key in it), the decision's principal is the file's own (never the case harness's
    ``case-agent``), and a ledger entry of it stays unauthenticated (nothing authenticated the agent)."""
    base = REPO / "fixtures" / "deployments" / "customer-onboarding"
    bundle = tmp_path / "onboarding.tar.gz"
    compiled = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "matrix.yaml"), "-o", str(bundle),
        "--no-engine-check", "--format", "json",
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    cases = load_cases(REPO / "fixtures" / "cases" / "customer-onboarding.yaml")
    action = next(c.action for c in cases if c.case_id == "co-checklist-read")
    assert action["runtime"]["model"]["id"] == "onboarding-llm-3"
    (tmp_path / "action.json").write_text(json.dumps(action))
    context = tmp_path / "ops" / "context.yaml"
    context.parent.mkdir()
    context.write_text("from_action: true\nregistry:\n  model: {id: registered-llm-9}\n")
    proc = run_cli(
        "decide", "--context", str(context), "-b", str(bundle), "-i", str(tmp_path / "action.json"),
        "--now", "2026-11-29T10:00:00Z", "--with-input", "--ledger", str(tmp_path / "ledger.jsonl"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    [message] = [r["message"] for r in out["decision"]["reasons"] if r["code"] == "context_conflict"]
    assert f"the gate's value is registered-llm-9 (context:{context}#registry.model.id)" in message, message
    assert "states model_id onboarding-llm-3" in message
    facts = out["input"]["context"]["facts"]
    assert facts["model_id"]["source"] == f"context:{context}#registry.model.id"
    assert facts["model_hosting"]["source"] == f"context:{context}#from_action"
    principal = out["input"]["context"]["facts_principal"]
    assert principal == "context:context.yaml"
    text = json.dumps(out)
    assert "case-agent" not in text and "decision-case" not in text and "case-attestor" not in text
    [entry] = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines() if "decision" in line]
    assert entry.get("agent_id") == action["agent_id"] and entry.get("unauthenticated") is True, entry
