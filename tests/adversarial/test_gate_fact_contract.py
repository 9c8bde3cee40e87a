"""Attack class: a gate fact that two engines read differently (a quoted region).

rego-cpp's input API reads a string wrapped in ``"`` as the text inside, so a gate configured
with ``deployment_region: '"EEA"'`` stood in an EEA residency rule on regopy and failed it on
OPA: an ``opa eval`` replay of the archived input decided otherwise (engine-findings item 24).
The action refuses such strings; on 284d160 the gate's own facts did not. Now every source is
held to the contract of the action path where the fact would be stated: configuration refuses
the value at load with one line (``serve --region``, the service config, a ``--context`` file, a
case file's ``config:``/``registry:`` blocks, ``StaticGateConfig``), and a fact that arrives at
decision time (a host's own source, a registry built in code) is dropped, recorded in
``input.context.facts_refused`` and answered ``context_missing`` on regopy and OPA alike.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, opa_query, run_cli, vouched_gate

from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.authoring.cases import check_context, load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import GateFactError, StaticGateConfig
from kcp_opa.context.factsources import Fact, fact
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.models.decision import RoutingState
from kcp_opa.service.config import ServiceConfig, ServiceConfigError

NOW = "2026-11-29T10:00:00Z"
QUOTED = '"EEA"'


@pytest.fixture(scope="module")
def onboarding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factcontract") / "customer-onboarding.tar.gz"
    base = DEPLOYMENTS / "customer-onboarding"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(engine_check=False)
    )
    return out


def _action() -> dict[str, Any]:
    """The onboarding checklist read; the region is the gate's alone (the action states none)."""
    cases = load_cases(REPO / "fixtures" / "cases" / "customer-onboarding.yaml")
    action = copy.deepcopy(next(c.action for c in cases if c.case_id == "co-checklist-read"))
    del action["runtime"]["deployment_region"]
    return action


@dataclasses.dataclass(frozen=True)
class HostRegion:
    """A host's own GateConfigSource (the protocol a deployment may implement): no load check of its own."""

    region: str

    def config_facts(self) -> dict[str, Fact]:
        return {"deployment_region": fact("deployment_region", self.region, "config:host")}

    def describe(self) -> dict[str, Any]:
        return {"kind": "config", "name": "host"}


def _decide(bundle: Path, region: str, **gate_options: Any) -> tuple[Any, dict[str, Any]]:
    action = _action()
    sources, principal = case_sources(action, {"from_action": True}, NOW)
    assert sources is not None
    sources = dataclasses.replace(sources, config=HostRegion(region))
    gate = vouched_gate(bundle, **gate_options)
    prepared = gate.prepare(action, now=NOW, principal=principal, context=sources)
    decision, _ = gate.evaluate(prepared)
    return decision, json.loads(json.dumps(prepared.document))


def test_the_plain_region_is_in_the_eea(onboarding: Path) -> None:
    decision, document = _decide(onboarding, "EEA", cross_check="opa")
    assert decision.decision is RoutingState.HUMAN_APPROVAL, decision.reason_codes
    assert document["context"]["facts"]["deployment_region"]["value"] == "EEA"


def test_a_quoted_region_at_decision_time_is_dropped_and_context_missing(onboarding: Path) -> None:
    decision, document = _decide(onboarding, QUOTED)  # regopy alone, as a gate runs by default
    assert decision.decision is RoutingState.DENY and "context_missing" in decision.reason_codes
    assert "deployment_region" not in document["context"]["facts"]
    [refused] = document["context"]["facts_refused"]
    assert refused["fact"] == "deployment_region" and refused["source"] == "config:host"
    assert "U+0022" in refused["reason"]


def test_both_engines_decide_the_dropped_fact_alike(onboarding: Path) -> None:
    """The cross-checked gate (a difference is engine_divergence) and OPA on the archived input."""
    decision, document = _decide(onboarding, QUOTED, cross_check="opa")
    assert "engine_divergence" not in decision.reason_codes, decision.engine_error
    assert decision.decision is RoutingState.DENY and "context_missing" in decision.reason_codes
    replayed = opa_query(read_bundle(onboarding), "data.kcp.gate.decision", document)
    assert replayed["decision"] == "DENY" and "context_missing" in replayed["reason_codes"]


def test_a_quoted_registry_fact_at_decision_time_is_dropped(onboarding: Path) -> None:
    """A registry built in code (a host's vouching gate): the actor role is refused, not read as its inside."""
    action = _action()
    sources, principal = case_sources(action, {"from_action": True, "registry": {"actor_role": '"admin"'}}, NOW)
    assert sources is not None
    gate = vouched_gate(onboarding, cross_check="opa")
    prepared = gate.prepare(action, now=NOW, principal=principal, context=sources)
    decision, _ = gate.evaluate(prepared)
    assert "engine_divergence" not in decision.reason_codes
    refused = prepared.document["context"]["facts_refused"]
    assert [r["fact"] for r in refused] == ["actor_role"] and refused[0]["source"].startswith("registry:")
    assert "actor_role" not in prepared.document["context"]["facts"]
    assert decision.decision is RoutingState.DENY


