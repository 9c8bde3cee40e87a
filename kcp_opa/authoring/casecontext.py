"""The gate's context for a decision case: real sources, declared by the case file.

A case file (or one case) declares what the gate knows under ``context``: ``config``
(deployment_region, environment), ``registry`` (the acting agent's entry: actor_role,
agent_scope, model {id, hosting}) and ``attested`` (evidence_status, new_beneficiary,
modified_beneficiary, screening_uncertain, each signed by a case issuer with a key generated
per run and bound to the case action's hash). ``from_action: true`` declares that the host
vouches for what the action states (the case author wrote it; a model never did): each stated
fact becomes the gate's, an absent flag is attested false, and ``config``/``registry``/
``attested`` then override fact by fact (null removes one). The facts reach the policy through
the same sources a deployment uses (kcp_opa.context), so the cases exercise them end to end;
a case's counts (``base_counters``/``counters``) likewise reach ``input.context.counters`` as a
fixed counter source in place of the gate's store.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from kcp_opa.authoring.cases import DecisionCase
from kcp_opa.context import (
    ContextSources,
    GateFactError,
    RegistrySource,
    SignedAttestations,
    SignedExceptions,
    StaticCounters,
    StaticGateConfig,
    sign_fact,
)
from kcp_opa.context.facts import ATTESTED_VALUES, FACTS, stated
from kcp_opa.context.factsources import Fact
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping, objects
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import Ed25519Key, Keyring, generate_ed25519
from kcp_opa.decide.action import action_hash, check_action
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.gate import DecisionInput, Gate, build_input, decision_time
from kcp_opa.declare.exceptionfile import sign_exception
from kcp_opa.declare.trust import TrustRegistry

CASE_AGENT = "case-agent"
CASE_ISSUER = "case-attestor"
#: The registered human who grants a case's exceptions (role ``exception_approver``).
CASE_GRANTOR = "case-dpo"
_FLAGS = ("new_beneficiary", "modified_beneficiary", "screening_uncertain")


@cache
def _issuer_key() -> Ed25519Key:
    """TEST-ONLY: a fresh key per process; it never leaves memory."""
    return generate_ed25519("case-attestor-ed25519")


def _declared_facts(
    action: JsonObject, declared: JsonObject, paths: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """The facts of each kind ``declared`` gives; ``paths`` gets, per fact, where it says so. A value
    stays unchecked: its source refuses one that breaks its fact's contract (StaticGateConfig)."""
    kinds: dict[str, dict[str, Any]] = {"config": {}, "registry": {}, "attestation": {}}
    paths = {} if paths is None else paths
    if declared.get("from_action"):
        for name, spec in FACTS.items():
            given, value = stated(action, spec)
            if given:
                kinds[spec.source_kind][name] = value
                paths[name] = "from_action"
        for flag in _FLAGS:
            kinds["attestation"].setdefault(flag, False)
            paths.setdefault(flag, "from_action")
    for kind, key in (("config", "config"), ("registry", "registry"), ("attestation", "attested")):
        for name, value in mapping(declared.get(key)).items():
            if name == "model" and isinstance(value, Mapping):  # the registry's shape: model {id, hosting}
                for part, fact_name in (("id", "model_id"), ("hosting", "model_hosting")):
                    if part in value:
                        _put(kinds[kind], fact_name, value[part])
                        paths[fact_name] = f"{key}.model.{part}"
                continue
            _put(kinds[kind], str(name), value)
            paths[str(name)] = f"{key}.{name}"
    return kinds


def _put(facts: JsonDict, name: str, value: object) -> None:
    if value is None:
        facts.pop(name, None)
    else:
        facts[name] = value


