"""`kcp-opa test` as a policy author meets it: cases only or Rego only, a broken case file or Rego
test worded once and alike on both engines, --explain on a failing test (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import POLICIES, run_cli
from deploykit import hr_leave_copy


def test_a_case_file_error_is_worded_once_without_python_class_names(tmp_path: Path) -> None:
    hr_leave_copy(tmp_path, matrix_typo=True)
    proc = run_cli(
        "test", str(POLICIES), "--cases", "cases", "--deployments", "deployments", "--cases-only",
        "--format", "text", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    out = proc.stdout
    assert "Error" not in out and "ValidationFailed" not in out, out
    assert out.count("'aprove' is not one of") == 1, out
    assert "deployment 'hr' does not compile" in out and "hr-again" in out and "see case hr-approve" in out, out


def test_cases_only_runs_the_cases_and_no_rego_test(tmp_path: Path) -> None:
    hr_leave_copy(tmp_path)
    proc = run_cli(
        "test", str(POLICIES), "--cases", "cases", "--deployments", "deployments", "--cases-only",
        "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["tests"] == [] and report["cases"]["metrics"]["passed"] == 2, report


def test_rego_only_runs_no_case(tmp_path: Path) -> None:
    hr_leave_copy(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ok_test.rego").write_text("package mine_test\n\nimport rego.v1\n\ntest_ok if 1 == 1\n")
    proc = run_cli(
        "test", "mine", "--cases", "cases", "--deployments", "deployments", "--rego-only", "--format", "json",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["tests"] and report.get("cases") is None, report
    both = run_cli("test", "--cases-only", "--rego-only", cwd=tmp_path)
    assert both.returncode == 2 and "exclude each other" in both.stderr


BROKEN_TEST = """package hr.mine_test

import rego.v1

test_ok if {
\t1 == 1
}

test_broken if {
\tx := [1, 2
\tx[0] == 1
}
"""


def test_a_syntax_error_in_a_rego_test_is_a_syntax_error_on_both_engines(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "hr_test.rego").write_text(BROKEN_TEST)
    proc = run_cli("test", "mine", "--format", "text", cwd=tmp_path)
    assert proc.returncode == 2
    out = proc.stdout
    assert "aborted while planning" not in out and "engines disagree" not in out, out
    assert "regopy: syntax error at hr_test.rego:10:7: this is unclosed" in out, out
    assert 'opa: syntax error at hr_test.rego:11:2: unexpected identifier token: expected "," or "]"' in out, out
    checked = run_cli("check", "mine", "--format", "json", cwd=tmp_path)
    assert checked.returncode == 1
    codes = {(f["code"], f["line"]) for f in json.loads(checked.stdout)["findings"]}
    assert {("syntax_error", 10), ("syntax_error", 11)} <= codes, codes
    assert not {c for c, _ in codes} & {"regopy_abort", "regopy_compile"}, codes


FAILING_TEST = """package hr.leave_test

import rego.v1

days(req) := n if {
\tn := req.end - req.start
}

test_leave_days if {
\treq := {"start": 3, "end": 7}
\tn := days(req)
\tn == 5
}

test_passes if {
\tdays({"start": 1, "end": 2}) == 1
}
"""


def test_explain_fails_shows_the_failing_expression_and_its_values(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "leave_test.rego").write_text(FAILING_TEST)
    proc = run_cli("test", "mine", "--explain", "fails", "--format", "text", cwd=tmp_path)
    assert proc.returncode == 2
    line = 'leave_test.rego:12: n == 5    evaluated: 4 = 5    with n = 4, req = {"end": 7, "start": 3}'
    assert line in proc.stdout, proc.stdout
    assert "test_passes" not in proc.stdout  # only the failing test is explained
    full = run_cli("test", "mine", "--explain", "full", "--format", "json", cwd=tmp_path)
    explained = {t["name"]: t.get("explain", []) for t in json.loads(full.stdout)["tests"]}
    assert any("n := req.end - req.start" in x for x in explained["data.hr.leave_test.test_leave_days"])
    assert any("days({" in x for x in explained["data.hr.leave_test.test_passes"]), explained
