"""The context stage (kcp_opa/context): facts from sources of truth, each with its class and source.

Real registry documents, real Ed25519 signatures, a real bundle on regopy and the archived
input replayed on OPA.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import (
    FACTS,
    ContextSourceError,
    ContextSources,
    RegistrySource,
    SignedAttestations,
    StaticGateConfig,
    build_context,
    sign_fact,
)
from kcp_opa.core.errors import StoreError
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.decide.action import action_hash
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.trust import TrustRegistry, load_trust
from kcp_opa.trail.ledger import AuditLedger, read_entries

KEY = generate_ed25519("facts-ed25519")
OTHER = generate_ed25519("other-ed25519")
ACTION: dict[str, Any] = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
NOW = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)


def _public(key: Any) -> str:
    return str(Keyring({key.kid: key}).to_file_dict(include_private=False)["keys"][0]["public_key"])


def _registry(**agent: Any) -> TrustRegistry:
    data = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "unit",
        "version": "1",
        "principals": [
            {"id": "Agent_Payments_001", "type": "ai_agent", **agent},
            {"id": "two_roles", "type": "human", "roles": ["a", "b"]},
            {"id": "one_role", "type": "human", "roles": ["treasury_approver"]},
        ],
        "issuers": [
            {
                "id": "kyc",
                "type": "provider",
                "controls": [],
                "facts": ["evidence_status"],
                "keys": [{"kid": KEY.kid, "alg": "Ed25519", "public_key": _public(KEY)}],
            },
            {
                "id": "approvals",
                "type": "approval_app",
                "controls": ["user_confirmation"],
                "keys": [{"kid": OTHER.kid, "alg": "Ed25519", "public_key": _public(OTHER)}],
            },
        ],
    }
    return TrustRegistry("(unit)", "sha256:unit", data)


def _attest(fact: str, value: Any, *, issuer: str = "kyc", key: Any = KEY, **binding: Any) -> dict[str, Any]:
    fields = {"fact": fact, "value": value, "issued_at": "2026-11-29T09:00:00Z", "expires_at": "2026-11-29T11:00:00Z"}
    return sign_fact({**fields, **(binding or {"subject_id": "user_001"})}, issuer, key)


def test_the_registry_gives_an_agents_role_scope_model_and_hosting_in_canonical_form() -> None:
    source = RegistrySource(
        _registry(actor_role="payer", agent_scope=["b", "a"], model={"id": "m1", "hosting": "external"})
    )
    facts = source.principal_facts("agent_payments_001")
    assert {name: f["value"] for name, f in facts.items()} == {
        "actor_role": "payer",
        "agent_scope": ["a", "b"],
        "model_id": "m1",
        "model_hosting": "external",
    }
    assert all(f["class"] == "gate" and f["source"] == "registry:unit@1#agent_payments_001" for f in facts.values())
    assert source.principal_facts("nobody") == {} and source.principal_facts(None) == {}


def test_one_role_is_the_actor_role_several_are_not_guessed() -> None:
    source = RegistrySource(_registry())
    assert source.principal_facts("one_role")["actor_role"]["value"] == "treasury_approver"
    assert "actor_role" not in source.principal_facts("two_roles")


def test_a_source_may_not_establish_a_fact_of_another_kind() -> None:
    class Overreach:
        def config_facts(self) -> dict[str, Any]:
            return {"agent_scope": {"value": ["execute_payment"], "class": "gate", "source": "config:x"}}

        def describe(self) -> dict[str, Any]:
            return {}

    with pytest.raises(ContextSourceError, match="agent_scope"):
        build_context(ContextSources(config=Overreach()), ACTION, principal=None, action_hash="sha256:x", now=NOW)


def test_counters_go_under_counters_unchanged_and_are_absent_without_a_source() -> None:
    asked: list[dt.datetime] = []

    class Counts:
        def counters(self, action: Any, *, now: dt.datetime) -> dict[str, Any]:
            asked.append(now)
            return {"spent_minor": {"USD": 1200}, "requests": 3}

    built = build_context(ContextSources(counters=Counts()), ACTION, principal=None, action_hash="sha256:x", now=NOW)
    assert built["counters"] == {"spent_minor": {"USD": 1200}, "requests": 3}
    assert asked == [NOW]  # the windows count back from the decision time
    assert "counters" not in build_context(ContextSources(), ACTION, principal=None, action_hash="sha256:x", now=NOW)

    class Broken:
        def counters(self, action: Any, *, now: dt.datetime) -> Any:
            return [1]

    with pytest.raises(ContextSourceError):
        build_context(ContextSources(counters=Broken()), ACTION, principal=None, action_hash="sha256:x", now=NOW)

    class Down:
        def counters(self, action: Any, *, now: dt.datetime) -> dict[str, Any]:
            raise StoreError("database is locked")

    down = build_context(ContextSources(counters=Down()), ACTION, principal=None, action_hash="sha256:x", now=NOW)
    assert "counters" not in down  # a failed store: the counts are missing (context_missing), never invented


def test_an_attestation_counts_only_from_an_issuer_the_registry_allows_for_that_fact() -> None:
    registry = _registry()
    good = _attest("evidence_status", "present")
    wrong_issuer = _attest("evidence_status", "present", issuer="approvals", key=OTHER)
    forged = copy.deepcopy(good)
    forged["value"] = "forbidden"  # the signature covers the value
    not_a_fact = _attest("budget_state", "within_budget")
    one = _attest("evidence_status", 1)
    source = SignedAttestations(registry, None, [wrong_issuer, forged, not_a_fact, one, good])
    facts, refused = source.attested_facts(ACTION, action_hash(ACTION))
    assert facts["evidence_status"]["value"] == "present"
    assert facts["evidence_status"]["class"] == "attested"
    assert facts["evidence_status"]["source"] == f"attestation:kyc/{KEY.kid}"
    assert facts["evidence_status"]["expires_epoch_seconds"] > facts["evidence_status"]["issued_epoch_seconds"]
    assert [r["reason"] for r in refused] == [
        "issuer_not_allowed",
        "bad_signature",
        "not_an_attested_fact",
        "malformed",  # 1 is not a boolean, nor a status
    ]


def test_an_attestation_is_bound_to_this_action_or_its_subject() -> None:
    registry = _registry()
    digest = action_hash(ACTION)
    other_subject = _attest("evidence_status", "forbidden", subject_id="user_002")
    other_action = _attest("evidence_status", "forbidden", action_hash="sha256:" + "0" * 64)
    this_action = _attest("evidence_status", "stale", action_hash=digest)
    facts, refused = SignedAttestations(registry, None, [other_subject, other_action, this_action]).attested_facts(
        ACTION, digest
    )
    assert facts["evidence_status"]["value"] == "stale" and refused == []


def test_the_archived_input_carries_each_fact_with_its_class_and_source_and_replays_on_opa(tmp_path: Path) -> None:
    from opa_bindings import OpaEngine

    registry_path = REPO / "fixtures" / "trust" / "registry.yaml"
    registry = load_trust(registry_path)
    base = DEPLOYMENTS / "finance"
    bundle = tmp_path / "finance.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        POLICIES,
        bundle,
        options=CompileOptions(trust_path=registry_path),
    )
    sources = ContextSources(registry=RegistrySource(registry), config=StaticGateConfig(deployment_region="EU"))
    gate = Gate.from_bundle(bundle, config=GateConfig(ledger=AuditLedger(tmp_path / "ledger.jsonl"), context=sources))
    stated = copy.deepcopy(ACTION)
    stated["authorization_context"]["agent_scope"] = ["execute_payment", "prepare_payment", "refund"]
    decision = gate.decide(stated, now="2026-07-17T08:00:00Z", principal="agent_payments_001")
    (entry,) = [e for _, e in read_entries(tmp_path / "ledger.jsonl") if e.get("type") == "decision"]
    facts = entry["input"]["context"]["facts"]
    assert facts["agent_scope"]["source"].startswith("registry:finance-reference@")
    assert facts["agent_scope"]["class"] == "gate"
    assert facts["deployment_region"] == {"value": "EU", "class": "gate", "source": "config:gate-config"}
    assert entry["input"]["context"]["facts_principal"] == "agent_payments_001"
    assert "context_conflict" in decision.reason_codes  # the stated scope differs from the registry's
    # The beneficiary and screening facts have no attestation here: held, never allowed.
    assert decision.decision.value == "ESCALATE" and "context_missing" in decision.reason_codes
    engine = OpaEngine()
    for name, source in gate.bundle.modules.items():
        engine.add_policy(name, source)
    engine.add_data(dict(gate.bundle.data))
    assert engine.eval_document("kcp.gate.decision", entry["input"]) == entry["result"]


def test_without_sources_no_stated_fact_is_believed(tmp_path: Path) -> None:
    """The support-desk read that states every fact the gate would need: without a source the
    gate knows none of them, so it is held, naming what it lacks, never allowed."""
    from actionkit import support_read

    base = DEPLOYMENTS / "support-desk"
    bundle = tmp_path / "sd.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle)
    decision = Gate.from_bundle(bundle).decide(support_read(), now="2026-11-29T10:00:00Z")
    assert decision.decision.value in {"ESCALATE", "DENY"} and not decision.execution_allowed
    named = {f for v in decision.to_dict()["violations"] if v["code"] == "context_missing" for f in v["fields"]}
    assert {"input.context.facts.evidence_status", "input.context.facts.deployment_region"} <= named


def test_every_fact_the_builder_knows_is_one_the_policy_compares() -> None:
    trusted = (POLICIES / "kcp" / "lib" / "trusted.rego").read_text()
    for name, spec in FACTS.items():
        path = ", ".join(f'"{part}"' for part in spec.stated_path)
        assert f'"{name}": [{path}]' in trusted, name
