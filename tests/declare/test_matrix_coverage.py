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
    assert "unknown_data_category" in codes and "unknown_data_categorie" not in codes
    message = next(w["message"] for w in warnings if w["code"] == "unknown_data_category")
    assert "ignored" not in message and "matrix_not_covered" in message and "did you mean 'health'" in message


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
