"""The CLI as a user meets it: real processes, exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CONFORMANCE, DEPLOYMENTS, cli_json, run_cli

BASE = """kcp_version: "0.14"
project: demo
delegation:
  max_depth: 2
  audit_chain: true
units:
  - id: a
    path: a.md
    intent: "A"
    scope: global
    audience: [agent]
"""


def _write(tmp_path: Path, text: str, name: str = "knowledge.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _assert_no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr


def test_issue_example_max_depth_5_under_root_2(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + "    delegation: {max_depth: 5}\n")
    code, report, stderr = cli_json("validate", str(path))
    assert code == 1
    assert report["valid"] is False
    [error] = report["errors"]
    assert error["code"] == "delegation_relaxed"
    assert error["path"] == "units[0].delegation.max_depth"
    assert error["line"] == 12
    assert "5" in error["message"] and "2" in error["message"]
    _assert_no_traceback(stderr)


def test_issue_example_bad_approval_mechanism(tmp_path: Path) -> None:
    path = _write(
        tmp_path, BASE + "    delegation: {human_in_the_loop: {required: true, approval_mechanism: sometimes}}\n"
    )
    code, report, _ = cli_json("validate", str(path))
    assert code == 1
    assert report["errors"][0]["path"] == "units[0].delegation.human_in_the_loop.approval_mechanism"


def test_issue_example_empty_units(tmp_path: Path) -> None:
    path = _write(tmp_path, 'kcp_version: "0.14"\nproject: demo\nunits: []\n')
    code, report, _ = cli_json("validate", str(path))
    assert code == 1
    assert report["errors"][0]["path"] == "units"
    assert report["unit_count"] == 0


def test_issue_example_unknown_kcp_version_is_a_warning(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace('"0.14"', '"99.0"'))
    code, report, _ = cli_json("validate", str(path))
    assert code == 0
    assert report["valid"] is True
    assert [w["code"] for w in report["warnings"]] == ["kcp_version_unknown"]


def test_issue_example_audit_chain_true_to_false(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + "    delegation: {audit_chain: false}\n")
    code, report, _ = cli_json("validate", str(path))
    assert code == 1
    assert report["errors"][0]["path"] == "units[0].delegation.audit_chain"


def test_json_report_shape_for_several_files() -> None:
    files = [str(p) for p in sorted((CONFORMANCE / "manifests").glob("valid-*.yaml"))]
    code, reports, _ = cli_json("validate", *files)
    assert code == 0
    assert isinstance(reports, list) and len(reports) == len(files)
    for report in reports:
        assert set(report) == {"file", "valid", "errors", "warnings", "notes", "unit_count", "relationship_count"}


def test_one_invalid_file_among_valid_ones_exits_1() -> None:
    files = [
        str(DEPLOYMENTS / "support-desk" / "knowledge.yaml"),
        str(CONFORMANCE / "manifests" / "invalid-duplicate-ids.yaml"),
    ]
    code, reports, _ = cli_json("validate", *files)
    assert code == 1
    assert [r["valid"] for r in reports] == [True, False]


def test_validate_recognises_a_matrix_by_kind() -> None:
    code, report, _ = cli_json("validate", str(CONFORMANCE / "matrices" / "invalid-level.yaml"))
    assert code == 1
    assert "task_type_count" in report
    assert "did you mean 'autonomous'" in report["errors"][0]["message"]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\x00\x01binary\x00", "binary data"),
        (b"project: caf\xe9\n", "not UTF-8"),
        (b"project: [oops\n", "not YAML"),
        (b"- just\n- a list\n", "mapping"),
        (b"project: !!python/object/apply:os.system ['echo pwned']\nunits: []\n", "refused"),
    ],
)
def test_bad_input_gets_one_line_and_exit_1(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    proc = run_cli("validate", "--format", "text", str(path))
    assert proc.returncode == 1
    assert fragment in proc.stdout
    _assert_no_traceback(proc.stderr)
    assert "pwned" not in proc.stderr


def test_yaml_bomb_and_50mb_file(tmp_path: Path) -> None:
    bomb = CONFORMANCE / "manifests" / "invalid-bomb.yaml"
    code, report, stderr = cli_json("validate", str(bomb))
    assert code == 1 and "YAML bomb" in report["errors"][0]["message"]
    big = tmp_path / "big.yaml"
    big.write_bytes(b"project: big\n# " + b"x" * (50 * 1024 * 1024) + b"\n")
    code, report, stderr = cli_json("validate", str(big))
    assert code == 1 and "MiB limit" in report["errors"][0]["message"]
    _assert_no_traceback(stderr)


def test_missing_file_is_an_io_error_exit_2(tmp_path: Path) -> None:
    proc = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "no such file" in proc.stderr
    _assert_no_traceback(proc.stderr)


def test_usage_errors_exit_2() -> None:
    proc = run_cli("validate")
    assert proc.returncode == 2
    assert "Try 'kcp-opa validate --help'" in proc.stderr
    proc = run_cli("compile", "x.yaml")
    assert proc.returncode == 2 and "--matrix" in proc.stderr
    proc = run_cli("no-such-command")
    assert proc.returncode == 2


def test_help_teaches_the_flow() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    for verb in ("validate", "explain", "compile", "inspect"):
        assert verb in proc.stdout
    assert "kcp-opa compile knowledge.yaml --matrix" in proc.stdout


def test_text_output_names_file_path_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + "    delegation: {max_depth: 5}\n")
    proc = run_cli("validate", "--format", "text", str(path))
    assert proc.returncode == 1
    assert f"{path}:12: units[0].delegation.max_depth" in proc.stdout


def test_strict_turns_warnings_into_failure(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace('"0.14"', '"99.0"'))
    assert run_cli("validate", "--strict", str(path)).returncode == 1


def test_explain_shows_sources_as_json() -> None:
    manifest = DEPLOYMENTS / "customer-onboarding" / "knowledge.yaml"
    code, view, _ = cli_json("explain", str(manifest), "onboarding-checklist")
    assert code == 0
    assert view["effective"]["delegation"]["max_depth"] == 1
    assert view["sources"]["delegation.max_depth"] == "unit"
    assert view["sources"]["compliance.restrictions"] == "root"
    assert view["effective"]["compliance"]["restrictions"] == ["audit-required", "no-external-llm"]


def test_explain_unknown_unit_is_one_line_exit_2() -> None:
    manifest = DEPLOYMENTS / "customer-onboarding" / "knowledge.yaml"
    proc = run_cli("explain", str(manifest), "nope")
    assert proc.returncode == 2
    assert "no unit 'nope'" in proc.stderr
    _assert_no_traceback(proc.stderr)


def test_explain_on_invalid_manifest_lists_errors_exit_1() -> None:
    proc = run_cli("explain", str(CONFORMANCE / "manifests" / "invalid-max-depth-relaxed.yaml"), "a")
    assert proc.returncode == 1
    assert "delegation_relaxed" in proc.stderr
    _assert_no_traceback(proc.stderr)


def test_logs_go_to_stderr_and_stdout_stays_json(tmp_path: Path) -> None:
    base = DEPLOYMENTS / "support-desk"
    out = tmp_path / "b.tar.gz"
    proc = run_cli(
        "-v",
        "compile",
        str(base / "knowledge.yaml"),
        "--matrix",
        str(base / "matrix.yaml"),
        "-o",
        str(out),
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)
    assert "bundle.compiled" in proc.stderr


def test_unwritable_output_is_one_line_exit_2(tmp_path: Path) -> None:
    base = DEPLOYMENTS / "finance"
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_cli(
        "compile",
        str(base / "knowledge.yaml"),
        "--matrix",
        str(base / "matrix.yaml"),
        "-o",
        str(blocker / "b.tar.gz"),
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot write the bundle" in proc.stderr
    _assert_no_traceback(proc.stderr)


def test_matrix_given_as_manifest_is_invalid_exit_1() -> None:
    base = DEPLOYMENTS / "finance"
    proc = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "knowledge.yaml"), "--no-engine-check"
    )
    assert proc.returncode == 1
    assert "is invalid" in proc.stderr and "kind" in proc.stderr
    _assert_no_traceback(proc.stderr)
