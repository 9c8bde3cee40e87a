"""Where the gate's facts come from: typed sources, one implementation each.

A source returns facts as ``{name: {value, class, source}}``; the builder
(:mod:`kcp_opa.context.builder`) accepts from each kind only the facts of its kind, so a gate
configuration cannot vouch for an agent's scope nor the registry for evidence.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Protocol

from kcp_opa.context.factcontract import check_fact
from kcp_opa.context.facts import FACTS
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError
from kcp_opa.declare.trust import TrustRegistry

Fact = JsonDict


def fact(name: str, value: object, source: str, **extra: object) -> Fact:
    """One fact as the input carries it: its value, its class and where it came from."""
    return {"value": value, "class": FACTS[name].fact_class.value, "source": source, **extra}


class PrincipalSource(Protocol):
    """Gate facts about the caller: its actor role, granted agent scope, model and hosting."""

    def principal_facts(self, principal: str | None) -> dict[str, Fact]: ...

    def describe(self) -> JsonDict: ...


class GateConfigSource(Protocol):
    """Gate facts about the gate itself: the region it runs in, its environment."""

    def config_facts(self) -> dict[str, Fact]: ...

    def describe(self) -> JsonDict: ...


class CounterSource(Protocol):
    """Counts over the gate's own history for one action (budgets, rate limits, velocity).

    Called once per decision, after the action is checked, with the decision time ``now`` (the
    windows are counted back from it; a store-backed source records the call as one request).
    The builder puts the returned JSON object under ``input.context.counters`` unchanged; a
    :class:`~kcp_opa.core.errors.StoreUnavailableError` (the database is down) propagates: the
    decision is not made. Any other :class:`~kcp_opa.core.errors.StoreError` leaves the key
    absent (``context_missing``).
    """

    def counters(self, action: JsonObject, *, now: dt.datetime) -> JsonDict: ...


@dataclass(frozen=True)
class StaticCounters:
    """Counts given as they are (a decision case's ``counters``, a replay): nothing is recorded."""

    counts: JsonObject = field(default_factory=dict)

    def counters(self, action: JsonObject, *, now: dt.datetime) -> JsonDict:
        return dict(self.counts)


class RegistrySource:
    """Principal facts from the trust registry (``principals[*]``: roles, agent_scope, model)."""

    def __init__(self, registry: TrustRegistry) -> None:
        self.registry = registry

    @property
    def label(self) -> str:
        return f"registry:{self.registry.name}@{self.registry.data.get('version', '')}"

    def principal_facts(self, principal: str | None) -> dict[str, Fact]:
        if principal is None:
            return {}
        try:
            found = self.registry.principal(principal)
        except IdentityError:
            found = None
        if found is None:
            return {}
        where = f"{self.label}#{found.id}"
        values: JsonDict = {
            "actor_role": found.actor_role,
            "agent_scope": list(found.agent_scope) if found.agent_scope is not None else None,
            "model_id": found.model_id,
            "model_hosting": found.model_hosting,
        }
        return {name: fact(name, value, where) for name, value in values.items() if value is not None}

    def describe(self) -> JsonDict:
        return {"kind": "registry", "name": self.registry.name, "sha256": self.registry.sha256}


@dataclass(frozen=True)
class StaticGateConfig:
    """The gate's own configuration, set by its operator (``kcp-opa serve --region/--environment``).

    Each value is held to the contract of the action path it would be stated at
    (kcp_opa.context.factcontract): one that breaks it is refused here, at load.
    """

    deployment_region: str | None = None
    environment: str | None = None
    name: str = "gate-config"

    def __post_init__(self) -> None:
        for fact_name in ("deployment_region", "environment"):
            value = getattr(self, fact_name)
            if value is not None:
                check_fact(fact_name, value, f"gate configuration {self.name}")

    def config_facts(self) -> dict[str, Fact]:
        where = f"config:{self.name}"
        values = {"deployment_region": self.deployment_region, "environment": self.environment}
        return {name: fact(name, value, where) for name, value in values.items() if value is not None}

    def describe(self) -> JsonDict:
        return {
            "kind": "config",
            "name": self.name,
            "deployment_region": self.deployment_region,
            "environment": self.environment,
        }
