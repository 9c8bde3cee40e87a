"""The gate's findings union is generated from the evaluators' METADATA: a new evaluator joins
the gate by `kcp-opa generate`, and check and compile refuse a union that leaves one out (its
DENYs would never reach the decision)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, VOUCH, run_cli

from kcp_opa.compile.evaluatorgen import GENERATED, evaluators, render_union, stale
from kcp_opa.core.errors import CompileError

EXTENDING = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
# The module and the Rego test docs/extending.md walks through: this file runs that page.
SCENARIO, SCENARIO_TEST = (block.split("\n```", 1)[0] for block in EXTENDING.split("```rego\n")[1:3])


def test_the_shipped_union_is_generated_and_up_to_date() -> None:
    assert stale(POLICIES) is None
    names = [e.name for e in evaluators(POLICIES)]
    assert names == sorted(p.stem for p in (POLICIES / "kcp" / "evaluators").glob("*.rego") if "_test" not in p.stem)
    union = render_union(POLICIES)
    assert all(f'"{name}": {{"evaluator_id"' in union for name in names)
    assert "data.kcp.evaluators[name].findings" in union  # reached through the plan (kcp.gate.planned)


def _compile(policies: Path, out: Path) -> tuple[int, str]:
    base = DEPLOYMENTS / "finance"
    proc = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "matrix.yaml"), "--policies", str(policies),
        "-o", str(out), "--no-engine-check", "--format", "json",
    )  # fmt: skip
    return proc.returncode, proc.stderr


def test_a_new_evaluator_reaches_the_gate_only_through_generate(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "kcp" / "evaluators" / "scenario.rego").write_text(SCENARIO, encoding="utf-8")
    assert "does not match" in (stale(policies) or "")

    # Stale: compile and check refuse, naming the fix.
    code, err = _compile(policies, tmp_path / "stale.tar.gz")
    assert code == 2 and "kcp-opa generate" in err and not (tmp_path / "stale.tar.gz").exists()
    checked = run_cli("generate", "--policies", str(policies), "--check", "--format", "json")
    assert checked.returncode == 1 and json.loads(checked.stdout)["stale"] is True

    written = run_cli("generate", "--policies", str(policies), "--format", "json")
    assert written.returncode == 0 and json.loads(written.stdout)["written"] is True
    # no applies in its module: every decision reaches it (kcp.gate.always_planned)
    generated = (policies / GENERATED).read_text(encoding="utf-8")
    assert '"scenario"' in generated.split("always_planned := ")[1].split("\n")[0]
    again = run_cli("generate", "--policies", str(policies), "--format", "json")
    assert json.loads(again.stdout)["written"] is False

    (policies / "kcp" / "evaluators" / "scenario_test.rego").write_text(SCENARIO_TEST, encoding="utf-8")
    tested = run_cli(
        "test", str(policies / "kcp" / "evaluators" / "scenario_test.rego"), "--no-cases", "--format", "json"
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert {t["outcome"] for t in json.loads(tested.stdout)["tests"]} == {"PASS"}

    bundle = tmp_path / "finance.tar.gz"
    code, err = _compile(policies, bundle)
    assert code == 0, err
    action = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text(encoding="utf-8"))
    (tmp_path / "action.json").write_text(json.dumps({**action, "scenario": "gift_card_purchase"}), encoding="utf-8")
    decided = run_cli(
        "decide", *VOUCH, "--bundle", str(bundle), "--input", str(tmp_path / "action.json"),
        "--now", "2026-11-29T10:00:00Z", "--format", "json",
    )  # fmt: skip
    decision = json.loads(decided.stdout)
    assert decision["decision"] == "DENY"
    assert "scenario_blocked" in decision["reason_codes"]


def test_an_evaluator_without_metadata_is_refused(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    bare = SCENARIO.split("package ", 1)[1]
    (policies / "kcp" / "evaluators" / "scenario.rego").write_text("package " + bare, encoding="utf-8")
    with pytest.raises(CompileError, match=r"custom\.evaluator_id"):
        render_union(policies)


def test_check_reports_a_stale_union(tmp_path: Path) -> None:
    from kcp_opa.cli.authoring import _stale_generated

    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    assert _stale_generated([policies / "kcp" / "gate"]) == []
    (policies / "kcp" / "evaluators" / "scenario.rego").write_text(SCENARIO, encoding="utf-8")
    (found,) = _stale_generated([policies / "kcp" / "evaluators"])
    assert found.severity == "error" and found.code == "generated_stale" and "kcp-opa generate" in found.message


def test_a_finding_that_names_its_evaluator_is_refused_by_check(tmp_path: Path) -> None:
    """A finding names no evaluator: the gate takes the id and version from the package METADATA.
    A literal that names one (here, one that disagrees) or has a key of its own is an error."""
    from kcp_opa.authoring.findingcheck import finding_problems
    from kcp_opa.authoring.policytree import load_modules

    assert [p for p in finding_problems(load_modules([POLICIES])) if p.severity == "error"] == []
    named = SCENARIO.replace('"rule": "scenario.blocked",', '"rule": "scenario.blocked",\n\t\t"evaluator_id": "other",')
    extra = SCENARIO.replace('"details": {},', '"details": {},\n\t\t"severity": "high",')
    bare = "package " + SCENARIO.split("package ", 1)[1]
    modules = {"kcp/evaluators/a.rego": named, "kcp/evaluators/b.rego": extra, "kcp/evaluators/c.rego": bare}
    found = {(p.file, p.code) for p in finding_problems(modules) if p.severity == "error"}
    assert found == {
        ("kcp/evaluators/a.rego", "finding_names_evaluator"),
        ("kcp/evaluators/b.rego", "finding_shape"),
        ("kcp/evaluators/c.rego", "evaluator_metadata_missing"),
    }
    (message,) = [p.message for p in finding_problems(modules) if p.code == "finding_names_evaluator"]
    assert "scenario_check" in message  # names what the METADATA declares


def test_the_gate_reads_evaluators_only_through_the_union() -> None:
    """decision.rego imports no evaluator: obligations and risk come through the generated union."""
    decision = (POLICIES / "kcp" / "gate" / "decision.rego").read_text(encoding="utf-8")
    assert "data.kcp.evaluators" not in decision
    union = render_union(POLICIES)
    obligations = union.split("evaluator_obligations := ")[1].split("\n}\n")[0]
    assert 'name in {"freshness", "lifecycle", "trace"}' in obligations and ".obligations" in obligations
    risk_floor = union.split("evaluator_risk_floor := ")[1].split("\n}\n")[0]
    assert 'name in {"financial"}' in risk_floor and ".risk_floor" in risk_floor


def _overlay(tmp: Path) -> Path:
    overlay = tmp / "my-evaluators"
    overlay.mkdir()
    (overlay / "scenario.rego").write_text(SCENARIO, encoding="utf-8")
    (overlay / "scenario_test.rego").write_text(SCENARIO_TEST, encoding="utf-8")
    return overlay


def test_an_overlay_evaluator_is_tested_alone_and_compiled_beside_the_shipped_policies(tmp_path: Path) -> None:
    """docs/extending.md's overlay: the walk-through's evaluator in a directory of its own; `test
    --overlay` runs only its tests, `compile --overlay` registers it without a copy of the policies."""
    overlay = _overlay(tmp_path)
    tested = run_cli("test", str(POLICIES), "--overlay", str(overlay), "--no-cases", "--format", "json")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    ran = json.loads(tested.stdout)["tests"]
    assert {t["outcome"] for t in ran} == {"PASS"}
    assert {t["name"].rsplit(".", 1)[0] for t in ran} == {"data.kcp.evaluators.scenario_test"}, ran

    base = DEPLOYMENTS / "finance"
    bundle = tmp_path / "finance.tar.gz"
    compiled = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "matrix.yaml"), "--policies", str(POLICIES),
        "--overlay", str(overlay), "-o", str(bundle), "--no-engine-check", "--format", "json",
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    action = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text(encoding="utf-8"))
    (tmp_path / "action.json").write_text(json.dumps({**action, "scenario": "gift_card_purchase"}), encoding="utf-8")
    decided = run_cli(
        "decide", *VOUCH, "--bundle", str(bundle), "--input", str(tmp_path / "action.json"),
        "--now", "2026-11-29T10:00:00Z", "--format", "json",
    )  # fmt: skip
    decision = json.loads(decided.stdout)
    assert "scenario_blocked" in decision["reason_codes"], decision
    version = (POLICIES / "VERSION").read_text(encoding="utf-8").strip()
    assert decision["policy_version"].startswith(f"{version}+overlay."), decision["policy_version"]
    assert not (POLICIES / "kcp" / "evaluators" / "scenario.rego").exists()  # the shipped tree untouched