def case_sources(
    action: JsonObject,
    declared: JsonObject | None,
    now: str,
    counters: JsonObject | None = None,
    *,
    origin: str | None = None,
) -> tuple[ContextSources | None, str | None]:
    """The sources and the principal a case is decided with; (None, None) when it declares none.

    ``counters`` are the case's counts (``base_counters``/``counters``): they stand in for the
    gate's counter store, through the same ``ContextSources.counters`` a deployment uses.
    ``origin`` is the context file that declared the facts (``kcp-opa decide --context``): each
    fact then names it and its place in it (``context:FILE#registry.model.id``) and the principal
    is the file's own (``context:NAME``), so a conflict names the user's file, never this harness.
    """
    counted = StaticCounters(counters) if counters is not None else None
    if not declared:
        return (ContextSources(counters=counted), None) if counted is not None else (None, None)
    paths: dict[str, str] = {}
    kinds = _declared_facts(action, declared, paths)
    name = "decision-case" if origin is None else f"context:{origin}"
    principal = CASE_AGENT if origin is None else _stand_in(origin)
    config = StaticGateConfig(
        kinds["config"].get("deployment_region"), kinds["config"].get("environment"), "case" if origin is None else name
    )
    agent: JsonDict = {"id": principal, "type": "ai_agent"}
    registry_facts = kinds["registry"]
    if "actor_role" in registry_facts:
        agent["actor_role"] = registry_facts["actor_role"]
    if "agent_scope" in registry_facts:
        agent["agent_scope"] = registry_facts["agent_scope"]
    model = {k: registry_facts[f] for k, f in (("id", "model_id"), ("hosting", "model_hosting")) if f in registry_facts}
    if model:
        agent["model"] = model
    key = _issuer_key()
    public = Keyring({key.kid: key}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    grantor = {"id": CASE_GRANTOR, "type": "human", "roles": ["exception_approver"]}
    data = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": name,
        "version": "1",
        "exception_grantor_roles": ["exception_approver"],
        "principals": [agent, grantor],
        "issuers": [
            {
                "id": CASE_ISSUER,
                "type": "provider",
                "controls": [],
                "facts": sorted(ATTESTED_VALUES),
                "signs_exceptions": True,
                "keys": [{"kid": key.kid, "alg": "Ed25519", "public_key": public}],
            }
        ],
    }
    registry = TrustRegistry("(decision case)", "", data)
    moment = dt.datetime.fromisoformat(now.replace("Z", "+00:00"))
    issued = (moment - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    expires = str(
        declared.get("attested_expires_at") or (moment + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    digest = action_hash(action)
    items = [
        sign_fact(
            {"fact": name, "value": value, "action_hash": digest, "issued_at": issued, "expires_at": expires},
            CASE_ISSUER,
            key,
        )
        for name, value in sorted(kinds["attestation"].items())
    ]
    attestations = SignedAttestations(registry, None, items)
    if origin is None:
        sources = ContextSources(RegistrySource(registry), config, attestations, counted)
    else:
        file = ContextFile(name, paths, RegistrySource(registry), config, attestations)
        sources = ContextSources(file, file, file, counted)
    sources = replace(sources, exceptions=_case_exceptions(declared.get("exceptions"), registry, key, moment, name))
    return sources, principal


@dataclass(frozen=True)
class ContextFile:
    """The registry, configuration and attestation sources a context file declares.

    The facts pass through the same sources a deployment uses; only the ``source`` each names is
    the file's (``context:FILE#registry.model.id``): the file, not a registry or an issuer of
    this harness, is what vouched for them. One object serves as all three sources.
    """

    name: str
    paths: Mapping[str, str]
    registry: RegistrySource
    config: StaticGateConfig
    attestations: SignedAttestations

    def _named(self, facts: Mapping[str, Fact]) -> dict[str, Fact]:
        return {n: {**f, "source": f"{self.name}#{self.paths.get(n, n)}"} for n, f in facts.items()}

    def principal_facts(self, principal: str | None) -> dict[str, Fact]:
        return self._named(self.registry.principal_facts(principal))

    def config_facts(self) -> dict[str, Fact]:
        return self._named(self.config.config_facts())

    def attested_facts(self, action: JsonObject, action_hash: str) -> tuple[dict[str, Fact], list[dict[str, str]]]:
        facts, refused = self.attestations.attested_facts(action, action_hash)
        return self._named(facts), refused

    def describe(self) -> JsonDict:
        return {"kind": "context_file", "name": self.name}


def _stand_in(origin: str) -> str:
    """The principal a context file's registry facts are about: the file itself (its name, as a
    registry id), never the action's agent, whom nothing here authenticated (a ledger entry of
    such a decision stays ``unauthenticated``, kcp_opa.trail.entries.attribution)."""
    label = f"context:{Path(origin).name}"
    try:
        return canonical_id(label)
    except IdentityError:
        return "context:file"


def _case_exceptions(
    declared: object, registry: TrustRegistry, key: Ed25519Key, moment: dt.datetime, name: str
) -> SignedExceptions | None:
    """The case's exceptions, signed by the case issuer and verified like a deployment's file."""
    if not declared:
        return None
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    signed = [
        sign_exception(
            {
                "reason": "decision case",
                "ticket": "CASE-1",
                "grantor": CASE_GRANTOR,
                "issued_at": (moment - dt.timedelta(hours=1)).strftime(stamp),
                "expires_at": (moment + dt.timedelta(hours=1)).strftime(stamp),
                **item,
            },
            CASE_ISSUER,
            key,
        )
        for item in objects(declared)
    ]
    document = {"kind": "kcp-opa/exceptions", "format_version": 1, "name": name, "exceptions": signed}
    return SignedExceptions(registry, document=document)


def case_input(
    case: DecisionCase,
    *,
    satisfied_controls: tuple[str, ...] | list[str] = (),
    bundle_revision: str = "",
    decision_id: str | None = None,
) -> DecisionInput:
    """The input a case is decided on: its action, its time, the context and the counts it declares."""
    sources, principal = case_sources(case.action, case.context, case.now, case.counters)
    return build_input(
        case.action,
        now=case.now,
        satisfied_controls=satisfied_controls,
        bundle_revision=bundle_revision,
        decision_id=decision_id,
        context=sources,
        principal=principal,
    )


class VouchingGate(Gate):
    """A gate whose host vouches for the facts its own actions state (``from_action``).

    For hosts that write the action themselves, test suites and ``kcp-opa decide --context``:
    each decision's facts come through the same sources as a case's, declared by ``declared``.
    Never for actions a model wrote: that is what the context stage exists to refuse.
    """

    declared: Mapping[str, object] = {"from_action": True}
    #: The context file ``declared`` was read from: each fact names it (None: a test's own vouching).
    origin: str | None = None

    def input_for(
        self,
        action: JsonObject | CheckedAction,
        *,
        now: dt.datetime | str | None = None,
        principal: str | None = None,
        context: ContextSources | None = None,
    ) -> DecisionInput:
        if context is None:
            at = decision_time(now).strftime("%Y-%m-%dT%H:%M:%SZ")
            stated = action.mapping if isinstance(action, CheckedAction) else action
            try:
                context, principal = case_sources(stated, self.declared, at, origin=self.origin)
            except GateFactError:
                check_action(action)  # a fact the action states breaks the contract: named at its path
                raise  # the declared context's own
            except (TypeError, ValueError, AttributeError):
                context = None  # an action the contract refuses: input_for() names why
            if context is None:
                return super().input_for(action, now=now, principal=principal)
            if self.context is not None and self.context.counters is not None:  # the gate's counts stay its own
                context = replace(context, counters=self.context.counters)
            if self.context is not None and self.context.metering is not None:  # and so does its metering
                context = replace(context, metering=self.context.metering)
        return super().input_for(action, now=now, principal=principal, context=context)


def vouching(gate: Gate, declared: JsonObject | None = None, origin: str | None = None) -> VouchingGate:
    """``gate`` as a :class:`VouchingGate` (same bundle, engine, ledger and seal key); ``origin``
    is the context file ``declared`` was read from, which its facts then name."""
    vouched = VouchingGate.__new__(VouchingGate)
    vouched.__dict__.update(gate.__dict__)
    if declared is not None:
        vouched.declared = declared
    vouched.origin = origin
    return vouched
