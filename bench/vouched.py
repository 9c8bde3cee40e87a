"""The context every benchmark decides with: the host vouches for what each action states.

Since the trusted-context stage, a gate with no context sources holds every action that needs
a gate fact (ESCALATE ``context_missing``): a benchmark without sources times that refusal, a
path production never takes. Here each action gets the sources a decision case declaring
``context: {from_action: true}`` gets (kcp_opa.authoring.casecontext: a static config, a trust
registry entry for the acting agent, attestations signed for this action's hash), built ONCE
outside the timed loop, as a host holds its sources. What is timed is then production's path:
the context stage (the registry lookup, and each attestation's signature verified the first
time its signed bytes are seen and remembered after, as a host offering the same attestations
again gets), the engine and the typing. ``expect`` asserts the decisions timed are the intended
ones, so a benchmark cannot quietly time a refusal again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.context.builder import ContextSources
from kcp_opa.core.canonical import canonical_json
from kcp_opa.decide.gate import DecisionInput, Gate
from kcp_opa.models.decision import Decision

FROM_ACTION = {"from_action": True}
#: Reason codes a benchmark must never time: the gate did not reach a real decision.
NOT_DECIDED = frozenset({"context_missing", "engine_error", "engine_divergence", "audit_unavailable"})


def sources(action: Mapping[str, Any], now: str) -> tuple[ContextSources, str]:
    """The host's sources and principal for ``action`` (what ``vouched_gate`` builds per decision)."""
    built, principal = case_sources(action, FROM_ACTION, now)
    assert built is not None and principal is not None
    return built, principal


def case_context(case: Any) -> dict[str, Any]:
    """``Gate.decide`` keyword arguments for a decision case: the context its file declares."""
    built, principal = case_sources(case.action, case.context, case.now, getattr(case, "counters", None))
    return {"context": built, "principal": principal}


class Vouched:
    """Sources per action, built once: ``decide``/``prepare`` then run production's path."""

    def __init__(self, gate: Gate, now: str) -> None:
        self.gate = gate
        self.now = now
        self._by_action: dict[bytes, tuple[ContextSources, str]] = {}

    def _for(self, action: Mapping[str, Any]) -> tuple[ContextSources, str]:
        key = canonical_json(action)
        found = self._by_action.get(key)
        if found is None:
            found = self._by_action[key] = sources(action, self.now)
        return found

    def warm(self, actions: Iterable[Mapping[str, Any]]) -> None:
        """Build the sources of ``actions`` now (signing is the attestor's cost, not the gate's)."""
        for action in actions:
            self._for(action)

    def context(self, action: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for ``Gate.decide``/``prepare``: the principal and its sources."""
        context, principal = self._for(action)
        return {"context": context, "principal": principal}

    def decide(self, action: Mapping[str, Any], gate: Gate | None = None) -> Decision:
        return (gate or self.gate).decide(action, now=self.now, **self.context(action))

    def prepare(self, action: Mapping[str, Any], gate: Gate | None = None) -> DecisionInput:
        return (gate or self.gate).prepare(action, now=self.now, **self.context(action))

    def decide_many(self, actions: list[Mapping[str, Any]], workers: int) -> list[Decision]:
        """``decide_many``'s shape (all prepared, then evaluated on ``workers`` threads), vouched."""
        from concurrent.futures import ThreadPoolExecutor

        prepared = [self.prepare(action) for action in actions]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(self.gate.decide_prepared, prepared))


def expect(decision: Decision | Mapping[str, Any], statuses: Iterable[str] | None, what: str = "") -> None:
    """Fail unless ``decision`` (typed, or a policy document) is one of ``statuses`` (None: any)
    and a real decision, not a refusal for missing context or an engine failure."""
    if isinstance(decision, Decision):
        status, codes = str(decision.decision), set(decision.reason_codes)
    else:
        status, codes = str(decision.get("decision")), set(decision.get("reason_codes", []))
    allowed = {status} if statuses is None else set(statuses)
    if status not in allowed or codes & NOT_DECIDED:
        raise AssertionError(
            f"{what or 'benchmark input'}: decided {status} {sorted(codes)}, expected one of {sorted(allowed)} "
            f"without {sorted(NOT_DECIDED & codes) or 'a refusal'}: the benchmark would time the wrong path"
        )
