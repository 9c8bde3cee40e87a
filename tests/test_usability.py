"""What a new compliance engineer or auditor hit (issue 17): each test reproduces one complaint.

Every test runs the real command as a piped process, the way a CI job or a shell script sees it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, VOUCH, run_cli

from kcp_opa.compile.compiler import compile_bundle

HR_MANIFEST = """\
kcp_version: "0.14"
project: hr
compliance:
  sensitivity: restricted
  data_residency: [EU]
units:
  - id: payroll
    path: payroll/runs.md
    intent: "How a payroll run is approved."
    scope: project
    audience: [agent]
    compliance:
      data_categories: [financial, personal]
      legal_basis: legal_obligation
  - id: sick-leave
    path: hr/sick-leave.md
    intent: "Who is on sick leave."
    scope: project
    audience: [agent]
    access: restricted
    auth_scope: hr:health
    compliance:
      data_categories: [health, personal]
      legal_basis: {basis}
"""


@pytest.fixture(scope="module")
def finance_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, engine_check=False)
    return out


def _hr(tmp_path: Path, basis: str = "legitimate_interests") -> Path:
    path = tmp_path / "knowledge.yaml"
    path.write_text(HR_MANIFEST.format(basis=basis), encoding="utf-8")
    return path


def test_ropa_does_not_call_a_restricted_unit_public_when_access_is_left_to_the_default(tmp_path: Path) -> None:
    proc = run_cli("ropa", str(_hr(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    records = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}
    payroll = records["hr/payroll"]
    assert not any("public" in r and "default" not in r for r in payroll["recipients"])
    assert payroll["recipients"][0].startswith("not declared")
    assert "hr/payroll: access not declared" in proc.stderr
    assert records["hr/sick-leave"]["recipients"][0] == "restricted (hr:health)"


def test_ropa_asks_for_an_article_9_condition_for_health_data(tmp_path: Path) -> None:
    proc = run_cli("ropa", str(_hr(tmp_path)))
    sick = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}["hr/sick-leave"]
    assert sick["special_categories"] is True
    assert sick["article_9_condition"] == "not declared"
    assert "hr/sick-leave: special categories (health)" in proc.stderr and "Article 9(2)" in proc.stderr
    payroll = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}["hr/payroll"]
    assert payroll["article_9_condition"].startswith("not applicable")

    consented = run_cli("ropa", str(_hr(tmp_path, basis="explicit_consent")))
    sick = {r["activity"]: r for r in json.loads(consented.stdout)["records"]}["hr/sick-leave"]
    assert sick["article_9_condition"] == "Art. 9(2)(a) explicit consent"
    assert "Article 9(2)" not in consented.stderr


def test_ropa_text_format_is_accepted_and_keeps_values_whole(tmp_path: Path) -> None:
    proc = run_cli("ropa", str(_hr(tmp_path)), "--format", "text")
    assert proc.returncode == 0, proc.stderr
    assert "hr/sick-leave" in proc.stdout and "restricted (hr:health)" in proc.stdout
    assert "…" not in proc.stdout


def test_validate_warns_when_a_restricted_unit_leaves_access_to_the_public_default(tmp_path: Path) -> None:
    proc = run_cli("validate", "--format", "json", str(_hr(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    findings = json.loads(proc.stdout)["warnings"]
    flagged = [f["path"] for f in findings if f["code"] == "access_not_declared"]
    assert flagged == ["units[0]"]  # payroll only: sick-leave declares access: restricted


def test_piped_text_output_is_never_wrapped(tmp_path: Path) -> None:
    proc = run_cli("validate", "--format", "text", str(_hr(tmp_path)))
    warning = [line for line in proc.stdout.splitlines() if "access_not_declared" in line]
    assert len(warning) == 1 and "units[0]" in warning[0] and "declare access" in warning[0]


def test_inspect_prints_whole_hashes(finance_bundle: Path) -> None:
    sha = json.loads(run_cli("inspect", "--format", "json", str(finance_bundle)).stdout)["sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", sha)
    shown = run_cli("inspect", "--format", "text", str(finance_bundle)).stdout
    assert sha in shown and "…" not in shown
    assert re.search(rf"sha256\s+│\s+{sha}\s+│", shown)


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
