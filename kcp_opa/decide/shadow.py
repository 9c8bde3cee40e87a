"""Shadow evaluation: a candidate bundle decides beside the active one, on the same input, and
never decides anything itself.

Each decision's input is evaluated again on the candidate after the active decision is recorded;
when the two answers differ in what routes the action (the state, the status, whether it may
execute, the risk, the reason codes, the controls) a ``shadow`` ledger entry keeps both shapes
and whether the candidate weakens the decision. ``kcp-opa audit shadow-report`` summarises them
(kcp_opa.audit.shadowreport) before the candidate is promoted. A candidate that fails to answer
is a difference too (an engine error where the active answered), never a silent pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, RegopyEngine
from kcp_opa.models.decision import SHAPE_FIELDS, Decision, RoutingState
from kcp_opa.trail.entries import AuditTrail

_log = structlog.get_logger("kcp_opa.shadow")

_STRENGTH = {state.value: rank for rank, state in enumerate(RoutingState)}  # DENY 0 (strongest) .. ALLOW 7
_RISK = {"LOW": 0, "MEDIUM": 1, "HIGH": 2, "CRITICAL": 3}


def shape_of(result: object) -> JsonDict:
    """A policy result reduced to what routes the action (``engine_error`` when there is none)."""
    if not isinstance(result, Mapping) or not isinstance(result.get("decision"), str):
        return {"decision": None, "engine_error": True}
    shape: JsonDict = {name: result.get(name) for name in SHAPE_FIELDS}
    for name in ("reason_codes", "required_controls", "missing_controls"):
        values = shape[name]
        if isinstance(values, list):
            shape[name] = sorted({str(v) for v in values})
    return shape


def weakens(active: JsonObject, candidate: JsonObject) -> bool:
    """True when the candidate would let through what the active held: a weaker routing state,
    execution allowed where it was not, a lower risk, or a required control dropped."""
    if candidate.get("decision") is None:
        return False  # no answer fails closed: never weaker
    if active.get("decision") is None:
        return True  # the candidate answers where the active failed closed
    if _STRENGTH.get(str(candidate["decision"]), 0) > _STRENGTH.get(str(active["decision"]), 0):
        return True
    if candidate.get("execution_allowed") is True and active.get("execution_allowed") is not True:
        return True
    if _RISK.get(str(candidate.get("risk_level")), 0) < _RISK.get(str(active.get("risk_level")), 0):
        return True
    dropped = set(items(active.get("required_controls"))) - set(items(candidate.get("required_controls")))
    return bool(dropped)


@dataclass(frozen=True)
class ShadowCandidate:
    """A candidate bundle, loaded and planned, that evaluates inputs and reports differences."""

    revision: str
    sha256: str
    engine: RegopyEngine

    @classmethod
    def of(cls, bundle: LoadedBundle, *, plan_cache: Path | None = None) -> ShadowCandidate:
        engine = RegopyEngine(bundle, DECISION_ENTRYPOINT, preflight=True, plan_cache=plan_cache)
        return cls(bundle.revision, bundle.sha256, engine)

    def difference(self, document: JsonObject, active_result: object, active_ref: Mapping[str, str]) -> JsonDict | None:
        """The ``shadow`` entry's fields when the candidate routes ``document`` differently, else None."""
        outcome = self.engine.evaluate(document)
        active, candidate = shape_of(active_result), shape_of(outcome.value if outcome.error is None else None)
        if active == candidate:
            return None
        return {
            "active": {**active_ref, **active},
            "candidate": {"revision": self.revision, "sha256": self.sha256, **candidate},
            "weakens": weakens(active, candidate),
        }

    def record(
        self,
        audit: AuditTrail,
        active_ref: Mapping[str, str],
        document: JsonObject,
        decision: Decision,
        result: object,
    ) -> None:
        """A difference becomes a ``shadow`` entry; nothing here may change the live decision."""
        try:
            found = self.difference(document, result, active_ref)
            if found is not None:
                fields = {"decision_id": decision.decision_id, "action_hash": decision.action_hash, **found}
                audit.event("shadow", mapping(document["action"]), decision, **fields)
        except Exception as exc:  # a candidate's failure is reported, never the caller's problem
            _log.error("shadow_failed", decision_id=decision.decision_id, error=f"{type(exc).__name__}: {exc}")
