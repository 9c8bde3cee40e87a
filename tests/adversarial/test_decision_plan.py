"""The decision plan: `kcp-opa compile` stores which evaluators each unit profile and action type
can need, and a decision reaches only those. Skipping an evaluator that could have found
something would be a fail-open, so the plan is checked three ways here: regopy (which computes
it) against OPA, planned decisions against the same bundle without a plan (every evaluator
reached), and a plan that leaves an evaluator out is caught by the cases."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.authoring.casecontext import case_input
from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.compile.decisionplan import PLAN_ENTRYPOINT, action_types, build_plan, unnamed_action_type
from kcp_opa.compile.evaluatorgen import render_union
from kcp_opa.core.errors import CompileError
from kcp_opa.decide.crosscheck import opa_query
from kcp_opa.decide.engine import RegopyEngine

CASES = [case for path in sorted((REPO / "fixtures" / "cases").glob("*.yaml")) for case in load_cases(path)]
REFERENCE = sorted(p.name for p in DEPLOYMENTS.iterdir() if (p / "matrix.yaml").is_file())


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedBundle]:
    out = tmp_path_factory.mktemp("plan")
    found = {}
    for name in sorted({c.deployment for c in CASES} | set(REFERENCE)):
        base = DEPLOYMENTS / name
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out / f"{name}.tar.gz")
        found[name] = read_bundle(out / f"{name}.tar.gz", skip_verification=True)
    return found


def _without_plan(bundle: LoadedBundle) -> LoadedBundle:
    data = {k: v for k, v in bundle.data["kcp_data"].items() if k != "plan"}
    return dataclasses.replace(bundle, data={**bundle.data, "kcp_data": data})


def _with_plan(bundle: LoadedBundle, plan: Mapping[str, Any]) -> LoadedBundle:
    return dataclasses.replace(bundle, data={**bundle.data, "kcp_data": {**bundle.data["kcp_data"], "plan": plan}})


@pytest.mark.parametrize("name", REFERENCE)
def test_regopy_and_opa_compute_the_same_plan(bundles: dict[str, LoadedBundle], name: str) -> None:
    bundle = bundles[name]
    mounts = {f"kcp_data/{k}": v for k, v in bundle.data["kcp_data"].items() if k != "plan"}
    named = action_types(mounts)
    query = f"data.{PLAN_ENTRYPOINT.replace('/', '.')}"
    (table,) = opa_query(bundle, query, {"task_types": named, "other": unnamed_action_type(named)}, values_only=True)
    stored_plan = bundle.data["kcp_data"]["plan"]
    assert build_plan(bundle.modules, mounts, source=name) == stored_plan
    assert [row["other"] for row in table["profiles"]] == [row["other"] for row in stored_plan["profiles"]]
    assert table["unbound"]["other"] == stored_plan["unbound"]["other"]
    for row, stored in zip(table["profiles"], stored_plan["profiles"], strict=True):
        assert {t: n for t, n in zip(named, row["types"], strict=True) if n != row["other"]} == stored["types"]


def test_the_plan_skips_what_a_support_desk_read_cannot_reach(bundles: dict[str, LoadedBundle]) -> None:
    """The point of the plan: a read of a unit with no money, no lifecycle and an autonomous
    matrix cell reaches neither the matrix, the lifecycle, the authority nor the budget rules."""
    row = bundles["support-desk"].data["kcp_data"]["plan"]["profiles"][0]
    assert row["types"]["read"] == ["access", "delegation", "field_access", "freshness", "residency"]
    assert "matrix" in row["other"]  # an action type the matrix does not name is denied by it


def _decisions(bundle: LoadedBundle, cases: list[Any]) -> list[Any]:
    engine = RegopyEngine(bundle, preflight=False)
    found = []
    for case in cases:
        result = engine.evaluate(case_input(case, satisfied_controls=("standard_audit_logging",)).document)
        found.append(result.value if result.error is None else result.error)
    return found


@pytest.mark.parametrize("name", sorted({c.deployment for c in CASES}))
def test_a_planned_decision_is_the_decision_that_reaches_every_evaluator(
    bundles: dict[str, LoadedBundle], name: str
) -> None:
    cases = [c for c in CASES if c.deployment == name]
    assert _decisions(bundles[name], cases) == _decisions(_without_plan(bundles[name]), cases)


def test_a_plan_that_leaves_out_an_evaluator_changes_decisions_the_cases_pin(bundles: dict[str, LoadedBundle]) -> None:
    """The comparison above can fail: drop residency from every row of the support desk's plan
    and a case that needs it decides otherwise (so an applies that misses is caught)."""
    bundle = bundles["support-desk"]

    def without_residency(row: Mapping[str, Any]) -> dict[str, Any]:
        keep = [n for n in row["other"] if n != "residency"]
        return {"types": {t: [n for n in v if n != "residency"] for t, v in row["types"].items()}, "other": keep}

    plan = bundle.data["kcp_data"]["plan"]
    broken = {"profiles": [without_residency(r) for r in plan["profiles"]], "unbound": plan["unbound"]}
    cases = [c for c in CASES if c.deployment == "support-desk"]
    assert _decisions(_with_plan(bundle, broken), cases) != _decisions(bundle, cases)


def test_a_plan_cannot_drop_an_always_planned_evaluator(bundles: dict[str, LoadedBundle]) -> None:
    """The plan is data: a row naming nothing still reaches every evaluator without applies."""
    bundle = bundles["support-desk"]
    empty = {"types": {}, "other": []}
    plan = {"profiles": [empty for _ in bundle.data["kcp_data"]["profiles"]], "unbound": empty}
    case = next(c for c in CASES if c.case_id == "sd-cross-tenant-read")
    (decision,) = _decisions(_with_plan(bundle, plan), [case])
    assert decision["decision"] == "DENY"
    assert "tenant_boundary" in decision["reason_codes"]


def test_an_applies_that_reads_input_is_refused(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    module = policies / "kcp" / "evaluators" / "trace.rego"
    module.write_text(module.read_text() + "\napplies(_, _) if input.action.trace\n")
    with pytest.raises(CompileError, match=r"applies.*must not read input"):
        render_union(policies)


def test_every_action_type_a_declaration_names_gets_its_own_entry() -> None:
    mounts = {
        "kcp_data/matrix": {
            "task_types": ["read"],
            "kcp_actions": {"publish": "share_externally"},
            "parameters": {"budgets": [{"task_types": ["refund"]}, {"task_types": "all"}]},
        },
        "kcp_data/tasks": {"depth": 1, "count": 1, "slots": [{"send": {}}, {}]},
    }
    named = action_types(mounts)
    assert named == ["publish", "read", "refund", "send"]
    assert unnamed_action_type(named) not in named
    assert unnamed_action_type(["kcp-opa:unnamed"]) == "kcp-opa:unnamed_"


MALFORMED_TABLES = {
    "a row without other": (
        'plan_table := {"profiles": [{"types": [["residency"]]}], "unbound": {"types": [[]], "other": []}}'
    ),
    "names not strings": 'plan_table := {"profiles": [], "unbound": {"types": [[1]], "other": []}}',
    "too few types": 'plan_table := {"profiles": [], "unbound": {"types": [], "other": []}}',
}


@pytest.mark.parametrize("shape", sorted(MALFORMED_TABLES))
def test_a_malformed_plan_table_is_a_compile_error_not_a_plan_that_reaches_nothing(shape: str) -> None:
    """A plan row that read as "no evaluator" would skip every evaluator it leaves out (fail-open):
    compile refuses it, whatever Rego's plan_table returned, with one line naming the entrypoint."""
    module = f"package kcp.gate\n\n{MALFORMED_TABLES[shape]}\n"
    mounts = {"kcp_data/matrix": {"task_types": ["read"]}}
    with pytest.raises(CompileError, match="plan_table"):
        build_plan({"plan.rego": module}, mounts, source="attack")


