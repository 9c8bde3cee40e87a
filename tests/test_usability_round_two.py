"""What a new compliance or platform engineer tripped on (issue 32): one test per complaint, each
running the real command as a process, the way the user met it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import POLICIES, REPO, run_cli

HR = REPO / "tests" / "deployments" / "hr-leave"


def _deployment(tmp_path: Path, *, categories: str = "[personal]", matrix_typo: bool = False) -> Path:
    """A copy of the hr-leave deployment with a case file: tmp/deployments/hr, tmp/cases/hr.yaml."""
    dep = tmp_path / "deployments" / "hr"
    shutil.copytree(HR, dep)
    manifest = dep / "knowledge.yaml"
    manifest.write_text(manifest.read_text().replace("data_categories: [personal]", f"data_categories: {categories}"))
    if matrix_typo:
        matrix = dep / "matrix.yaml"
        matrix.write_text(matrix.read_text().replace("personal: approve", "personal: aprove"))
    action = json.loads((HR / "action.json").read_text())
    cases = {
        "deployment": "hr",
        "now": "2026-11-29T10:00:00Z",
        "context": {"from_action": True},
        "base_action": action,
        "cases": [
            {"case_id": "hr-approve", "description": "a", "action": {}, "expect": {"decision": "HUMAN_APPROVAL"}},
            {"case_id": "hr-again", "description": "b", "action": {}, "expect": {"decision": "HUMAN_APPROVAL"}},
        ],
    }
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "hr.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    return dep


# -- item 7: small messages -------------------------------------------------------------------


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


def test_mutate_on_a_file_names_the_only_flag() -> None:
    proc = run_cli("mutate", "policies/kcp/evaluators/matrix.rego")
    assert proc.returncode == 2
    assert "--only" in proc.stderr and "kcp-opa mutate policies --only matrix\\.rego" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("kind: x\nunits:\n  - id: a\n    path: [unclosed\n", "it started at line 4, column 11: `path: [unclosed`"),
        ("a: 1\n b: 2\n", "(column 3: `b: 2`)"),
    ],
)
def test_a_yaml_error_gives_the_column_and_an_excerpt(tmp_path: Path, text: str, shown: str) -> None:
    bad = tmp_path / "knowledge.yaml"
    bad.write_text(text)
    proc = run_cli("validate", str(bad), "--format", "text")
    assert proc.returncode == 1
    assert shown in proc.stdout, proc.stdout


def test_a_case_file_error_is_worded_once_without_python_class_names(tmp_path: Path) -> None:
    _deployment(tmp_path, matrix_typo=True)
    proc = run_cli(
        "test", str(POLICIES), "--cases", "cases", "--deployments", "deployments", "--cases-only",
        "--format", "text", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    out = proc.stdout
    assert "Error" not in out and "ValidationFailed" not in out, out
    assert out.count("'aprove' is not one of") == 1, out
    assert "deployment 'hr' does not compile" in out and "hr-again" in out and "see case hr-approve" in out, out


# -- item 4: unknown data categories and matrix coverage ----------------------------------------


def test_an_unknown_data_category_warning_is_spelled_right_and_tells_the_truth(tmp_path: Path) -> None:
    dep = _deployment(tmp_path, categories="[personal, helth]")
    proc = run_cli("validate", str(dep / "knowledge.yaml"), "--format", "json")
    warnings = json.loads(proc.stdout)["warnings"]
    codes = [w["code"] for w in warnings]
    assert "unknown_data_category" in codes and "unknown_data_categorie" not in codes
    message = next(w["message"] for w in warnings if w["code"] == "unknown_data_category")
    assert "ignored" not in message and "matrix_not_covered" in message and "did you mean 'health'" in message


def test_validate_reports_what_no_matrix_row_covers_and_strict_fails_on_it(tmp_path: Path) -> None:
    dep = _deployment(tmp_path, categories="[personal, health]")
    files = [str(dep / "knowledge.yaml"), str(dep / "matrix.yaml")]
    loose = run_cli("validate", *files, "--format", "text")
    assert loose.returncode == 0, loose.stdout + loose.stderr
    assert "data_categories 'health' (unit leave-requests) is in no row" in loose.stdout, loose.stdout
    assert "(matrix_not_covered)" in loose.stdout
    strict = run_cli("validate", "--strict", *files, "--format", "text")
    assert strict.returncode == 1
    # A sensitivity no row lists is a gap too.
    matrix = dep / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("internal: autonomous, ", ""))
    proc = run_cli("validate", *files, "--format", "json")
    messages = [w["message"] for r in json.loads(proc.stdout) for w in r["warnings"]]
    assert any(m.startswith("sensitivity 'internal' (unit leave-policy)") for m in messages), messages
    # A deployment whose matrix covers what it declares has no gap.
    clean = run_cli("validate", str(HR / "knowledge.yaml"), str(HR / "matrix.yaml"), "--format", "json")
    assert clean.returncode == 0, clean.stdout
    assert not [w for r in json.loads(clean.stdout) for w in r["warnings"] if w["code"] == "matrix_not_covered"]


# -- item 3: cases only, Rego only --------------------------------------------------------------


def test_cases_only_runs_the_cases_and_no_rego_test(tmp_path: Path) -> None:
    _deployment(tmp_path)
    proc = run_cli(
        "test", str(POLICIES), "--cases", "cases", "--deployments", "deployments", "--cases-only",
        "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["tests"] == [] and report["cases"]["metrics"]["passed"] == 2, report


def test_rego_only_runs_no_case(tmp_path: Path) -> None:
    _deployment(tmp_path)
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


# -- item 1: a syntax error in one's own Rego test ----------------------------------------------

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


# -- item 5: the policies ship with the package -------------------------------------------------


def test_compile_works_outside_the_repository_and_policies_still_overrides(tmp_path: Path) -> None:
    args = ["compile", str(HR / "knowledge.yaml"), "--matrix", str(HR / "matrix.yaml"), "--no-engine-check"]
    shipped = run_cli(*args, "-o", "shipped.tar.gz", "--format", "json", cwd=tmp_path)
    assert shipped.returncode == 0, shipped.stderr
    explicit = run_cli(*args, "-o", "explicit.tar.gz", "--policies", str(POLICIES), "--format", "json", cwd=tmp_path)
    assert explicit.returncode == 0, explicit.stderr
    assert json.loads(shipped.stdout)["sha256"] == json.loads(explicit.stdout)["sha256"]
    (tmp_path / "empty").mkdir()
    override = run_cli(*args, "-o", "x.tar.gz", "--policies", "empty", cwd=tmp_path)
    assert override.returncode != 0 and "empty" in override.stderr, override.stderr


def test_the_wheel_ships_every_policy_file() -> None:
    # The package's policies are the repository's (a symlink), and package-data takes all of them.
    shipped = REPO / "kcp_opa" / "policies"
    assert shipped.resolve() == POLICIES.resolve()
    text = (REPO / "pyproject.toml").read_text()
    assert '"policies/VERSION", "policies/**/*.rego"' in text


# -- item 11: the guide's script can be pasted into a shell ------------------------------------


def test_a_failing_step_of_the_pasted_guide_leaves_the_shell_running(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from test_getting_started import _script

    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "WORK": str(tmp_path),
        "DEPLOY": str(tmp_path),  # no deployment there: step 1 fails
        "POLICIES": "policies",
    }
    pasted = _script() + "\necho the-shell-is-still-here\n"
    proc = subprocess.run(
        ["bash", "-c", pasted], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert "the-shell-is-still-here" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no such file" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "bundles").exists()  # the walk-through stopped at the failing step


# -- item 12: the docs read as user documentation ----------------------------------------------


def test_the_docs_and_changelog_name_no_development_machine_and_the_digest_is_no_research_log() -> None:

    texts = {p.name: p.read_text() for p in [REPO / "CHANGELOG.md", REPO / "README.md", *(REPO / "docs").glob("*.md")]}
    for name, text in texts.items():
        found = re.findall(r"(?<![\w.])/(?:work|home|Users|root)/\S+", text)
        assert not found, f"{name} names machine paths: {found[:3]}"
    digest = texts["kcp-spec-digest.md"]
    for research in ("research record", "read_file", "find_files", "commit 03937b2f", "Issue 19", "kcp-opa today"):
        assert research not in digest, research
    assert "what kcp-opa does" in digest


# -- item 6: ROPA ------------------------------------------------------------------------------

ROPA_MANIFEST = """\
kcp_version: "0.14"
project: hr
compliance: {sensitivity: restricted, data_residency: [EU]}
trust:
  provenance: {publisher: "Example HR GmbH"}
