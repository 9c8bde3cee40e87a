"""Attacks on what `kcp-opa prove` calls proved: green must mean something was shown.

A proof over actions that all deny shows nothing about what the gate lets through, and a
restriction lost to a manifest typo leaves an action allowed that the generator must still try.
prove says VACUOUS (not PROVED) when no action reached ALLOW or an approval state or an
invariant's premise held for no action, and it decides what each restriction forbids on every
unit early, so the default budget finds the typo's hole.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import REPO, run_cli

from kcp_opa.analysis.engines import UserInvariants
from kcp_opa.analysis.prove import DEFAULT_BUDGET, prove
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

MATRIX = """kind: kcp-opa/delegation-matrix
format_version: 1
name: member-health-autonomy
version: "2026.11.1"
agreed_by:
  - {role: cto, name: "Ines Moreau", date: "2026-11-10"}
  - {role: compliance_officer, name: "Tomasz Kowal", date: "2026-11-11"}
task_types:
  read:
    data_categories: {health: autonomous, personal: autonomous, financial: autonomous, contact: autonomous}
    sensitivity: {public: autonomous, internal: autonomous, confidential: autonomous}
  summarize:
    data_categories: {health: autonomous, personal: autonomous, financial: autonomous}
    sensitivity: {public: autonomous, internal: autonomous, confidential: autonomous}
  answer:
    data_categories: {personal: autonomous}
    sensitivity: {public: autonomous, internal: autonomous, confidential: confirm}
  send:
    data_categories: {contact: confirm, personal: confirm}
    sensitivity: {public: autonomous, internal: confirm, confidential: confirm}
  pay_claim:
    data_categories: {financial: approve}
    sensitivity: {confidential: approve}
parameters:
  money:
    high_value_minor: {EUR: 500000}
  approver_roles:
    default: claims_lead
  sender_roles: [claims_agent]
"""

HEAD = """kcp_version: "0.14"
project: member-health
version: "2.3.0"
updated: "2026-11-20"
compliance:
  data_residency: [EU]
  regulations: [GDPR]
  sensitivity: confidential
  {restrictions}
  legal_basis: contract
auth:
  methods:
    - {{type: oauth2, issuer: "https://login.example-insurer.eu", scopes: ["members:read"]}}
trust:
  audit: {{agent_must_log: true, require_trace_context: false}}
delegation:
  max_depth: 2
  require_capability_attenuation: true
freshness_policy: {{max_age_days: 365, on_stale: warn}}
units:
  - id: member-health-records
    path: members/health.md
    access: authenticated
    intent: "What does the member's health record say about this claim?"
    scope: project
    audience: [agent, operator]
    validated: "2026-11-01"
    compliance:
      declared_fields: [member_id, diagnosis_code, treatment, claim_id]
      data_categories: [health, personal]
"""

MORE_UNITS = """  - id: claims
    path: claims/open.md
    access: authenticated
    intent: "Which claims are open for this member and what is their status?"
    scope: project
    audience: [agent, operator]
    validated: "2026-11-05"
    compliance:
      declared_fields: [claim_id, member_id, amount, status]
      data_categories: [financial, personal]
  - id: member-contact
    path: members/contact.md
    access: authenticated
    intent: "How do we reach the member?"
    scope: project
    audience: [agent]
    validated: "2026-11-10"
    compliance:
      declared_fields: [member_id, email, phone]
      data_categories: [contact, personal]
  - id: policy-terms
    path: policies/terms.md
    access: authenticated
    intent: "What does the member's policy cover?"
    scope: project
    audience: [agent, operator]
    sensitivity: internal
    validated: "2026-11-12"
  - id: provider-directory
    path: providers/directory.md
    intent: "Which providers are in network?"
    scope: global
    audience: [agent, human]
    sensitivity: public
    access: public
    validated: "2026-11-18"
"""

#: The insurer's own invariant: a member's health record never reaches an externally hosted
#: model. Its premise_ rule lets prove count the actions it was tested on.
HEALTH_INVARIANT = """package insurer.invariants

import rego.v1

_external_reads_health if {
	input.input.action.knowledge.unit == "member-health-records"
	input.input.action.runtime.model.hosting == "external"
}

premise_no_external_model_reads_health_records if _external_reads_health

default invariant_no_external_model_reads_health_records := true

invariant_no_external_model_reads_health_records := false if {
	_external_reads_health
	input.decision.decision == "ALLOW"
}
"""
HEALTH = "insurer.invariants.invariant_no_external_model_reads_health_records"


def _compile(deployment: Path, policies: Path = REPO / "policies") -> Path:
    """The bundle of DEPLOYMENT's knowledge.yaml and matrix.yaml (the one place a test compiles)."""
    out = deployment / f"{policies.parent.name}.tar.gz"
    compile_bundle([deployment / "knowledge.yaml"], deployment / "matrix.yaml", policies, out)
    return out


def _deployment(tmp: Path, restrictions: str, *, more_units: bool = False, acknowledge: str = "") -> Path:
    """A deployment; ACKNOWLEDGE is a declaration the matrix lists as knowingly unenforced
    (compile refuses an unknown key otherwise, so a typo reaches a bundle only this way)."""
    tmp.mkdir(parents=True, exist_ok=True)
    manifest = HEAD.format(restrictions=restrictions) + (MORE_UNITS if more_units else "")
    (tmp / "knowledge.yaml").write_text(manifest, encoding="utf-8")
    matrix = MATRIX
    if acknowledge:
        matrix += f"unenforced:\n  - at: '{acknowledge}'\n    reason: the typo under test\n"
    (tmp / "matrix.yaml").write_text(matrix, encoding="utf-8")
    return tmp