@pytest.mark.parametrize("rule", ["other := 1", "plan_table := 1 if {\n\tfalse\n}"])
def test_an_undefined_plan_table_is_named_with_its_fix_not_blamed_on_loading_the_bundle(rule: str) -> None:
    """regopy answers an undefined entrypoint with the text ``undefined``; read as JSON, it made
    the compile error "regopy cannot load the bundle: json.decoder.JSONDecodeError: ..."."""
    with pytest.raises(CompileError) as caught:
        build_plan({"plan.rego": f"package kcp.gate\n\n{rule}\n"}, {"kcp_data/matrix": {}}, source="attack")
    assert str(caught.value) == (
        "attack: kcp/gate/plan_table is undefined over these policies and data: define it"
        " (`kcp-opa generate --policies attack` writes it into kcp/gate/evaluators.rego)"
    )


MALFORMED_DECLARATIONS: dict[str, dict[str, Any]] = {
    "the matrix a list": {"kcp_data/matrix": [{"task_types": ["read"]}]},
    "task_types a string": {"kcp_data/matrix": {"task_types": "refund"}},
    "a task type not a string": {"kcp_data/matrix": {"task_types": ["read", {"refund": True}]}},
    "kcp_actions a list": {"kcp_data/matrix": {"kcp_actions": ["publish"]}},
    "parameters a list": {"kcp_data/matrix": {"parameters": [{"budgets": [{"task_types": ["refund"]}]}]}},
    "budgets an object": {"kcp_data/matrix": {"parameters": {"budgets": {"daily": {"task_types": ["refund"]}}}}},
    "a budget a string": {"kcp_data/matrix": {"parameters": {"budgets": ["refund"]}}},
    "a budget's task_types an object": {
        "kcp_data/matrix": {"parameters": {"budgets": [{"task_types": {"refund": True}}]}}
    },
    "the task index a list": {"kcp_data/tasks": [{"send": {}}]},
    "the index depth a string": {"kcp_data/tasks": {"depth": "1", "slots": [{"send": {}}, {}]}},
    "a slot an object": {"kcp_data/tasks": {"depth": 1, "slots": {"0": {"send": {}}}}},
    "a leaf a list": {"kcp_data/tasks": {"depth": 1, "slots": [[{"send": {}}], {}]}},
}


@pytest.mark.parametrize("shape", sorted(MALFORMED_DECLARATIONS))
def test_a_malformed_declaration_of_action_types_is_a_compile_error_not_a_type_that_decides_as_other(
    shape: str,
) -> None:
    """Read leniently, each shape dropped a task type, which then decided as ``other``: the
    evaluators that apply only to it were never reached (a fail-open). Absent parts name none."""
    assert action_types({"kcp_data/matrix": {}, "kcp_data/tasks": {}}) == []
    with pytest.raises(CompileError, match="not"):
        action_types(MALFORMED_DECLARATIONS[shape])
