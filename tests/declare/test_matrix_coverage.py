"""What no matrix row covers, and data categories the vocabulary does not know: `kcp-opa validate`
says so truthfully, and --strict fails on it (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli
from deploykit import HR_LEAVE as HR
from deploykit import hr_leave_copy


def test_an_unknown_data_category_warning_is_spelled_right_and_tells_the_truth(tmp_path: Path) -> None:
    dep = hr_leave_copy(tmp_path, categories="[personal, helth]")
    proc = run_cli("validate", str(dep / "knowledge.yaml"), "--format", "json")
    warnings = json.loads(proc.stdout)["warnings"]
    codes = [w["code"] for w in warnings]
    assert "data_category_misspelt" in codes and "unknown_data_categorie" not in codes  # a near miss
    message = next(w["message"] for w in warnings if w["code"] == "data_category_misspelt")
    assert "ignored" not in message and "matrix_not_covered" in message and "did you mean 'health'" in message
    custom = hr_leave_copy(tmp_path / "custom", categories="[personal, leave_history]")
    proc = run_cli("validate", str(custom / "knowledge.yaml"), "--format", "json")
    assert "unknown_data_category" in [w["code"] for w in json.loads(proc.stdout)["warnings"]]


def test_validate_reports_what_no_matrix_row_covers_and_strict_fails_on_it(tmp_path: Path) -> None:
    dep = hr_leave_copy(tmp_path, categories="[personal, health]")
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


FINANCE = Path(__file__).resolve().parents[2] / "fixtures" / "deployments" / "finance"


def _findings(proc_stdout: str, severity: str) -> dict[str, tuple[str, str]]:
    return {f["path"]: (f["code"], f["message"]) for r in json.loads(proc_stdout) for f in r[severity]}


def test_a_matrix_cell_no_action_can_reach_is_a_warning_that_says_why(tmp_path: Path) -> None:
    """KYA withdrawals name no unit: `withdrawal: {financial: forbidden}` with no financial unit
    never applies (decide routes such a withdrawal by the financial rules), and validate says so."""
    knowledge = (FINANCE / "knowledge.yaml").read_text(encoding="utf-8").replace("[financial]", "[personal]")
    knowledge = knowledge.replace("[financial, personal]", "[personal]")
    (tmp_path / "knowledge.yaml").write_text(knowledge, encoding="utf-8")
    files = [str(tmp_path / "knowledge.yaml"), str(FINANCE / "matrix.yaml")]
    proc = run_cli("validate", *files, "--format", "json")
    assert proc.returncode == 0, proc.stdout
    warned = _findings(proc.stdout, "warnings")
    code, message = warned["task_types.withdrawal.data_categories.financial"]
    assert code == "matrix_cell_unreachable"
    assert "(forbidden) can never apply" in message and "declares data_categories 'financial'" in message
    assert "withdrawal need not name a unit" in message  # the second reason: KYA intents name none
    assert run_cli("validate", "--strict", *files, "--format", "text").returncode == 1


def test_a_cell_of_a_unit_less_task_type_is_noted_where_units_can_reach_it() -> None:
    files = [str(FINANCE / "knowledge.yaml"), str(FINANCE / "matrix.yaml")]
    proc = run_cli("validate", *files, "--format", "json")
    assert proc.returncode == 0 and not _findings(proc.stdout, "warnings"), proc.stdout
    code, message = _findings(proc.stdout, "notes")["task_types.withdrawal.data_categories.financial"]
    assert code == "matrix_cell_unit_less" and "one that names no unit (a KYA intent) meets no cell" in message
    assert "task_types.read.data_categories.financial" not in _findings(proc.stdout, "notes")  # reads name units