def _gate_decides(bundle: Path, action: dict[str, object], now: str) -> str:
    """What the gate itself decides for ACTION, with the facts it states vouched for."""
    gate = Gate(read_bundle(bundle), config=GateConfig(preflight=False))
    sources, principal = case_sources(action, {"from_action": True}, now)
    prepared = gate.prepare(action, now=now, principal=principal, context=sources)
    return str(gate.decide_prepared(prepared).decision.value)


def _target_unread(tmp: Path) -> Path:
    """A bad day: no-cross-border reads a misspelled target field, so it never sees a place and
    denies every action on a unit under it (the shape of a run that proved nothing)."""
    policies = tmp / "unread" / "policies"
    shutil.copytree(REPO / "policies", policies)
    residency = policies / "kcp" / "evaluators" / "residency.rego"
    text = residency.read_text(encoding="utf-8")
    assert text.count("input.action.target.country") == 3
    residency.write_text(text.replace("input.action.target.country", "input.action.target.contry"), encoding="utf-8")
    return policies


def test_a_proof_over_actions_that_all_deny_is_vacuous_not_proved(tmp_path: Path) -> None:
    """Root no-cross-border with a rule that denies every action on a unit: nothing breaks, but
    no action reached ALLOW or an approval state and the invariants about allowed actions were
    never tested. prove says VACUOUS with the counts, exit 1 with and without --strict."""
    deployment = _deployment(tmp_path / "ncb", "restrictions: [no-cross-border]")
    bundle = _compile(deployment, _target_unread(tmp_path))
    report = prove(read_bundle(bundle), budget=150, opa=False)
    assert not report.violations and report.verdict == "VACUOUS" and not report.proved
    assert not any(report.states[s] for s in ("ALLOW", "USER_CONFIRMATION", "HUMAN_APPROVAL")), report.states
    assert "no generated action reached ALLOW or an approval state" in report.vacuous()
    assert report.reach["contract.executable_only_with_every_control"] == 0
    assert "contract.executable_only_with_every_control: no generated action met its premise" in report.vacuous()
    assert set(report.units_passable.values()) == {0}
    unit = "unit member-health/member-health-records: no generated action on it reached ALLOW or an approval state"
    assert unit in report.vacuous()
    for strict in ((), ("--strict",)):
        done = run_cli("prove", str(bundle), "--budget", "60", "--engines", "regopy", *strict)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "): VACUOUS" in done.stdout and "VIOLATION" not in done.stdout, done.stdout
        assert "reach (checks whose premise held):" in done.stdout, done.stdout
    done = run_cli("prove", str(bundle), "--budget", "60", "--engines", "regopy", "--format", "json")
    document = json.loads(done.stdout)
    assert done.returncode == 1 and document["verdict"] == "VACUOUS" and document["proved"] is False
    assert document["reach"]["contract.executable_only_with_every_control"] == 0 and document["vacuous"]


def test_a_no_cross_border_deployment_is_proved_on_the_actions_it_allows(tmp_path: Path) -> None:
    """Today's rule under root no-cross-border: the generator names a target inside the unit's
    residency, so actions reach ALLOW (and one outside it is denied); every invariant's premise
    held somewhere, so the run is PROVED with the reach counted."""
    bundle = _compile(_deployment(tmp_path / "ncb", "restrictions: [no-cross-border]"))
    report = prove(read_bundle(bundle), budget=300, opa=False)
    assert report.states["ALLOW"] > 0, report.states
    assert all(report.units_passable.values()), report.units_passable
    assert report.verdict == "PROVED", (report.vacuous(), [v.invariant for v in report.violations])
    applicable = [name for name in report.invariants if name not in report.inapplicable]
    assert all(report.reach[name] > 0 for name in applicable), report.reach


def test_the_default_budget_finds_an_external_llm_a_restrictions_typo_let_through(tmp_path: Path) -> None:
    """A health insurer's manifest spells `restrictons`: no-external-llm (and the rest) are lost
    and an external model reading member health records is ALLOWed. The default budget must find
    it: prove decides what each restriction forbids on every unit early, and the counterexample
    is an action the gate itself decides ALLOW."""
    typo = "restrictons: [audit-required, no-external-llm, no-ai-training, no-cross-border]"
    deployment = _deployment(
        tmp_path / "insurer", typo, more_units=True, acknowledge="knowledge.yaml:compliance.restrictons"
    )
    bundle = _compile(deployment)
    rules = tmp_path / "insurer.rego"
    rules.write_text(HEALTH_INVARIANT, encoding="utf-8")
    users = [UserInvariants.load(rules)]
    report = prove(read_bundle(bundle), users=users, budget=DEFAULT_BUDGET, opa=False)
    found = {v.invariant: v for v in report.violations}
    assert HEALTH in found, (sorted(found), dict(report.phases))
    assert report.verdict == "VIOLATED" and report.reach[HEALTH] > 0
    violation = found[HEALTH]
    assert violation.action["knowledge"]["unit"] == "member-health-records"
    assert violation.action["runtime"]["model"]["hosting"] == "external"
    assert _gate_decides(bundle, violation.action, violation.now) == "ALLOW"
