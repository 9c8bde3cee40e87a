"""Attack class: money moved, or money controls dodged, through the task type an agent names.

Before the matrix could list its money-moving task types, any amount made an action a value
transfer whatever its type, so an `answer` (autonomous) stating an amount was routed as a value
transfer the user merely confirms, and which controls a threshold requires could not be set per
task type ("a supervisor only above 1,000.00 EUR" was not expressible). Real bundles; every
decision on regopy and, cross-checked, on OPA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from actionkit import DROP, support_answer, support_refund, with_
from conftest import run_cli, vouched_gate

from kcp_opa import Gate
from kcp_opa.analysis.space import derive_space
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.declare.matrix import validate_matrix

REPO = Path(__file__).resolve().parents[2]
DESK = REPO / "fixtures" / "deployments" / "support-desk"
FINANCE = REPO / "fixtures" / "deployments" / "finance"
TRUST = REPO / "fixtures" / "trust" / "registry.yaml"
NOW = "2026-11-29T10:00:00Z"


def _matrix(tmp_path: Path, **parameters: Any) -> Path:
    doc = yaml.safe_load((DESK / "matrix.yaml").read_text())
    for key, value in parameters.items():
        if value is None:
            doc["parameters"].pop(key, None)
        else:
            doc["parameters"][key] = value
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _gate(out: Path, matrix: Path) -> Gate:
    compile_bundle([DESK / "knowledge.yaml"], matrix, REPO / "policies", out / "desk.tar.gz")
    return vouched_gate(out / "desk.tar.gz", cross_check="opa")


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return _gate(tmp_path_factory.mktemp("desk"), DESK / "matrix.yaml")


@pytest.mark.parametrize(
    "amount",
    [
        {"value_minor": 2000, "currency": "EUR"},
        {"value_minor": 0, "currency": "EUR"},
        {"value_minor": 1, "currency": "XTS"},
    ],
)
def test_an_amount_on_a_moneyless_task_type_is_denied(desk: Gate, amount: Any) -> None:
    assert desk.decide(support_answer(), now=NOW).decision.value == "ALLOW"  # the baseline
    decision = desk.decide(with_(support_answer(), amount=amount), now=NOW)
    assert decision.decision.value == "DENY" and not decision.execution_allowed
    assert "amount_on_non_money_action" in decision.reason_codes
    assert "value_transfer" not in decision.reason_codes


def test_without_the_list_any_amount_is_a_value_transfer(tmp_path: Path) -> None:
    """What the list adds, on the same deployment without it: the answer is a value transfer."""
    gate = _gate(tmp_path, _matrix(tmp_path, money_moving_task_types=None))
    decision = gate.decide(with_(support_answer(), amount={"value_minor": 2000, "currency": "EUR"}), now=NOW)
    assert decision.decision.value == "USER_CONFIRMATION" and "value_transfer" in decision.reason_codes


def test_controls_per_task_type_replace_the_defaults_for_that_type(tmp_path: Path) -> None:
    """A supervisor only from the threshold on, no member confirmation below it."""
    controls = {"refund": {"value_transfer": "none", "high_value": ["independent_human_approval"]}}
    gate = _gate(tmp_path, _matrix(tmp_path, money_controls_by_task_type=controls))
    small = gate.decide(with_(support_refund(), amount={"value_minor": 4500, "currency": "EUR"}), now=NOW)
    assert "value_transfer" in small.reason_codes and "high_value" not in small.reason_codes
    assert "user_confirmation" not in small.required_controls
    large = gate.decide(with_(support_refund(), amount={"value_minor": 50000, "currency": "EUR"}), now=NOW)
    assert {"high_value", "value_transfer"} <= set(large.reason_codes)
    assert "independent_human_approval" in large.required_controls
    assert not {"user_confirmation", "identity_verification", "authority_verification"} & set(large.required_controls)


def _codes(matrix: Path) -> dict[str, str]:
    return {d.code: d.message for d in validate_matrix(matrix).diagnostics}


@pytest.mark.parametrize(
    ("parameters", "code", "says"),
    [
        ({"money_moving_task_types": ["refunds"]}, "money_task_type_unknown", "did you mean 'refund'?"),
        ({"money_controls_by_task_type": {"refund": {"high_value": []}}}, "money_controls_empty", "'none'"),
        (
            {"money_controls_by_task_type": {"send": {"value_transfer": "none"}}},
            "money_controls_for_moneyless_task",
            "",
        ),
        ({"money_controls_by_task_type": {"refnd": {"value_transfer": "none"}}}, "money_task_type_unknown", "refund"),
    ],
)
def test_a_money_declaration_that_could_not_apply_is_refused(
    tmp_path: Path, parameters: dict[str, Any], code: str, says: str
) -> None:
    matrix = _matrix(tmp_path, **parameters)
    found = _codes(matrix)
    assert code in found and says in found[code], found
    with pytest.raises(ValidationFailedError):
        compile_bundle([DESK / "knowledge.yaml"], matrix, REPO / "policies", tmp_path / "b.tar.gz")
    result = run_cli("validate", str(matrix), "--format", "text")
    assert result.returncode != 0 and code in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_control_is_refused_at_compile_with_its_line(tmp_path: Path) -> None:
    controls = {"refund": {"high_value": ["independent_human_aproval"]}}
    matrix = _matrix(tmp_path, money_controls_by_task_type=controls)
    assert validate_matrix(matrix).valid  # a registry may declare any control: compile resolves it
    result = run_cli(
        "compile", str(DESK / "knowledge.yaml"), "--matrix", str(matrix), "-o", str(tmp_path / "b.tar.gz"),
        "--no-engine-check",
    )  # fmt: skip
    text = result.stdout + result.stderr
    assert result.returncode != 0 and "unknown_control" in text and "Traceback" not in text
    assert "did you mean independent_human_approval?" in text and "matrix.yaml:" in text


def test_a_registry_control_resolves_with_trust(tmp_path: Path) -> None:
    """sanctions_override is the registry's separation-of-duties control: unknown without it."""
    controls = {"refund": {"high_value": ["sanctions_override"]}}
    matrix = _matrix(tmp_path, money_controls_by_task_type=controls)
    with pytest.raises(ValidationFailedError):
        compile_bundle([DESK / "knowledge.yaml"], matrix, REPO / "policies", tmp_path / "a.tar.gz")
    out = tmp_path / "b.tar.gz"
    compile_bundle([DESK / "knowledge.yaml"], matrix, REPO / "policies", out, options=CompileOptions(trust_path=TRUST))
    gate = vouched_gate(out, cross_check="opa")
    decision = gate.decide(with_(support_refund(), amount={"value_minor": 50000, "currency": "EUR"}), now=NOW)
    assert "sanctions_override" in decision.required_controls
    assert decision.decision.value == "HUMAN_APPROVAL"  # never a hold