def test_static_gate_config_refuses_a_quoted_value() -> None:
    with pytest.raises(GateFactError, match="deployment_region"):
        StaticGateConfig(QUOTED)
    with pytest.raises(GateFactError, match="environment"):
        StaticGateConfig("EEA", '"production"')
    with pytest.raises(GateFactError, match="identifier"):
        StaticGateConfig("EEA region")  # not an identifier, as runtime.deployment_region in an action
    assert StaticGateConfig("EEA", "production").config_facts()["deployment_region"]["value"] == "EEA"


def test_service_config_refuses_a_quoted_region(tmp_path: Path) -> None:
    with pytest.raises(ServiceConfigError, match="--region"):
        ServiceConfig(bundle=tmp_path / "b.tar.gz", region=QUOTED)
    settings = tmp_path / "service.json"
    settings.write_text(json.dumps({"bundle": "b.tar.gz", "environment": '"prod"'}))
    with pytest.raises(ServiceConfigError, match="--environment"):
        ServiceConfig.from_file(settings)


def test_serve_refuses_a_quoted_region_in_one_line(onboarding: Path, tmp_path: Path) -> None:
    proc = run_cli("serve", "-b", str(onboarding), "--region", QUOTED, timeout=60)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()[:1]
    assert "--region" in line and "Traceback" not in proc.stderr
    settings = tmp_path / "service.json"
    settings.write_text(json.dumps({"bundle": str(onboarding), "region": QUOTED}))
    proc = run_cli("serve", "--config", str(settings), timeout=60)
    assert proc.returncode == 2 and "--region" in proc.stderr and "Traceback" not in proc.stderr


def test_decide_context_file_refuses_a_quoted_region(onboarding: Path, tmp_path: Path) -> None:
    context = tmp_path / "context.yaml"
    context.write_text(yaml.safe_dump({"from_action": True, "config": {"deployment_region": QUOTED}}))
    action = tmp_path / "action.json"
    action.write_text(json.dumps(_action()))
    proc = run_cli("decide", "--context", str(context), "-b", str(onboarding), "-i", str(action), "--now", NOW)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "config/deployment_region" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2  # the error, and click's "Try --help"


@pytest.mark.parametrize(
    ("block", "value"),
    [
        ({"config": {"deployment_region": QUOTED}}, "config/deployment_region"),
        ({"config": {"environment": '"production"'}}, "config/environment"),
        ({"registry": {"actor_role": '"onboarding_agent"'}}, "registry/actor_role"),
        ({"registry": {"agent_scope": ["kyc.read_applicant", '"answer.reply"']}}, "registry/agent_scope"),
        ({"registry": {"model": {"id": '"onboarding-llm-3"'}}}, "registry/model/id"),
    ],
)
def test_case_file_refuses_a_quoted_fact(tmp_path: Path, block: dict[str, Any], value: str) -> None:
    source = yaml.safe_load((REPO / "fixtures" / "cases" / "customer-onboarding.yaml").read_text())
    source["cases"] = [{**source["cases"][0], "context": block}]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(source, sort_keys=False))
    with pytest.raises(ValidationFailedError) as refused:
        load_cases(path)
    assert any(value in line for line in refused.value.errors), refused.value.errors
    assert check_context({"from_action": True, **block}) is not None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("model: {id: treasury-llm,", "model: {id: '\"treasury-llm\"',"),
        ("agent_scope: [prepare_payment,", "agent_scope: ['\"prepare_payment\"',"),
    ],
)
def test_trust_registry_refuses_a_quoted_gate_fact_at_load(tmp_path: Path, old: str, new: str) -> None:
    from kcp_opa.declare.trust import load_trust

    text = (REPO / "fixtures" / "trust" / "registry.yaml").read_text()
    assert old in text
    path = tmp_path / "registry.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ValidationFailedError) as refused:
        load_trust(path)
    assert any("U+0022" in line for line in refused.value.errors), refused.value.errors


def test_a_vouched_action_stating_a_quoted_fact_is_refused_at_its_path(onboarding: Path) -> None:
    """The host vouches for what the action states: the action's own contract names the path."""
    from kcp_opa.core.errors import ActionRejectedError

    action = _action()
    action["runtime"]["environment"] = '"production"'
    with pytest.raises(ActionRejectedError) as refused:
        vouched_gate(onboarding).decide(action, now=NOW)
    assert refused.value.path == "/runtime/environment"
