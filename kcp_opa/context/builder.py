"""The context stage: build ``input.context.facts`` from the sources of truth, never the action.

It runs after the action is checked and hashed and before the engine. Each source kind may give
only the facts of its kind (config: region and environment; registry: the caller's actor role,
agent scope, model and hosting; attestations: the attested facts), and every fact carries its
value, class and source, so the archived input shows an auditor where each came from and
``opa eval`` replays the decision from it. Comparing a stated value with the gate's, choosing
the stricter and deciding what a missing fact means are the policy's (``kcp.lib.trusted``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from kcp_opa.context.attested import AttestationSource
from kcp_opa.context.exceptionsource import ExceptionSource
from kcp_opa.context.factcontract import fact_problem
from kcp_opa.context.facts import FACTS
from kcp_opa.context.factsources import CounterSource, Fact, GateConfigSource, PrincipalSource
from kcp_opa.context.metering import MeteringSource
from kcp_opa.core.errors import KcpOpaError, StoreError, StoreUnavailableError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items

_log = structlog.get_logger("kcp_opa.context")


class ContextSourceError(KcpOpaError):
    """A source gave what it may not (a fact of another kind, counters that are not an object)."""


@dataclass(frozen=True)
class ContextSources:
    """The sources a gate builds its context from; any may be absent (its facts are then missing)."""

    registry: PrincipalSource | None = None
    config: GateConfigSource | None = None
    attestations: AttestationSource | None = None
    #: The budget stage's counts over the gate's history; absent -> no ``counters`` key.
    counters: CounterSource | None = None
    #: Verified exceptions (kcp_opa.context.exceptionsource); absent -> no ``exceptions`` key.
    exceptions: ExceptionSource | None = None
    #: Attested spend from metering issuers (kcp_opa.context.metering); absent -> no ``metering`` key.
    metering: MeteringSource | None = None

    def describe(self) -> JsonDict:
        """What ``GET /v1/status`` and the decision document show: the sources, never their keys."""
        return {
            "registry": self.registry.describe() if self.registry is not None else None,
            "config": self.config.describe() if self.config is not None else None,
            "attestations": self.attestations.describe() if self.attestations is not None else None,
            "counters": type(self.counters).__name__ if self.counters is not None else None,
            "exceptions": self.exceptions.describe() if self.exceptions is not None else None,
            "metering": self.metering.describe() if self.metering is not None else None,
        }


def _only(kind: str, given: Mapping[str, Fact], refused: list[dict[str, str]]) -> dict[str, Fact]:
    """The facts of ``kind``; one breaking its stated path's contract is dropped into ``refused``."""
    kept: dict[str, Fact] = {}
    for name, entry in given.items():
        spec = FACTS.get(name)
        if spec is None or spec.source_kind != kind:
            raise ContextSourceError(f"a {kind} source may not establish {name!r}")
        value = entry.get("value") if isinstance(entry, Mapping) else None
        why = fact_problem(name, value)
        if why is not None:
            source = str(entry.get("source", kind)) if isinstance(entry, Mapping) else kind
            _log.error("fact_refused", fact=name, source=source, reason=why, effect="context_missing")
            refused.append({"fact": name, "source": source, "reason": why})
            continue
        kept[name] = entry
    return kept


def build_context(
    sources: ContextSources | None,
    action: JsonObject,
    *,
    principal: str | None,
    action_hash: str,
    now: dt.datetime,
) -> JsonDict:
    """``{"facts": {...}, "facts_principal": ..., "facts_refused"?: [...], "attestations_refused"?: [...],
    "metering"?: [...], "counters"?: {...}, "exceptions"?: [...]}``.

    A fact whose value breaks the contract of its stated path (kcp_opa.context.factcontract) is
    left out and listed in ``facts_refused`` as ``{fact, source, reason}``: a rule that needs it
    answers ``context_missing``, on both engines alike.

    ``now`` is the decision time the counter source counts its windows back from. A counter
    store that fails leaves ``counters`` absent: the policy answers ``context_missing`` for a
    declared limit, never an allow.
    """
    facts: dict[str, Fact] = {}
    built: JsonDict = {"facts": facts, "facts_principal": principal}
    if sources is None:
        return built
    facts_refused: list[dict[str, str]] = []
    if sources.config is not None:
        facts.update(_only("config", sources.config.config_facts(), facts_refused))
    if sources.registry is not None:
        facts.update(_only("registry", sources.registry.principal_facts(principal), facts_refused))
    if sources.attestations is not None:
        attested, refused = sources.attestations.attested_facts(action, action_hash)
        facts.update(_only("attestation", attested, facts_refused))
        if refused:
            built["attestations_refused"] = refused
    if facts_refused:
        built["facts_refused"] = facts_refused
    if sources.metering is not None:
        spends, unmetered = sources.metering.metered_spends(action)
        built["metering"] = spends
        if unmetered:
            built["attestations_refused"] = [*items(built.get("attestations_refused")), *unmetered]
    if sources.counters is not None:
        try:
            counted = sources.counters.counters(action, now=now)
        except StoreUnavailableError:
            raise  # the counters' database is down: a fault, never facts left missing (a policy answer)
        except StoreError as exc:
            _log.error("counters_unavailable", error=str(exc))
            return built
        if not isinstance(counted, dict):
            raise ContextSourceError("a counter source returns a JSON object")
        built["counters"] = counted
    if sources.exceptions is not None:
        built["exceptions"] = sources.exceptions.exceptions()
    return built
