"""``kcp-opa mutate``: the operators, the excuse comment, and a real run over a small policy set.

The end-to-end runs use a two-rule policy whose test pins one rule and not the other, so the
report must show kills, a survivor with the test that reaches its line, and an excuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from mutatekit import POLICY, TESTS, demo_policies

from kcp_opa.authoring.mutate_ops import Mutant, excuse, generate


def _by_operator(mutants: list[Mutant]) -> dict[str, list[Mutant]]:
    out: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        out.setdefault(mutant.operator, []).append(mutant)
    return out


def test_operators_cover_the_listed_kinds() -> None:
    mutants = generate("demo.rego", POLICY)
    ops = _by_operator(mutants)
    assert {"comparison", "boundary", "negation", "drop-expression", "drop-rule", "routing-state", "default"} <= set(
        ops
    )
    replaced = {m.replacement for m in mutants}
    assert "\tinput.amount >= 100" in replaced and "\tinput.amount <= 100" in replaced  # flip and boundary
    assert '\tinput.currency != "EUR"' in replaced and '\tnot input.currency == "EUR"' in replaced
    assert "default allowed := true" in replaced
    assert any(m.replacement.startswith('label := "COMPLIANCE_REVIEW"') for m in mutants)
    drop_contains = [m for m in ops["drop-rule"] if "contains" in m.original]
    assert len(drop_contains) == 2
    # Strings and comments are never mutated by the operator replacements.
    label = [m for m in mutants if m.start == 12 and m.operator == "comparison"]
    assert len(label) == 1 and label[0].replacement.count('"quoted == string"') == 1
    assert all('# a "quoted == string" and a # comment' in m.replacement for m in mutants if m.start == 12)


def test_set_operations_and_reason_codes_and_controls() -> None:
    source = (
        "package p\n\nx := a | b\n\ny := a - b\n\nz := {c | some c in a}\n\n"
        'f := {"code": "tenant_boundary", "controls": ["safe_stop"]}\n'
    )
    ops = _by_operator(generate("p.rego", source))
    assert {m.replacement for m in ops["set-operation"]} == {"x := a & b", "y := a & b"}  # never the comprehension bar
    assert "tenant_boundary_mutated" in ops["reason-code"][0].replacement
    assert '"standard_audit_logging"' in ops["control"][0].replacement


def test_apply_replaces_exactly_the_range() -> None:
    mutant = next(m for m in generate("demo.rego", POLICY) if m.operator == "drop-rule" and m.start == 7)
    assert mutant.end == 10
    applied = mutant.apply(POLICY)
    assert "allowed if {" not in applied and "default allowed := false" in applied and "kinds contains" in applied


def test_excuse_needs_a_reason() -> None:
    lines = ["x := 1 # mutate: equivalent both values are read as truthy", "y := 2 # mutate: equivalent", "z := 3"]
    make = lambda n: Mutant("f", n, n, "comparison", lines[n - 1], "")  # noqa: E731
    assert excuse(lines, make(1)) == "both values are read as truthy"
    assert excuse(lines, make(2)) is None  # no reason given: not excused
    assert excuse(lines, make(3)) is None  # a comment on a code line above excuses only its own line


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    return demo_policies(tmp_path)


def test_mutate_reports_kills_survivors_and_what_reaches_them(policy_dir: Path) -> None:
    code, report, stderr = cli_json(
        "mutate", str(policy_dir / "policies"), "--cases", str(policy_dir / "cases"), "--jobs", "2", "--threshold", "99"
    )
    assert code == 2 and "below the threshold" in stderr, stderr
    summary = report["summary"]
    assert summary["killed"] > 0 and summary["survived"] > 0 and summary["invalid"] >= 0
    locations = {s["location"] for s in report["survivors"]}
    # `kinds` and `label` are pinned by no test: their mutants survive, reached by nothing.
    assert "kcp/demo.rego:14" in locations and "kcp/demo.rego:16" in locations
    # The `allowed` rule is pinned: none of its body mutants survive except the boundary the
    # test pins (amount 100 refused) ... and every survivor says what reaches its line.
    allowed_survivors = [s for s in report["survivors"] if s["location"] in ("kcp/demo.rego:8", "kcp/demo.rego:9")]
    assert allowed_survivors == [], allowed_survivors
    default = [s for s in report["survivors"] if s["location"] == "kcp/demo.rego:5"]
    for survivor in report["survivors"]:
        assert isinstance(survivor["reached_by"], list)
    assert all(s["location"] != "kcp/demo.rego:5" for s in report["survivors"]) or default[0]["reached_by"]


def test_an_excused_mutant_is_not_scored(policy_dir: Path) -> None:
    policy = policy_dir / "policies" / "kcp" / "demo.rego"
    text = POLICY.replace(
        'kinds contains "small" if input.amount < 10',
        'kinds contains "small" if input.amount < 10 # mutate: equivalent no decision reads kinds',
    ).replace("\tinput.amount < 100\n", "\tinput.amount < 100 # mutate: equivalent (wrongly: the tests pin it)\n")
    policy.write_text(text)
    code, report, _ = cli_json(
        "mutate", str(policy_dir / "policies"), "--cases", str(policy_dir / "cases"), "--only", "demo"
    )
    excused = [e for e in report["excused"] if e["location"] == "kcp/demo.rego:14"]
    assert excused and all(e["detail"] == "no decision reads kinds" for e in excused)
    assert all(s["location"] != "kcp/demo.rego:14" for s in report["survivors"])
    # an excuse covers survivors only: the mutants of line 8 that the tests kill stay killed
    assert all(e["location"] != "kcp/demo.rego:8" for e in report["excused"])
    assert all(s["location"] != "kcp/demo.rego:8" for s in report["survivors"])
    assert code == 0  # no threshold given


def test_a_failing_baseline_is_refused(policy_dir: Path) -> None:
    (policy_dir / "policies" / "kcp" / "demo_test.rego").write_text(TESTS + "\ntest_wrong if demo.allowed\n")
    code, _, stderr = cli_json("mutate", str(policy_dir / "policies"), "--cases", str(policy_dir / "cases"))
    assert code == 2 and "unmutated suite does not pass" in stderr


def test_mutate_on_a_file_names_the_only_flag() -> None:
    proc = run_cli("mutate", "policies/kcp/evaluators/matrix.rego")
    assert proc.returncode == 2
    assert "--only" in proc.stderr and "kcp-opa mutate policies --only matrix\\.rego" in proc.stderr, proc.stderr
