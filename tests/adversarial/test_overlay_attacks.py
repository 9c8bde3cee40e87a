"""Attacks through a policy overlay: an overlay adds evaluators and nothing else.

An overlay directory is compiled beside the shipped policies (docs/extending.md). Rego merges
every module of a package, so an overlay module in the gate's package could add a rule to the
gate, and one in a shipped evaluator's package could redefine what it finds. Each is refused,
with one line, before anything is compiled or tested.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, run_cli

from kcp_opa.compile.overlay import overlaid, plan_overlay
from kcp_opa.core.errors import CompileError

_GATE_RULE = """package kcp.gate

import rego.v1

execution_allowed := true
"""

_SHIPPED_EVALUATOR = """# METADATA
# custom:
#   evaluator_id: matrix_check
#   evaluator_version: "9.9.9"
package kcp.evaluators.matrix

import rego.v1

findings := set()
"""

_LIBRARY = """package kcp.lib.money

import rego.v1

above(_, _) := false
"""


@pytest.mark.parametrize(
    ("name", "source", "says"),
    [
        ("gate.rego", _GATE_RULE, "cannot add to the gate"),
        ("matrix_override.rego", _SHIPPED_EVALUATOR, "is a shipped evaluator"),
        ("money.rego", _LIBRARY, "cannot add to the gate"),
    ],
)
def test_an_overlay_cannot_add_to_the_gate_the_library_or_a_shipped_evaluator(
    tmp_path: Path, name: str, source: str, says: str
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / name).write_text(source, encoding="utf-8")
    with pytest.raises(CompileError, match=says):
        plan_overlay(POLICIES, overlay)
    base = DEPLOYMENTS / "finance"
    out = tmp_path / "bundle.tar.gz"
    compiled = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "matrix.yaml"), "--policies", str(POLICIES),
        "--overlay", str(overlay), "-o", str(out), "--no-engine-check",
    )  # fmt: skip
    assert compiled.returncode != 0 and not out.exists()
    assert len(compiled.stderr.strip().splitlines()) == 1 and says in compiled.stderr, compiled.stderr
    tested = run_cli("test", str(POLICIES), "--overlay", str(overlay), "--no-cases")
    assert tested.returncode != 0 and says in tested.stderr, tested.stdout + tested.stderr


def test_an_overlay_cannot_replace_a_shipped_file(tmp_path: Path) -> None:
    """A new package in a file named like a shipped evaluator would take its place in the tree."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "matrix.rego").write_text(
        _SHIPPED_EVALUATOR.replace("kcp.evaluators.matrix", "kcp.evaluators.matrix_v2"), encoding="utf-8"
    )
    with pytest.raises(CompileError, match="already exists in the policies"):
        plan_overlay(POLICIES, overlay)
    with pytest.raises(CompileError), overlaid(POLICIES, overlay):
        pass


ATTACKS = Path(__file__).parent.parent / "fixtures" / "overlay-attacks"


@pytest.mark.parametrize(
    ("module", "says"),
    [
        # `package kcp.gate.exceptions # overlay`, then `package kcp.evaluators.evil` inside a raw
        # string: a line-by-line reader took the second for the package and the module forged an
        # exception in force for every action (HUMAN_APPROVAL -> ALLOW on the finance payroll case)
        ("disguised_gate.rego", "cannot add to the gate"),
        # waivable codes the shipped policies emit: a signed exception could then waive approvals
        ("widen_waivable.rego", "never a shipped one"),
        # an ALLOW finding naming an approver role replaced the matrix's payroll_controller
        ("approver_role.rego", "never an overlay's"),
    ],
)
def test_an_overlay_cannot_loosen_a_shipped_decision_by_stealth(tmp_path: Path, module: str, says: str) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / module).write_text((ATTACKS / module).read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(CompileError, match=says):
        plan_overlay(POLICIES, overlay)
    base = DEPLOYMENTS / "finance"
    out = tmp_path / "bundle.tar.gz"
    compiled = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "matrix.yaml"), "--policies", str(POLICIES),
        "--overlay", str(overlay), "-o", str(out), "--no-engine-check",
    )  # fmt: skip
    assert compiled.returncode != 0 and not out.exists(), compiled.stderr
    assert len(compiled.stderr.strip().splitlines()) == 1 and says in compiled.stderr, compiled.stderr


def test_an_overlay_test_module_cannot_join_a_shipped_package(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "a_test.rego").write_text("package kcp.evaluators.matrix\n\nimport rego.v1\n", encoding="utf-8")
    with pytest.raises(CompileError, match="ends in _test"):
        plan_overlay(POLICIES, overlay)
    (overlay / "a_test.rego").write_text("package kcp.evaluators.matrix_test\n\nimport rego.v1\n", encoding="utf-8")
    with pytest.raises(CompileError, match="shipped evaluator"):
        plan_overlay(POLICIES, overlay)


def test_a_bundle_with_an_overlay_always_names_it_in_its_policy_version(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "extra.rego").write_text(
        _SHIPPED_EVALUATOR.replace("kcp.evaluators.matrix", "kcp.evaluators.extra"), encoding="utf-8"
    )
    base = DEPLOYMENTS / "finance"
    done = run_cli(
        "compile", str(base / "knowledge.yaml"), "--matrix", str(base / "matrix.yaml"), "--overlay", str(overlay),
        "--policy-version", "0.1.0", "-o", str(tmp_path / "b.tar.gz"), "--no-engine-check",
    )  # fmt: skip
    assert done.returncode == 2 and "drop --policy-version" in done.stderr, done.stderr
