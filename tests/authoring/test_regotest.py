"""`kcp-opa test` and `kcp-opa check` on fixture policies: passing, failing, erroring, skipped,
engine-divergent, aborting regopy; a false-allow case; JUnit validated against its schema.
(The shipped policies' own runs have files of their own: test_shipped_policies_*.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import xmlschema
from conftest import REPO, run_cli

FIXTURES = REPO / "tests" / "fixtures"


def _test(*args: str, timeout: float = 300) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = run_cli("test", *args, "--format", "json", timeout=timeout)
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


def test_cases_that_all_error_are_no_zero_percent_false_allow_rate(tmp_path: Path) -> None:
    # No deployment where the cases look: every case is an ERROR. The totals must not read as a
    # clean run ("false-allow rate 0.0%"): the rates are n/a and the run fails, saying why.
    args = ["policies", "--cases", str(FIXTURES / "cases-false-allow"), "--deployments", str(tmp_path)]
    proc = run_cli("test", *args, "--run", "^fa-", "--format", "json")
    assert proc.returncode == 2
    metrics = json.loads(proc.stdout)["cases"]["metrics"]
    assert metrics["cases"] == 2 and metrics["ran"] == 0 and metrics["passed"] == 0
    assert metrics["false_allow_rate"] is None and metrics["decision_accuracy"] is None
    assert "none of the 2 decision cases ran" in proc.stderr
    text = run_cli("test", *args, "--run", "^fa-", "--format", "text")
    assert text.returncode == 2
    assert "n/a" in text.stdout and "0.0%" not in text.stdout


def test_selecting_nothing_fails() -> None:
    proc = run_cli("test", "policies", "--run", "^no-such-test-or-case$", "--format", "json")
    assert proc.returncode == 2
    assert "nothing was checked" in proc.stderr


def test_junit_for_rego_tests_validates(tmp_path: Path) -> None:
    junit = tmp_path / "rego.xml"
    _test(str(FIXTURES / "rego" / "mixed"), "--no-cases", "--junit", str(junit))
    xmlschema.XMLSchema(str(FIXTURES / "junit" / "junit.xsd")).validate(str(junit))
    text = junit.read_text()
    assert 'failures="2"' in text and 'errors="1"' in text and 'skipped="1"' in text


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


def test_watch_runs_again_when_a_test_file_changes(tmp_path: Path) -> None:
    """`--watch` repeats the run on every save, in a real process, until it is interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "VERSION").write_text("1.0.0\n")
    (tmp_path / "p.rego").write_text("package p\n\nimport rego.v1\n\nanswer := 42\n")
    test_file = tmp_path / "p_test.rego"
    test_file.write_text("package p_test\n\nimport rego.v1\n\nimport data.p\n\ntest_answer if p.answer == 42\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcp_opa", "test", str(tmp_path), "--no-cases", "--engines", "opa", "--watch"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
        # A terminal's foreground job: a harness started in the background (nohup, `&`) passes
        # SIGINT down ignored, and Python then installs no KeyboardInterrupt for Ctrl-C.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None

    def next_run() -> str:
        out = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            if "watching for changes" in line:
                break
            assert line, "the watcher exited"
        else:
            raise AssertionError("no run within 120 s")
        os.set_blocking(proc.stdout.fileno(), False)  # type: ignore[union-attr]
        out.append(proc.stdout.read() or "")  # type: ignore[union-attr]
        os.set_blocking(proc.stdout.fileno(), True)  # type: ignore[union-attr]
        return "".join(out)

    try:
        first = json.loads(next_run())
        assert _outcomes(first) == {"test_answer": "PASS"}
        time.sleep(1.1)  # a new mtime on coarse clocks
        test_file.write_text(test_file.read_text().replace("== 42", "== 41"))
        second = json.loads(next_run())
        assert _outcomes(second) == {"test_answer": "FAIL"}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 130


def test_the_time_limit_is_per_test_file_not_for_the_whole_run() -> None:
    """A file over its limit is an ERROR naming it; the files before and after it still pass.

    One child used to plan every file under one 300 s limit, so one slow file (or a loaded
    machine) turned every test of every file into an ERROR."""
    from kcp_opa.authoring import regochild
    from kcp_opa.authoring.regotest import discover, run_regopy

    policy = "package lib\n\nimport rego.v1\n\nanswer := 42\n"
    fast = "package {0}_test\n\nimport rego.v1\n\ntest_{0} if data.lib.answer == 42\n"
    stall = "package b_test\n\nimport rego.v1\n\ntest_b if count([x | some x in numbers.range(1, 200000000)]) > 0\n"
    modules = {"lib.rego": policy, "a_test.rego": fast.format("a"), "b_test.rego": stall}
    modules["c_test.rego"] = fast.format("c")
    limit = regochild.CHILD_TIMEOUT_S
    try:
        regochild.CHILD_TIMEOUT_S = 20
        results = run_regopy(modules, discover(modules))
    finally:
        regochild.CHILD_TIMEOUT_S = limit
    outcomes = {name.rsplit(".", 1)[1]: result.outcome.value for name, result in results.items()}
    assert outcomes == {"test_a": "PASS", "test_b": "ERROR", "test_c": "PASS"}, results
    assert "b_test.rego in 20 s" in results["data.b_test.test_b"].detail
