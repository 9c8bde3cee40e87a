"""kcp_opa.compile.resolution: each name a rule uses resolves, or is named with its nearest spelling."""

from __future__ import annotations

from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.authoring.policytree import load_modules
from kcp_opa.compile.resolution import (
    policy_problems,
    recordable_controls,
    unresolved_approver_roles,
    unresolved_waived_codes,
    waivable_codes,
)
from kcp_opa.declare.matrix import load_matrix
from kcp_opa.declare.trust import load_trust

SHIPPED = load_modules([POLICIES])


def test_the_shipped_policies_resolve_with_and_without_a_registry() -> None:
    registry = load_trust(REPO / "fixtures" / "trust" / "registry.yaml").to_data()
    assert policy_problems(SHIPPED, None) == [] and policy_problems(SHIPPED, registry) == []
    assert waivable_codes(SHIPPED) == {
        "external_llm_forbidden", "field_access_violation", "matrix_approve", "matrix_confirm", "unit_stale",
    }  # fmt: skip


def test_a_waivable_code_no_rule_emits_is_named_with_its_line_and_nearest_code() -> None:
    name = "kcp/evaluators/freshness.rego"
    modules = {**SHIPPED, name: SHIPPED[name].replace("waivable: [unit_stale]", "waivable: [unit_stael]")}
    (problem,) = policy_problems(modules, None)
    lines = modules[name].splitlines()
    marked = next(n for n, text in enumerate(lines) if "unit_stael" in text)
    metadata = max(n for n in range(marked) if lines[n] == "# METADATA") + 1  # the block's first line
    assert (problem.file, problem.line, problem.code) == (name, metadata, "unknown_waivable")
    assert "(did you mean unit_stale?)" in problem.message


def test_a_rule_that_computes_its_code_is_not_judged() -> None:
    """The matrix builds matrix_<level>: its declared codes cannot be read off a literal."""
    name = "kcp/evaluators/matrix.rego"
    modules = {**SHIPPED, name: SHIPPED[name].replace("[matrix_confirm, matrix_approve]", "[matrix_escalate]")}
    assert policy_problems(modules, None) == []


def test_a_registry_declared_separation_of_duties_control_is_recordable() -> None:
    assert "medical_review" not in recordable_controls(SHIPPED, None)
    assert "medical_review" in recordable_controls(SHIPPED, {"separation_of_duties": ["medical_review"]})


def test_approver_roles_resolve_against_the_registry_principals() -> None:
    path = DEPLOYMENTS / "support-desk" / "matrix.yaml"
    parameters = load_matrix(path).parameters()
    registry = load_trust(REPO / "fixtures" / "trust" / "registry.yaml").to_data()
    assert unresolved_approver_roles(parameters, registry, str(path)) == []
    nobody = {"principals": {"clerk": {"type": "human", "roles": ["support_leed"]}}}
    problems = unresolved_approver_roles(parameters, nobody, str(path))
    assert [p.name for p in problems] == ["support_lead", "finance_reviewer", "manager"]
    assert "(did you mean support_leed?)" in problems[0].message and problems[0].line is None


def test_a_waived_code_resolves_against_the_waivable_set() -> None:
    waivable = waivable_codes(SHIPPED)
    waived = [("x.yaml", 7, "EXC-1", c) for c in ("field_access_violation", "field_acess_violation", "tenant_boundary")]
    problems = unresolved_waived_codes(waived, waivable, "the shipped policies")
    assert [(p.name, p.line) for p in problems] == [("field_acess_violation", 7), ("tenant_boundary", 7)]
    assert str(problems[0]).startswith("x.yaml:7: exception EXC-1 waives field_acess_violation")
    assert "(did you mean field_access_violation?)" in str(problems[0]) and "terminal" in str(problems[1])
