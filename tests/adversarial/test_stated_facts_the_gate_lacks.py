"""Attack class: an agent states a gate or attested fact the gate did not establish.

tests/adversarial/test_trusted_context.py attacks a fact the gate knows (its strict value
against a lax statement). Here the gate knows nothing of the fact: its registry entry gives no
role, no scope or no model, it was started without a region or environment, no issuer attested
it. The policy then fails closed (``context_missing``) and every rule reads the fact as its
strictest value; a statement must not lift that. For every fact of the context stage, the
action stating its laxest value is decided beside the same action stating nothing, on regopy
and cross-checked on OPA: the statement buys no weaker state and drops no control.

Without it, a stated sender role turned ``DENY role_cannot_send`` into ESCALATE on support-desk
(the rule read the stated role when the gate had none).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from actionkit import case_action

from kcp_opa.authoring.casecontext import vouching
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.context.facts import FACTS
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

REPO = Path(__file__).resolve().parents[2]
NOW = "2026-11-29T10:00:00Z"
STATES = ["ALLOW", "USER_CONFIRMATION", "STEP_UP_AUTHENTICATION", "IDENTITY_VERIFICATION", "HUMAN_APPROVAL"]
STATES += ["ESCALATE", "COMPLIANCE_REVIEW", "DENY"]
SECTION = {"config": "config", "registry": "registry", "attestation": "attested"}

#: Per fact: the deployment, the decision case whose action the rule reads it on, the laxest value.
TABLE: dict[str, tuple[str, str, Any]] = {
    "deployment_region": ("kcp-governance", "gov-authority-default-read", "EU"),
    "environment": ("kcp-visibility-access", "va-visibility-default", "staging"),
    "actor_role": ("support-desk", "sd-send-by-support-agent", "support_agent"),
    "agent_scope": ("finance", "fin-supplier-payment-kcp-bound", None),  # None: the action's own tool
    "model_id": ("finance", "fin-supplier-payment-kcp-bound", "in-house-llm"),
    "model_hosting": ("finance", "fin-supplier-payment-kcp-bound", "self_hosted"),
    "evidence_status": ("finance", "fin-supplier-payment-kcp-bound", "present"),
    "new_beneficiary": ("finance", "fin-supplier-payment-kcp-bound", False),
    "modified_beneficiary": ("finance", "fin-supplier-payment-kcp-bound", False),
    "screening_uncertain": ("finance", "fin-supplier-payment-kcp-bound", False),
}


def test_every_fact_of_the_context_stage_has_an_attack() -> None:
    assert set(TABLE) == set(FACTS)


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Gate]:
    out = tmp_path_factory.mktemp("bundles")
    found: dict[str, Gate] = {}
    for deployment in sorted({entry[0] for entry in TABLE.values()}):
        folder = REPO / "fixtures" / "deployments" / deployment
        bundle = out / f"{deployment}.tar.gz"
        compile_bundle([folder / "knowledge.yaml"], folder / "matrix.yaml", REPO / "policies", bundle)
        found[deployment] = Gate.from_bundle(bundle, config=GateConfig(cross_check="opa"))
    return found


def _action(deployment: str, case_id: str) -> dict[str, Any]:
    return case_action(f"{deployment}.yaml", case_id)


def _set(action: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = action
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _drop(action: dict[str, Any], path: tuple[str, ...]) -> None:
    node = action
    for part in path[:-1]:
        node = node.get(part, {})
    node.pop(path[-1], None)


def _weaker(lax: Any, strict: Any) -> str | None:
    ranks = STATES.index(lax.decision.value), STATES.index(strict.decision.value)
    if ranks[0] < ranks[1]:
        return f"{strict.decision.value} -> {lax.decision.value}"
    dropped = set(strict.required_controls) - set(lax.required_controls)
    if ranks[0] == ranks[1] and dropped:
        return f"controls {sorted(dropped)} dropped"
    return None


@pytest.mark.parametrize("fact", sorted(TABLE))
def test_stating_a_fact_the_gate_lacks_buys_no_weaker_decision(gates: dict[str, Gate], fact: str) -> None:
    deployment, case_id, laxest = TABLE[fact]
    spec = FACTS[fact]
    # The host vouches for every other fact the action states; this one the gate never learns.
    gate = vouching(gates[deployment], {"from_action": True, SECTION[spec.source_kind]: {fact: None}})
    silent = _action(deployment, case_id)
    _drop(silent, spec.stated_path)
    if fact == "agent_scope":  # the schema requires a scope: the silent one is empty; a small
        _set(silent, spec.stated_path, [])  # payment, so no other rule asks for authority_verification
        silent["amount"]["value_minor"] = 5000
        silent["attributes"] = {}
    stating = copy.deepcopy(silent)
    _set(stating, spec.stated_path, [silent["requested_action"]] if laxest is None else laxest)
    strict = gate.decide(silent, now=NOW)
    lax = gate.decide(stating, now=NOW)
    for decision in (strict, lax):  # the engines agreed (a divergence is DENY engine_divergence)
        assert "engine_divergence" not in decision.reason_codes, decision.reason_codes
        # model_id is only named in messages: no rule fails closed without it.
        assert fact == "model_id" or "context_missing" in decision.reason_codes, (fact, decision.reason_codes)
    weaker = _weaker(lax, strict)
    codes = f"{strict.reason_codes} -> {lax.reason_codes}"
    assert weaker is None, f"{fact}: stating {laxest!r} with no gate value: {weaker} ({codes})"


def test_a_stated_sender_role_does_not_lift_role_cannot_send(gates: dict[str, Gate]) -> None:
    gate = vouching(gates["support-desk"], {"from_action": True, "registry": {"actor_role": None}})
    action = _action("support-desk", "sd-send-by-support-agent")
    assert action["authorization_context"]["actor_role"] == "support_agent"
    decision = gate.decide(action, now=NOW)
    assert decision.decision.value == "DENY", decision.reason_codes
    assert "role_cannot_send" in decision.reason_codes and "engine_divergence" not in decision.reason_codes
