"""Fields per task type (`compliance.declared_fields_by_task_type`, docs/manifest-rules.md): the
key is known and compiled, `declared_fields` stays its ceiling, a task type the matrix lacks is
refused, and explain, prove and the audit entry read the task's list. The decisions themselves
are decision cases on both engines (fixtures/cases/support-desk.yaml, `sd-read-email-*`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, REPO, run_cli

from kcp_opa.analysis.space import derive_space
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.compile.datadoc import leaf_path
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.declare.effective import effective_unit
from kcp_opa.declare.manifest import Manifest
from kcp_opa.declare.unenforced import UnenforcedError

DESK = DEPLOYMENTS / "support-desk"
KEY = "declared_fields_by_task_type: {read: [subject, body]}"


def _desk(tmp_path: Path, listed: str = KEY) -> tuple[Path, Path]:
    """A copy of support-desk whose outbound-email declares LISTED instead of its read list."""
    knowledge = (DESK / "knowledge.yaml").read_text(encoding="utf-8")
    assert KEY in knowledge
    (tmp_path / "knowledge.yaml").write_text(knowledge.replace(KEY, listed), encoding="utf-8")
    shutil.copy(DESK / "matrix.yaml", tmp_path / "matrix.yaml")
    return tmp_path / "knowledge.yaml", tmp_path / "matrix.yaml"


def _compile(knowledge: Path, matrix: Path, out: Path) -> Path:
    compile_bundle([knowledge], matrix, REPO / "policies", out)
    return out


def _profile_of(bundle: Path, unit: str) -> dict[str, Any]:
    """The compiled profile of support-desk/UNIT, looked up as the gate does (the hashed index)."""
    data = read_bundle(bundle).data["kcp_data"]
    node = data["units"]["slots"]
    for digit in leaf_path(["support-desk", unit], int(data["units"]["depth"])):
        node = node[digit]
    profile: dict[str, Any] = data["profiles"][node["support-desk"][unit]["profile"]]
    return profile


def test_the_key_compiles_into_the_units_profile(tmp_path: Path) -> None:
    """Known, enforced and carried: compile accepts it (it was an unknown key compile refused)."""
    bundle = _compile(DESK / "knowledge.yaml", DESK / "matrix.yaml", tmp_path / "desk.tar.gz")
    compliance = _profile_of(bundle, "outbound-email")["compliance"]
    assert compliance["declared_fields_by_task_type"] == {"read": ["body", "subject"]}
    assert compliance["declared_fields"] == ["body", "email", "name", "subject"]
    other = _profile_of(bundle, "customer-records")["compliance"]
    assert "declared_fields_by_task_type" not in other  # said nothing: unchanged


def test_a_misspelt_key_is_refused_by_compile(tmp_path: Path) -> None:
    knowledge, matrix = _desk(tmp_path, KEY.replace("declared_fields_by", "declard_fields_by"))
    with pytest.raises(UnenforcedError, match="did you mean 'declared_fields_by_task_type'"):
        _compile(knowledge, matrix, tmp_path / "b.tar.gz")


def test_a_task_field_wider_than_declared_fields_is_refused(tmp_path: Path) -> None:
    knowledge, matrix = _desk(tmp_path, "declared_fields_by_task_type: {read: [subject, phone]}")
    proc = run_cli("validate", str(knowledge), "--format", "json")
    assert proc.returncode == 1, proc.stdout
    errors = json.loads(proc.stdout)["errors"]
    assert [(e["code"], e["path"]) for e in errors] == [
        ("task_fields_outside_declared_fields", "units[2].compliance.declared_fields_by_task_type.read[1]")
    ]
    with pytest.raises(ValidationFailedError, match="task_fields_outside_declared_fields"):
        _compile(knowledge, matrix, tmp_path / "b.tar.gz")


def test_a_task_type_the_matrix_lacks_is_an_error_with_the_matrix_and_refused_by_compile(tmp_path: Path) -> None:
    knowledge, matrix = _desk(tmp_path, "declared_fields_by_task_type: {read: [subject], anwser: [body]}")
    alone = run_cli("validate", str(knowledge), "--format", "json")
    assert alone.returncode == 0, alone.stdout  # without the matrix nobody knows the task types
    both = run_cli("validate", str(knowledge), str(matrix), "--format", "json")
    assert both.returncode == 1, both.stdout
    errors = [e for r in json.loads(both.stdout) for e in r["errors"]]
    assert [(e["code"], e["path"]) for e in errors] == [
        ("task_fields_unknown_task_type", "units[2].compliance.declared_fields_by_task_type.anwser")
    ]
    assert "did you mean 'answer'" in errors[0]["message"]
    with pytest.raises(ValidationFailedError, match="task_fields_unknown_task_type"):
        _compile(knowledge, matrix, tmp_path / "b.tar.gz")
    compiled = run_cli("compile", str(knowledge), "--matrix", str(matrix), "-o", str(tmp_path / "c.tar.gz"))
    assert compiled.returncode != 0 and "Traceback" not in compiled.stderr
    assert "'anwser'" in compiled.stderr and not (tmp_path / "c.tar.gz").exists()


def test_the_compiled_list_never_exceeds_declared_fields_even_unvalidated() -> None:
    """The effective view cuts a by-task list to the ceiling: data that skipped validation still
    grants no field outside declared_fields."""
    data = {
        "project": "p",
        "compliance": {"declared_fields": ["status"], "declared_fields_by_task_type": {"read": ["status", "scan"]}},
        "units": [{"id": "u", "path": "u.md", "intent": "U", "scope": "global", "audience": ["agent"]}],
    }
    policy = effective_unit(Manifest("m.yaml", "0" * 64, data), "u").to_policy_data()
    assert policy["compliance"]["declared_fields_by_task_type"] == {"read": ["status"]}


def test_explain_shows_the_lists_and_where_they_came_from() -> None:
    proc = run_cli("explain", str(DESK / "knowledge.yaml"), "outbound-email", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["effective"]["compliance"]["declared_fields_by_task_type"] == {"read": ["body", "subject"]}
    assert shown["sources"]["compliance.declared_fields_by_task_type"] == "unit"


def test_prove_generates_declared_reads_from_the_tasks_list(tmp_path: Path) -> None:
    """prove's "declared" fields for a read of outbound-email are the read list's, so its clean
    reads stay clean (from declared_fields they were [body, email]: a DENY, never an ALLOW)."""
    space = derive_space(read_bundle(_compile(DESK / "knowledge.yaml", DESK / "matrix.yaml", tmp_path / "d.tar.gz")))
    names = [d.name for d in space.dims]
    labels = {d.name: [c.label for c in d.choices] for d in space.dims}
    row = [0] * len(names)
    row[names.index("unit")] = labels["unit"].index("support-desk/outbound-email")
    row[names.index("fields")] = labels["fields"].index("declared")
    for task, expected in (("read", ["body", "subject"]), ("send", ["body", "email"])):
        row[names.index("task")] = labels["task"].index(task)
        assert space.sample(row).action["knowledge"]["fields_read"] == expected
