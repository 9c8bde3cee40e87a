"""A matrix's parameters of the wrong shape: `kcp-opa validate` gives the schema's one-line error
and exit 1, never an internal error (the semantic checks read only what the schema passed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, run_cli

WRONG_SHAPES = {
    "approver_roles": "parameters.approver_roles: expected object, got string 'x'",
}


@pytest.mark.parametrize("parameter", sorted(WRONG_SHAPES))
def test_a_matrix_parameter_of_the_wrong_shape_is_a_schema_error(tmp_path: Path, parameter: str) -> None:
    text = (DEPLOYMENTS / "finance" / "matrix.yaml").read_text(encoding="utf-8")
    block = re.compile(rf"^  {parameter}:.*\n(?:    .*\n)*", re.MULTILINE)
    assert block.search(text), f"finance's matrix declares {parameter}"
    (tmp_path / "matrix.yaml").write_text(block.sub(f"  {parameter}: x\n", text, count=1), encoding="utf-8")
    proc = run_cli("validate", str(tmp_path / "matrix.yaml"), "--format", "text")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert WRONG_SHAPES[parameter] in proc.stdout
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