def test_the_generator_gives_only_money_moving_types_a_clean_amount(tmp_path: Path) -> None:
    out = tmp_path / "finance.tar.gz"
    compile_bundle([FINANCE / "knowledge.yaml"], FINANCE / "matrix.yaml", REPO / "policies", out)
    space = derive_space(read_bundle(out))
    names = [d.name for d in space.dims]
    tasks = [c.label for c in space.dims[names.index("task")].choices]
    for task in ("payment", "read"):
        row = [0] * len(space.dims)
        row[names.index("task")] = tasks.index(task)
        action = space.sample(row).action
        assert ("amount" in action) == (task == "payment"), action


def test_a_payroll_run_without_amount_is_no_executable_allow(tmp_path: Path) -> None:
    """Payroll is no built-in money-moving type: a run naming no unit and stating no amount was an
    executable ALLOW (``prove``'s only ALLOW on finance). Finance lists it: amount_missing."""
    out = tmp_path / "finance.tar.gz"
    compile_bundle([FINANCE / "knowledge.yaml"], FINANCE / "matrix.yaml", REPO / "policies", out)
    gate = vouched_gate(out, cross_check="opa")
    payroll = with_(
        support_answer(),
        {"knowledge": DROP},
        tenant_id="tenant_demo",
        action_type="payroll",
        requested_action="execute_payroll",
        target={"type": "account", "reference": "acct_payroll_001", "tenant_id": "tenant_demo"},
        authorization_context={"requested_by": "user_1", "agent_scope": ["execute_payroll"]},
    )
    decision = gate.decide(payroll, now=NOW)
    assert decision.decision.value == "DENY" and not decision.execution_allowed
    assert "amount_missing" in decision.reason_codes
