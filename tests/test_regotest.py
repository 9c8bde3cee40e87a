"""`kcp-opa test` and `kcp-opa check` on fixture policies: passing, failing, erroring, skipped,
engine-divergent, aborting regopy; a false-allow case; JUnit validated against its schema."""

from __future__ import annotations

import json
from pathlib import Path

import xmlschema
from conftest import REPO, run_cli

FIXTURES = REPO / "tests" / "fixtures"


def _test(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = run_cli("test", *args, "--format", "json")
    return proc.returncode, json.loads(proc.stdout)


def _outcomes(report: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {t["name"].rsplit(".", 1)[1]: t["outcome"] for t in report["tests"]}


def test_outcomes_of_every_kind() -> None:
    code, report = _test(str(FIXTURES / "rego" / "mixed"), "--no-cases")
    assert code == 2
    assert _outcomes(report) == {
        "test_passes": "PASS",
        "test_fails": "FAIL",
        "test_errors": "ERROR",
        "test_engines_disagree": "FAIL",
        "todo_later": "SKIP",
    }
    divergent = [t for t in report["tests"] if t["divergent"]]
    assert [t["name"] for t in divergent] == ["data.sample_test.test_engines_disagree"]
    assert divergent[0]["engines"]["regopy"]["outcome"] == "PASS"  # regopy's % bug: 49045 % 8 == 1
    assert divergent[0]["engines"]["opa"]["outcome"] == "FAIL"


def test_run_selects_by_regex() -> None:
    code, report = _test(str(FIXTURES / "rego" / "mixed"), "--no-cases", "--run", "test_passes$")
    assert code == 0 and _outcomes(report) == {"test_passes": "PASS"}


def test_a_policy_that_aborts_regopy_is_an_error_not_a_crash() -> None:
    code, report = _test(str(FIXTURES / "rego" / "aborting"), "--no-cases")
    assert code == 2
    outcomes = _outcomes(report)
    assert outcomes == {"test_aborts_regopy": "ERROR", "test_still_runs": "PASS"}
    aborted = next(t for t in report["tests"] if t["name"].endswith("test_aborts_regopy"))
    assert "with input as" in aborted["engines"]["regopy"]["detail"]
    assert aborted["engines"]["opa"]["outcome"] == "PASS"


def test_one_engine_only() -> None:
    code, report = _test(str(FIXTURES / "rego" / "aborting"), "--no-cases", "--engines", "opa")
    assert code == 0 and set(_outcomes(report).values()) == {"PASS"}


def test_false_allow_fails_the_run_and_is_listed(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    code, report = _test(
        "policies", "--cases", str(FIXTURES / "cases-false-allow"), "--run", "^(fa-|data.kcp.lib.routing)",
        "--junit", str(junit),
    )  # fmt: skip
    assert code == 2
    metrics = report["cases"]["metrics"]
    assert metrics["false_allows"] == ["fa-read-should-be-denied"]
    assert metrics["false_allow_rate"] == 1.0 and metrics["decision_accuracy"] == 0.5
    xmlschema.XMLSchema(str(FIXTURES / "junit" / "junit.xsd")).validate(str(junit))
    assert b"FALSE ALLOW" in junit.read_bytes()
    allowed, _ = _test(
        "policies", "--cases", str(FIXTURES / "cases-false-allow"), "--run", "^fa-read-allowed$",
        "--no-fail-on-false-allow",
    )  # fmt: skip
    assert allowed == 0


def test_junit_for_rego_tests_validates(tmp_path: Path) -> None:
    junit = tmp_path / "rego.xml"
    _test(str(FIXTURES / "rego" / "mixed"), "--no-cases", "--junit", str(junit))
    xmlschema.XMLSchema(str(FIXTURES / "junit" / "junit.xsd")).validate(str(junit))
    text = junit.read_text()
    assert 'failures="2"' in text and 'errors="1"' in text and 'skipped="1"' in text


def test_shipped_policies_pass_with_metrics_and_coverage(tmp_path: Path) -> None:
    """What CI runs on policies/: every test passes on both engines, every case passes, zero
    false allows, zero divergences, coverage of policies/ at least 90%."""
    code, report = _test("policies", "--coverage", "--threshold", "90")
    assert code == 0, json.dumps([t for t in report["tests"] if t["outcome"] != "PASS"], indent=1)[:3000]
    metrics = report["cases"]["metrics"]
    assert metrics["cases"] >= 60 and metrics["passed"] == metrics["cases"]
    assert metrics["false_allows"] == [] and metrics["divergences"] == []
    assert report["coverage"]["coverage"] >= 90
    skipped = [t for t in report["tests"] if t["outcome"] == "SKIP"]
    assert {t["file"] for t in skipped} <= {"kcp/gate/decision_test.rego"}
    assert all(t["engines"]["opa"]["outcome"] == "PASS" for t in skipped)


def test_check_flags_the_constructs_engine_notes_list() -> None:
    proc = run_cli("check", str(FIXTURES / "rego" / "lint"), "--format", "json")
    assert proc.returncode == 1
    codes = {(f["file"], f["code"]) for f in json.loads(proc.stdout)["findings"]}
    assert ("lint.rego", "opa_compile") in codes and ("lint.rego", "v0_syntax") in codes
    assert ("lint.rego", "nondeterministic_builtin") in codes
    assert ("lint.rego", "silent_builtin") in codes
    assert ("lint.rego", "duplicate_helper") in codes and ("other.rego", "duplicate_helper") in codes
    assert ("lint_test.rego", "with_input_as") in codes
    assert ("lint.rego", "object_in_rule_head") in codes


def test_check_passes_on_the_shipped_policies() -> None:
    proc = run_cli("check", "policies", "--strict", "--format", "json")
    assert proc.returncode == 0, proc.stdout
    assert json.loads(proc.stdout)["findings"] == []


def test_an_aborting_test_file_does_not_take_other_files_down() -> None:
    """One `with input as` in a new file used to turn every other file's tests into ERRORs."""
    code, report = _test(str(FIXTURES / "rego" / "neighbours"), "--no-cases")
    assert code == 2
    outcomes = _outcomes(report)
    assert outcomes.pop("test_aborts_regopy") == "ERROR"
    assert set(outcomes.values()) == {"PASS"} and len(outcomes) == 6
    assert [t["name"] for t in report["tests"] if t["divergent"]] == ["data.crash_test.test_aborts_regopy"]
    aborted = next(t for t in report["tests"] if t["name"].endswith("test_aborts_regopy"))
    assert aborted["engines"]["regopy"]["detail"].startswith("crash_test.rego:9: ")


def test_a_sub_path_of_the_policies_runs_its_tests_against_the_whole_tree() -> None:
    """`kcp-opa test policies/kcp/lib/` used to fail every case with `VERSION: missing`."""
    code, report = _test(str(REPO / "policies" / "kcp" / "lib"))
    assert code == 0, report
    files = {t["file"] for t in report["tests"]}
    assert files and all(f.startswith("kcp/lib/") and f.endswith("_test.rego") for f in files)
    assert {t["outcome"] for t in report["tests"]} == {"PASS"}
    assert report["cases"] is None  # cases decide whole deployments: only for the root or --cases
