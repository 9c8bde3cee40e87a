"""One evaluation: a built input on one bundle's engines, the policy's answer typed as a Decision.

Python decides nothing here: a malformed or missing policy answer becomes the fail-closed
``engine_error`` verdict, a disagreement of the cross-checking engines ``engine_divergence``.
"""

from __future__ import annotations

import structlog

from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.decide.active import ActiveBundle
from kcp_opa.decide.crosscheck import cross_checked
from kcp_opa.decide.gateinput import DecisionInput
from kcp_opa.models.decision import (
    ENGINE_DIVERGENCE_VERDICT,
    ENGINE_ERROR_VERDICT,
    Decision,
    MalformedDecisionError,
    PolicyVerdict,
)

_log = structlog.get_logger("kcp_opa.gate")


def evaluated(
    active: ActiveBundle, prepared: DecisionInput, mode: str
) -> tuple[Decision, JsonObject | None, JsonDict | None]:
    """The typed decision, the policy's raw result (None on error) and, when the engines
    disagreed, each engine's answer; ``mode`` is the gate's (enforce or log_only)."""
    result, answers = cross_checked(active.engine, active.reference, prepared.document, prepared.decision_id)
    error = result.error
    verdict = ENGINE_ERROR_VERDICT if answers is None else ENGINE_DIVERGENCE_VERDICT
    if result.value is not None:
        try:
            verdict = PolicyVerdict.from_policy(result.value)
        except MalformedDecisionError as exc:
            error = str(exc)
    if error is not None and answers is None:
        _log.error("engine_error", decision_id=prepared.decision_id, error=error)
    # A generated trace id stands in only where the deployment does not require the caller's.
    required = "trace_context" in verdict.obligations
    trace_id = None if prepared.trace_id_generated and required else prepared.trace_id
    decision = Decision(
        decision_id=prepared.decision_id,
        action_hash=prepared.action_hash,
        verdict=verdict,
        policy_version=active.policy_version,
        bundle_revision=active.bundle.revision,
        trace_id=trace_id,
        evaluated_at=prepared.evaluated_at,
        engine_error=error,
        bundle_sha256=active.bundle.sha256,
        bundle_signer=active.bundle.signer,
        mode=mode,
    )
    return decision, (result.value if error is None else None), answers
