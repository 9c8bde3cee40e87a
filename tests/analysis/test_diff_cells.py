"""kcp-opa diff reaches every changed matrix cell: each is decided with actions aimed at it and
reported WEAKEN or STRENGTHEN, shown, held (naming what held it) or NOT REACHED (real bundles,
regopy, small budgets)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from conftest import DEPLOYMENTS, REPO, run_cli

from kcp_opa.analysis.diff import diff
from kcp_opa.analysis.report import diff_markdown, diff_text
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.declare.vocabulary import AUTONOMY_LEVELS


def _deployment(tmp: Path, name: str, label: str, edit: Any = None) -> Path:
    """A copy of a shipped deployment, its matrix passed through EDIT (a function of the dict)."""
    out = tmp / label
    shutil.copytree(DEPLOYMENTS / name, out)
    if edit is not None:
        matrix = yaml.safe_load((out / "matrix.yaml").read_text(encoding="utf-8"))
        edit(matrix["task_types"])
        (out / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    return out


def _bundle(deployment: Path) -> LoadedBundle:
    out = deployment.with_suffix(".tar.gz")
    compile_bundle([deployment / "knowledge.yaml"], deployment / "matrix.yaml", REPO / "policies", out)
    return read_bundle(out)


def _cells(report: Any) -> dict[str, dict[str, Any]]:
    return {f"{c.task} {c.value} {c.old} -> {c.new}": c.to_dict() for c in report.cells}


def test_a_lowered_payment_cell_masked_by_other_findings_fails_the_diff(tmp_path: Path) -> None:
    """finance: payment's financial cell lowered approve -> autonomous. No generated action shows
    it (the restricted cell and the unit's human approval hold every payment at approval), so the
    diff said "no change" (exit 0). Now the cell is named WEAKEN, held by what holds it, exit 1."""

    def lower(tasks: dict[str, Any]) -> None:
        tasks["payment"]["data_categories"]["financial"] = "autonomous"

    old, new = _deployment(tmp_path, "finance", "old"), _deployment(tmp_path, "finance", "new", lower)
    done = run_cli("diff", str(old), str(new), "--budget", "40", "--format", "text")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "payment financial approve -> autonomous WEAKEN held by" in done.stdout, done.stdout
    assert "human_approval_required" in done.stdout and "matrix_approve (sensitivity=restricted)" in done.stdout
    assert "no change" not in done.stdout
    as_json = json.loads(run_cli("diff", str(old), str(new), "--budget", "40", "--format", "json").stdout)
    [cell] = as_json["cells"]
    assert (cell["task_type"], cell["dimension"], cell["value"]) == ("payment", "data_categories", "financial")
    assert (cell["direction"], cell["status"]) == ("WEAKEN", "held") and as_json["weakens"] is True
    assert (
        cell["action"]["action_type"] == "payment" and cell["action"]["requested_action"] == "execute_domestic_payment"
    )
    allowed = run_cli("diff", str(old), str(new), "--budget", "40", "--format", "markdown", "--allow-weakening")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "| `payment` | `data_categories=financial` | approve -> autonomous | WEAKEN | held by" in allowed.stdout


def test_a_raised_cell_is_strengthen_and_shown(tmp_path: Path) -> None:
    """support-desk: read on personal data raised autonomous -> confirm: STRENGTHEN, a decided
    read shows it (ALLOW becomes USER_CONFIRMATION), exit 0."""

    def raise_(tasks: dict[str, Any]) -> None:
        tasks["read"]["data_categories"]["personal"] = "confirm"

    old, new = _deployment(tmp_path, "support-desk", "old"), _deployment(tmp_path, "support-desk", "new", raise_)
    done = run_cli("diff", str(old), str(new), "--budget", "40")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "read personal autonomous -> confirm STRENGTHEN shown" in done.stdout, done.stdout


def test_an_unchanged_matrix_lists_no_cells(tmp_path: Path) -> None:
    bundle = _bundle(_deployment(tmp_path, "finance", "same"))
    report = diff(bundle, bundle, budget=20)
    assert report.cells == [] and report.to_dict()["cells"] == [] and not report.unreached
    assert "matrix cells changed: 0" in diff_text(report) and "| task type |" not in diff_markdown(report)
    assert "no change" in diff_text(report)


def test_a_changed_cell_the_budget_did_not_reach_fails_even_when_it_strengthens(tmp_path: Path) -> None:
    """Two cells of two task types raised, a budget of one action: the second cell is NOT
    REACHED, and the diff fails (exit 1, even with --allow-weakening): it never says "no change"
    about a cell it did not check."""

    def raise_two(tasks: dict[str, Any]) -> None:
        tasks["read"]["data_categories"]["contact"] = "confirm"
        tasks["send"]["data_categories"]["personal"] = "approve"

    old, new = _deployment(tmp_path, "support-desk", "old"), _deployment(tmp_path, "support-desk", "new", raise_two)
    done = run_cli("diff", str(old), str(new), "--budget", "2", "--allow-weakening")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "read contact autonomous -> confirm STRENGTHEN shown" in done.stdout, done.stdout
    assert "send personal confirm -> approve STRENGTHEN NOT REACHED" in done.stdout, done.stdout
    assert "NOT REACHED: a changed matrix cell no decided action reached" in done.stdout.splitlines()[0]


def _lower_each(tasks: dict[str, Any]) -> None:
    for row in tasks.values():
        for dimension in ("data_categories", "sensitivity"):
            for value, level in (row.get(dimension) or {}).items():
                if level != "autonomous":
                    row[dimension][value] = AUTONOMY_LEVELS[AUTONOMY_LEVELS.index(level) - 1]


def test_every_cell_lowered_by_one_level_is_weaken_and_reached(tmp_path: Path) -> None:
    """support-desk and finance with every non-autonomous cell lowered one level at once: each
    cell is listed WEAKEN, and each is reached (shown or held) or needs no unit either has."""
    for name in ("support-desk", "finance"):
        old = _bundle(_deployment(tmp_path, name, f"{name}-old"))
        new = _bundle(_deployment(tmp_path, name, f"{name}-lowered", _lower_each))
        report = diff(old, new, budget=120)
        matrix = yaml.safe_load((DEPLOYMENTS / name / "matrix.yaml").read_text(encoding="utf-8"))["task_types"]
        lowered = {
            (task, value)
            for task, row in matrix.items()
            for dimension in ("data_categories", "sensitivity")
            for value, level in (row.get(dimension) or {}).items()
            if level != "autonomous"
        }
        assert {(c.task, c.value) for c in report.cells} == lowered, _cells(report)
        assert all(c.direction == "WEAKEN" for c in report.cells), _cells(report)
        assert not report.unreached, _cells(report)
        assert report.weakens
