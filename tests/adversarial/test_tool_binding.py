"""Attack class: a task type that does not match its tool. The gate decides on the caller's
``action_type``; the receipt runs the handler bound to its ``requested_action``. Before the matrix
bound tools to task types, a ``read`` (autonomous on support-desk) naming ``refunds.create`` was an
executable ALLOW whose receipt ran the refund handler, and a payroll run could name the payment
tool. Real bundles; every decision on regopy and, cross-checked, on OPA."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from actionkit import support_read, with_
from conftest import run_cli, vouched_gate

from kcp_opa import Gate
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.declare.matrix import validate_matrix
from kcp_opa.trail.ledger import AuditLedger

REPO = Path(__file__).resolve().parents[2]
DESK = REPO / "fixtures" / "deployments" / "support-desk"
NOW = "2026-11-29T10:00:00Z"


def _gate(out: Path, matrix: Path) -> Gate:
    compile_bundle([DESK / "knowledge.yaml"], matrix, REPO / "policies", out / "desk.tar.gz")
    return vouched_gate(out / "desk.tar.gz", cross_check="opa", ledger=AuditLedger(out / "ledger.jsonl"))


def _unbound_matrix(out: Path) -> Path:
    doc = yaml.safe_load((DESK / "matrix.yaml").read_text())
    for entry in doc["task_types"].values():
        entry.pop("requested_actions", None)
    path = out / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return _gate(tmp_path_factory.mktemp("bound"), DESK / "matrix.yaml")


def test_the_read_with_its_own_tool_is_an_executable_allow(gate: Gate) -> None:
    decision = gate.decide(support_read(), now=NOW)
    assert decision.decision.value == "ALLOW" and decision.execution_allowed  # the baseline


@pytest.mark.parametrize("tool", ["refunds.create", "email.send", "crm.delete_customer"])
def test_a_read_naming_another_tool_is_denied(gate: Gate, tool: str) -> None:
    decision = gate.decide(with_(support_read(), requested_action=tool), now=NOW)
    assert decision.decision.value == "DENY" and not decision.execution_allowed
    assert "requested_action_not_in_task_type" in decision.reason_codes


def test_a_matrix_that_lists_no_tools_binds_none(tmp_path: Path) -> None:
    """What the binding adds, shown on the same deployment without it: the attack is an ALLOW."""
    gate = _gate(tmp_path, _unbound_matrix(tmp_path))
    decision = gate.decide(with_(support_read(), requested_action="refunds.create"), now=NOW)
    assert decision.decision.value == "ALLOW"


def _matrix_with(tmp_path: Path, **tools: list[str] | None) -> Path:
    doc = yaml.safe_load((DESK / "matrix.yaml").read_text())
    for task_type, listed in tools.items():
        if listed is None:
            doc["task_types"][task_type].pop("requested_actions")
        else:
            doc["task_types"][task_type]["requested_actions"] = listed
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("tools", "code"),
    [
        ({"read": ["crm.get_customer", "refunds.create"]}, "requested_action_in_several_task_types"),
        ({"answer": None}, "requested_actions_missing"),
    ],
)
def test_a_tool_a_caller_could_name_under_a_weaker_type_is_refused(
    tmp_path: Path, tools: dict[str, list[str] | None], code: str
) -> None:
    matrix = _matrix_with(tmp_path, **tools)
    report = validate_matrix(matrix)
    assert not report.valid and code in {d.code for d in report.diagnostics}
    with pytest.raises(ValidationFailedError):
        compile_bundle([DESK / "knowledge.yaml"], matrix, REPO / "policies", tmp_path / "b.tar.gz")
    result = run_cli("validate", str(matrix), "--format", "text")
    assert result.returncode != 0 and code in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