units:
  - id: sick-leave
    path: hr/sick-leave.md
    intent: "Who is on sick leave."
    scope: project
    audience: [agent]
    access: restricted
    auth_scope: hr:health
    compliance:
      data_categories: [health, personal]
      legal_basis: legal_obligation
      article_9_condition: CONDITION
"""


@pytest.mark.parametrize(
    ("condition", "article"),
    [
        ("explicit_consent", "Art. 9(2)(a)"),
        ("employment_social_security", "Art. 9(2)(b)"),
        ("vital_interests", "Art. 9(2)(c)"),
        ("not_for_profit_body", "Art. 9(2)(d)"),
        ("made_public_by_data_subject", "Art. 9(2)(e)"),
        ("legal_claims", "Art. 9(2)(f)"),
        ("substantial_public_interest", "Art. 9(2)(g)"),
        ("health_or_social_care", "Art. 9(2)(h)"),
        ("public_health", "Art. 9(2)(i)"),
        ("archiving_research_statistics", "Art. 9(2)(j)"),
    ],
)
def test_ropa_accepts_every_article_9_condition(tmp_path: Path, condition: str, article: str) -> None:
    manifest = tmp_path / "knowledge.yaml"
    manifest.write_text(ROPA_MANIFEST.replace("CONDITION", condition))
    proc = run_cli("ropa", str(manifest))
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)["records"][0]
    assert record["article_9_condition"].startswith(article), record
    assert record["controller"] == "Example HR GmbH"
    assert "Article 9(2)" not in proc.stderr and "controller" not in proc.stderr


def test_ropa_text_has_no_python_booleans_and_a_missing_controller_is_said(tmp_path: Path) -> None:
    manifest = tmp_path / "knowledge.yaml"
    text = ROPA_MANIFEST.replace("CONDITION", "employment_social_security")
    manifest.write_text(text.replace('trust:\n  provenance: {publisher: "Example HR GmbH"}\n', ""))
    proc = run_cli("ropa", str(manifest), "--format", "text")
    assert proc.returncode == 0
    assert "True" not in proc.stdout and "False" not in proc.stdout, proc.stdout
    assert re.search(r"special categories\s+yes", proc.stdout) and re.search(r"transfer\s+no", proc.stdout)
    assert "no controller: declare trust.provenance.publisher" in proc.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(ROPA_MANIFEST.replace("CONDITION", "employment_law"))
    assert run_cli("validate", str(typo)).returncode == 1


def test_ropa_prints_text_on_a_terminal_like_the_other_commands(tmp_path: Path) -> None:
    import pty
    import subprocess
    import sys

    manifest = tmp_path / "knowledge.yaml"
    manifest.write_text(ROPA_MANIFEST.replace("CONDITION", "employment_social_security"))
    leader, follower = pty.openpty()
    proc = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "ropa", str(manifest)],
        stdout=follower, stderr=subprocess.PIPE, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    os_close = __import__("os").close
    os_close(follower)
    out = __import__("os").read(leader, 65536).decode()
    os_close(leader)
    assert proc.returncode == 0
    assert out.startswith("Records of processing activities") and not out.lstrip().startswith("{"), out[:200]


# -- item 2: --explain --------------------------------------------------------------------------

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
