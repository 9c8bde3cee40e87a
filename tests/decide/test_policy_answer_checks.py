"""What the gate makes of the policy's answer: every unit found at every depth of the compiled
unit index, and a policy that lies about execution is an engine error (issue 18, "Why").

Each test names the mutant it kills. They go through the real gate (regopy) over bundles
compiled here, and the OPA reference engine where the answer is compared.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from actionkit import support_read, with_
from conftest import DEPLOYMENTS, POLICIES, vouched_gate

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.compile.datadoc import index_depth
from kcp_opa.decide.gate import Gate

NOW = "2026-11-29T10:00:00Z"
HEADER = """kcp_version: "0.14"
project: synthetic
version: "1.0.0"
updated: "2026-11-20"
compliance:
  data_residency: [EU]
  regulations: [GDPR]
  sensitivity: internal
  restrictions: []
  legal_basis: contract
units:
"""


def _unit(i: int) -> str:
    # Odd units need human approval: a lookup that lands on the wrong entry shows.
    restrictions = "[human-approval-required]" if i % 2 else "[]"
    return (
        f'  - id: unit-{i:05d}\n    path: u/{i}.md\n    intent: "What unit {i} says."\n    scope: project\n'
        f'    audience: [agent]\n    validated: "2026-11-01"\n    compliance:\n'
        f"      declared_fields: [name, email]\n      data_categories: [contact]\n      restrictions: {restrictions}\n"
    )


def _action(unit: str) -> dict[str, Any]:
    return with_(support_read(), knowledge={"project": "synthetic", "unit": unit, "fields_read": ["name"]})


#: Unit counts that put the unit index at every depth, 0 to 4 (compile.datadoc.index_depth).
SIZES = {0: 2, 1: 20, 2: 300, 3: 600, 4: 8200}


@pytest.fixture(scope="module", params=sorted(SIZES))
def sized_gate(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Gate, int]:
    depth = request.param
    count = SIZES[depth]
    assert index_depth(count) == depth
    tmp = tmp_path_factory.mktemp(f"depth{depth}")
    knowledge = tmp / "knowledge.yaml"
    knowledge.write_text(HEADER + "".join(_unit(i) for i in range(count)))
    out = tmp / "bundle.tar.gz"
    compile_bundle([knowledge], DEPLOYMENTS / "support-desk" / "matrix.yaml", POLICIES, out)
    gate = vouched_gate(out)
    assert gate.bundle.data["kcp_data"]["units"]["depth"] == depth
    return gate, count


def test_every_unit_is_found_at_every_index_depth(sized_gate: tuple[Gate, int]) -> None:
    """Kills: the unit lookup at index depth 2 reading the wrong hex digit (no deployment was
    big enough to reach depth 2, so the gate's own lookup, kcp.lib.facts.unit, went untested
    there). Every unit must resolve to its own profile; an unknown one must not."""
    gate, count = sized_gate
    step = max(1, count // 40)
    for i in range(0, count, step):
        decision = gate.decide(_action(f"unit-{i:05d}"), now=NOW)
        expected = "HUMAN_APPROVAL" if i % 2 else "ALLOW"
        assert decision.decision.value == expected, (i, decision.reason_codes)
        assert "unknown_unit" not in decision.reason_codes
    missing = gate.decide(_action("unit-99999"), now=NOW)
    assert missing.decision.value == "DENY"


@pytest.fixture(scope="module")
def lying_gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """A gate over a broken policy that says ``execution_allowed: true`` whatever it decides."""
    tmp = tmp_path_factory.mktemp("lying")
    shutil.copytree(POLICIES, tmp / "policies")
    decision_rego = tmp / "policies" / "kcp" / "gate" / "decision.rego"
    source = decision_rego.read_text()
    honest = '"execution_allowed": authorization_status == "APPROVED",'
    assert honest in source
    decision_rego.write_text(source.replace(honest, '"execution_allowed": true,'))
    base = DEPLOYMENTS / "support-desk"
    out = tmp / "lying.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", tmp / "policies", out)
    return vouched_gate(out)


def test_a_policy_that_lies_about_execution_is_an_engine_error(lying_gate: Gate) -> None:
    action = with_(
        support_read(),
        {"target.tenant_id": "tenant_b"},
        knowledge={"project": "support-desk", "unit": "customer-records"},
    )
    decision = lying_gate.decide(action, now=NOW)
    assert decision.engine_error is not None and "execution_allowed" in decision.engine_error
    assert decision.decision.value == "DENY" and decision.execution_allowed is False
    assert decision.reason_codes == ("engine_error",)
