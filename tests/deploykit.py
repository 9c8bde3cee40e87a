"""Deployments the CLI tests build on: the hr manifest of issue 17 (a restricted health unit
beside a payroll unit) and a copy of tests/deployments/hr-leave with a case file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from conftest import REPO

HR_LEAVE = REPO / "tests" / "deployments" / "hr-leave"


HR_MANIFEST = """\
kcp_version: "0.14"
project: hr
compliance:
  sensitivity: restricted
  data_residency: [EU]
units:
  - id: payroll
    path: payroll/runs.md
    intent: "How a payroll run is approved."
    scope: project
    audience: [agent]
    compliance:
      data_categories: [financial, personal]
      legal_basis: legal_obligation
"""
#: The restricted health unit (its legal basis to fill in): the unit a ROPA must ask Article 9 for.
SICK_LEAVE_UNIT = """\
  - id: sick-leave
    path: hr/sick-leave.md
    intent: "Who is on sick leave."
    scope: project
    audience: [agent]
    access: restricted
    auth_scope: hr:health
    compliance:
      data_categories: [health, personal]
      legal_basis: {basis}
"""
HR_MANIFEST += SICK_LEAVE_UNIT


def hr_manifest(tmp_path: Path, basis: str = "legitimate_interests") -> Path:
    path = tmp_path / "knowledge.yaml"
    path.write_text(HR_MANIFEST.format(basis=basis), encoding="utf-8")
    return path


def hr_leave_copy(tmp_path: Path, *, categories: str = "[personal]", matrix_typo: bool = False) -> Path:
    """A copy of the hr-leave deployment with a case file: tmp/deployments/hr, tmp/cases/hr.yaml."""
    dep = tmp_path / "deployments" / "hr"
    shutil.copytree(HR_LEAVE, dep)
    manifest = dep / "knowledge.yaml"
    manifest.write_text(manifest.read_text().replace("data_categories: [personal]", f"data_categories: {categories}"))
    if matrix_typo:
        matrix = dep / "matrix.yaml"
        matrix.write_text(matrix.read_text().replace("personal: approve", "personal: aprove"))
    action = json.loads((HR_LEAVE / "action.json").read_text())
    cases = {
        "deployment": "hr",
        "now": "2026-11-29T10:00:00Z",
        "context": {"from_action": True},
        "base_action": action,
        "cases": [
            {"case_id": "hr-approve", "description": "a", "action": {}, "expect": {"decision": "HUMAN_APPROVAL"}},
            {"case_id": "hr-again", "description": "b", "action": {}, "expect": {"decision": "HUMAN_APPROVAL"}},
        ],
    }
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "hr.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    return dep
