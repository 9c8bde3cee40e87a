"""Policy lines stay within 120 characters: the shipped modules and tests have none longer, and
`kcp-opa check --strict` fails on one, naming its file and line (issue 27 item 5)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import POLICIES, run_cli

from kcp_opa.authoring.policycheck import MAX_LINE, long_lines
from kcp_opa.compile.evaluatorgen import render_union

_MODULE = """package kcp.demo

import rego.v1

short := "{fits}"

# {comment}
long := "{over}"
"""


def _demo() -> str:
    # `short := "..."` is exactly MAX_LINE characters: the limit is allowed, one more is not.
    fits = "x" * (MAX_LINE - len('short := ""'))
    return _MODULE.format(fits=fits, comment="c" * (MAX_LINE - 1), over="y" * MAX_LINE)


def test_the_shipped_policies_and_their_tests_have_no_line_over_the_limit() -> None:
    modules = {str(p.relative_to(POLICIES)): p.read_text(encoding="utf-8") for p in sorted(POLICIES.rglob("*.rego"))}
    assert any(name.endswith("_test.rego") for name in modules)
    assert [f"{f.file}:{f.line}" for f in long_lines(modules)] == []


def test_the_generated_union_stays_within_the_limit() -> None:
    # rendered afresh, not read from disk: the generator itself keeps its long sets on many lines
    assert max(len(line) for line in render_union(POLICIES).splitlines()) <= MAX_LINE


def test_each_long_line_is_a_warning_with_its_file_and_line() -> None:
    found = long_lines({"demo.rego": _demo(), "demo_test.rego": _demo()})
    assert [(f.file, f.line, f.severity, f.code) for f in found] == [
        ("demo.rego", 7, "warning", "line_too_long"),
        ("demo.rego", 8, "warning", "line_too_long"),
        ("demo_test.rego", 7, "warning", "line_too_long"),
        ("demo_test.rego", 8, "warning", "line_too_long"),
    ]
    assert found[1].message.startswith(f"{MAX_LINE + 10} characters, over {MAX_LINE}")


def test_check_strict_fails_on_a_long_line(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "demo.rego").write_text(_demo(), encoding="utf-8")
    relaxed = run_cli("check", "mine", "--format", "json", cwd=tmp_path)
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    strict = run_cli("check", "mine", "--strict", "--format", "json", cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    findings = json.loads(strict.stdout)["findings"]
    assert {(f["file"], f["line"]) for f in findings if f["code"] == "line_too_long"} == {
        ("demo.rego", 7),
        ("demo.rego", 8),
    }
