"""A report never says valid beside an error, even one a check across files adds later.

``validate`` checks some files against others after each file's own report is built (an
exception's scope against the matrix's task types); an error found there must make the file
invalid in the text view, the JSON view and the exit code, never "valid" with exit 0.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from conftest import DEPLOYMENTS, run_cli
from exceptionkit import exception, key, write_file, write_registry

from kcp_opa.declare.diagnostics import Diagnostic, Report, Severity

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
MATRIX = DEPLOYMENTS / "support-desk" / "matrix.yaml"


def _files(tmp_path: Path, task_type: str) -> list[str]:
    signer = key()
    write_registry(tmp_path / "registry.yaml", signer)
    scope = {"tenant_id": "tenant_a", "unit": "support-desk/customer-records", "task_type": task_type}
    item = exception(signer, issued=NOW - dt.timedelta(hours=1), expires=NOW + dt.timedelta(hours=2), scope=scope)
    path = write_file(tmp_path / "exceptions.yaml", [item])
    return [str(path), str(tmp_path / "registry.yaml"), str(MATRIX)]


def test_an_exception_for_a_task_type_the_matrix_lacks_is_invalid_through_the_cli(tmp_path: Path) -> None:
    files = _files(tmp_path, "refnud")  # the matrix has refund
    as_json = run_cli("validate", *files, "--format", "json")
    report = json.loads(as_json.stdout)[0]
    assert as_json.returncode == 1, as_json.stdout + as_json.stderr
    assert report["valid"] is False
    assert [e["code"] for e in report["errors"]] == ["exception_task_type_unknown"]
    assert "'refnud'" in report["errors"][0]["message"] and report["errors"][0]["line"] == 5
    as_text = run_cli("validate", *files, "--format", "text")
    first = as_text.stdout.splitlines()[0]
    assert as_text.returncode == 1 and "exceptions.yaml: invalid" in first, as_text.stdout
    assert "1 invalid" in as_text.stdout


def test_an_exception_for_a_declared_task_type_stays_valid(tmp_path: Path) -> None:
    proc = run_cli("validate", *_files(tmp_path, "refund"), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(r["valid"] for r in json.loads(proc.stdout))


def test_a_report_with_a_document_and_an_error_is_not_valid() -> None:
    error = Diagnostic(Severity.ERROR, "late", "found across files", (), file="a.yaml")
    report = Report("a.yaml", (error,), {}, object())
    assert not report.valid and report.to_dict()["valid"] is False
    assert Report("a.yaml", (), {}, object()).valid
