"""kcp_opa/context/factcontract.py: each gate and attested fact against its stated path's contract."""

from __future__ import annotations

from typing import Any

import pytest

from kcp_opa.context.factcontract import GateFactError, check_fact, fact_problem


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("deployment_region", "EU"),
        ("environment", "production"),
        ("environment", "pre prod"),  # a name, not an identifier, as runtime.environment in an action
        ("actor_role", "onboarding_agent"),
        ("agent_scope", ["kyc.read_applicant", "answer.reply"]),
        ("agent_scope", []),
        ("model_id", "onboarding-llm-3"),
        ("model_hosting", "self_hosted"),
        ("evidence_status", "present"),
        ("new_beneficiary", False),
    ],
)
def test_contract_values_pass(name: str, value: Any) -> None:
    assert fact_problem(name, value) is None


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("deployment_region", '"EU"', "U+0022"),
        ("environment", '"production"', "U+0022"),
        ("deployment_region", "EU\x00", "U+0000"),
        ("deployment_region", "E U", "identifier"),
        ("deployment_region", "", "identifier"),
        ("deployment_region", 5, "not of type 'string'"),
        ("agent_scope", ["ok", '"quoted"'], "U+0022"),
        ("agent_scope", ["a b"], "/authorization_context/agent_scope/0"),
        ("model_hosting", "cloud", "is not one of"),
        ("environment", "x" * 129, "too long"),
        ("no_such_fact", "x", "not a fact"),
    ],
)
def test_breaking_values_are_named(name: str, value: Any, why: str) -> None:
    problem = fact_problem(name, value)
    assert problem is not None and why in problem


def test_check_fact_is_one_line_naming_the_setting() -> None:
    with pytest.raises(GateFactError) as refused:
        check_fact("deployment_region", '"EU"\n', "--region")
    message = str(refused.value)
    assert message.startswith("--region: deployment_region ") and "\n" not in message
    assert refused.value.code == "gate_fact"


def test_a_remembered_answer_is_only_ever_the_same_values_answer() -> None:
    """fact_problem remembers answers for plain values, keyed by exact type: True is not 1, a
    tuple is not a list, and asking again (in any order) gives the first answer every time."""
    asked = [
        ("model_hosting", True),
        ("model_hosting", 1),
        ("agent_scope", ["a"]),
        ("agent_scope", ("a",)),
        ("agent_scope", ["a b"]),
        ("deployment_region", "EU"),
        ("deployment_region", '"EU"'),
    ]
    first = [fact_problem(name, value) for name, value in asked]
    assert str(first[0]).startswith("True is not one of") and str(first[1]).startswith("1 is not one of")
    assert first[2] is None and "is not of type 'array'" in str(first[3])
    assert first[4] is not None and first[5] is None and first[6] is not None
    for _ in range(2):
        assert [fact_problem(name, value) for name, value in reversed(asked)] == first[::-1]
