"""The decision-case corpus (fixtures/cases/*.yaml) on regopy and on the OPA reference engine.

Every case is decided through ``Gate`` (regopy) with its audit ledger on; the exact input is
then evaluated by OPA over the same bundle, and the two policy results must be identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.authoring.casecontext import case_input
from kcp_opa.authoring.cases import SYSTEM_CONTROLS, DecisionCase, case_files, check_case, decision_trace, load_cases
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate

CASES = [case for path in case_files(REPO / "fixtures" / "cases") for case in load_cases(path)]


class _Deployments:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.gates: dict[str, Gate] = {}
        self.opa: dict[str, Any] = {}

    def gate(self, name: str) -> Gate:
        if name not in self.gates:
            base = DEPLOYMENTS / name
            path = self.root / f"{name}.tar.gz"
            compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, path)
            self.gates[name] = Gate.from_bundle(path)
        return self.gates[name]

    def opa_engine(self, name: str) -> Any:
        from opa_bindings import OpaEngine

        if name not in self.opa:
            bundle = self.gate(name).bundle
            engine = OpaEngine()
            for module, source in sorted(bundle.modules.items()):
                engine.add_policy(module, source)
            engine.add_data(bundle.data)
            self.opa[name] = engine
        return self.opa[name]


@pytest.fixture(scope="module")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> _Deployments:
    return _Deployments(tmp_path_factory.mktemp("case-bundles"))


def test_corpus_is_substantial() -> None:
    assert len(CASES) >= 30
    assert {case.deployment for case in CASES} == {
        "customer-onboarding",
        "support-desk",
        "finance",
        "kcp-governance",
        "kcp-visibility-access",
        "budget",
    }


@pytest.mark.parametrize("case", CASES, ids=[case.case_id for case in CASES])
def test_case(case: DecisionCase, deployments: _Deployments) -> None:
    gate = deployments.gate(case.deployment)
    prepared = case_input(case, satisfied_controls=SYSTEM_CONTROLS, bundle_revision=gate.bundle_revision)
    decision, on_regopy = gate.evaluate(prepared)
    assert decision.engine_error is None, decision.engine_error
    on_opa = deployments.opa_engine(case.deployment).eval_document("kcp.gate.decision", dict(prepared.document))
    assert on_regopy == on_opa, f"regopy and OPA diverge on {case.case_id}:\nregopy {on_regopy}\nopa    {on_opa}"
    problems = check_case(case, decision, decision_trace(case.action, decision))
    assert not problems, f"{case.file}:{case.line} {case.case_id}: " + "; ".join(problems)


FINDING_KEYS = {"code", "rule", "evaluator_id", "evaluator_version", "state", "controls", "message", "details"}
STATES = {"DENY", "COMPLIANCE_REVIEW", "ESCALATE", "HUMAN_APPROVAL", "IDENTITY_VERIFICATION"}
STATES |= {"STEP_UP_AUTHENTICATION", "USER_CONFIRMATION", "ALLOW"}


@pytest.mark.parametrize("deployment", ["customer-onboarding", "support-desk", "finance"])
def test_every_finding_has_the_one_shape(deployment: str, deployments: _Deployments) -> None:
    """Evaluators write finding objects literally (a constructor function cost regopy ~100 us a
    call); this pins the shape they share, over every finding the corpus produces, and that
    each carries the evaluator id and version its package's METADATA declares."""
    gate = deployments.gate(deployment)
    declared = gate.bundle.manifest["metadata"]["kcp_opa"]["evaluators"]
    opa = deployments.opa_engine(deployment)
    seen = 0
    for case in (c for c in CASES if c.deployment == deployment):
        prepared = case_input(case, bundle_revision=gate.bundle_revision)
        for finding in opa.eval_document("kcp.gate.findings", dict(prepared.document)):
            seen += 1
            # A finding an exception waived carries waived_by and routes nothing (kcp.gate.exceptions).
            waived = "waived_by" in finding and finding["state"] == "ALLOW" and finding["controls"] == []
            assert set(finding) - ({"waived_by"} if waived else set()) == FINDING_KEYS, (case.case_id, finding)
            assert finding["state"] in STATES, (case.case_id, finding)
            assert finding["controls"] == sorted(set(finding["controls"])), (case.case_id, finding)
            assert declared.get(finding["evaluator_id"]) == finding["evaluator_version"], (case.case_id, finding)
            assert isinstance(finding["details"], dict) and finding["message"], (case.case_id, finding)
    assert seen > 10


#: Reason codes no case can reach through Gate, each with the reason; Rego unit tests cover them.
UNREACHABLE_THROUGH_GATE = {
    "action_incomplete": "Gate refuses an incomplete action before evaluation (schema)",
    "decision_time_missing": "Gate always puts the decision time into input",
    "policy_undefined": "the fail-closed default decision; only a broken policy reaches it",
    "purpose_not_folded": "Gate always folds the purpose into input.context.folded (docs/input-contract.md)",
}


def test_every_decision_reason_code_has_a_case() -> None:
    import re

    emitted: set[str] = set()
    for path in (POLICIES / "kcp").rglob("*.rego"):
        if path.name.endswith("_test.rego") or path.parent.name == "controls":
            continue
        emitted |= set(re.findall(r'"code":\s*"(\w+)"', path.read_text()))
    expected = {code for case in CASES for code in case.expect.reason_codes or ()}
    emitted |= {"matrix_confirm", "matrix_approve", "matrix_forbidden"}  # built as "matrix_" + level
    assert emitted - expected == set(UNREACHABLE_THROUGH_GATE)
