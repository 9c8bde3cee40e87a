"""The gate agents call: check and hash the action, build the input, evaluate, type the answer.

Everything the policy reads is in ``input`` (the action and the decision time), so an archived
input and the bundle revision reproduce the decision on regopy and on ``opa eval`` alike.
Python decides nothing here: a malformed or missing policy answer becomes the fail-closed
``engine_error`` verdict.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import ActionRejectedError, EngineLoadError, LedgerError, StoreError
from kcp_opa.decide.action import action_hash, check_action, folded_strings, trace_id_of
from kcp_opa.decide.counting import CounterSource
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, EngineResult, RegopyEngine
from kcp_opa.models.decision import (
    AUDIT_UNAVAILABLE_VERDICT,
    ENGINE_DIVERGENCE_VERDICT,
    ENGINE_ERROR_VERDICT,
    Decision,
    MalformedDecisionError,
    PolicyVerdict,
)
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger

_log = structlog.get_logger("kcp_opa.gate")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class DecisionInput:
    """The exact ``input`` document evaluated, kept so it can be archived and replayed."""

    document: Mapping[str, Any]
    decision_id: str
    action_hash: str
    trace_id: str
    trace_id_generated: bool
    evaluated_at: str
    #: HMAC by the gate that built it; ``decide_prepared`` refuses an input without a valid one.
    seal: str = field(default="", repr=False)


def decision_time(now: dt.datetime | str | None = None) -> dt.datetime:
    """The decision time as an aware UTC datetime at whole seconds (what receipts and logs use)."""
    if now is None:
        moment = dt.datetime.now(dt.UTC)
    elif isinstance(now, str):
        try:
            moment = dt.datetime.fromisoformat(now.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ActionRejectedError(
                "", f"decision time {now!r} is not RFC 3339 (e.g. 2026-11-29T10:00:00Z)"
            ) from None
    else:
        moment = now
    if moment.tzinfo is None:
        raise ActionRejectedError("", "the decision time must carry a timezone (e.g. 2026-11-29T10:00:00Z)")
    return moment.astimezone(dt.UTC).replace(microsecond=0)


def created_epoch_seconds(action: Mapping[str, Any]) -> int:
    """``created_at`` as epoch seconds: the policy cannot parse RFC 3339 the same way on both
    engines (docs/engine-findings.md), so the freshness rules read this integer from input."""
    text = action.get("created_at")
    try:
        moment = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ActionRejectedError("/created_at", f"{text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ActionRejectedError("/created_at", "must carry a timezone")
    return int((moment - _EPOCH).total_seconds() // 1)


def build_input(
    action: Mapping[str, Any],
    *,
    now: dt.datetime | str | None = None,
    satisfied_controls: Sequence[str] = (),
    bundle_revision: str = "",
    decision_id: str | None = None,
    counters: Mapping[str, Any] | None = None,
) -> DecisionInput:
    """Check the action and assemble the policy input; raises :class:`ActionRejectedError`.

    ``counters`` (the gate's counts from its own history, docs/budgets.md) go to
    ``context.counters``; without them a declared budget or rate limit is ``context_missing``.
    """
    check_action(action)
    moment = decision_time(now)
    evaluated_at = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    seconds = int((moment - _EPOCH).total_seconds())
    the_id = decision_id or f"dec_{uuid.uuid4().hex}"
    digest = action_hash(action)
    given_trace = trace_id_of(action)
    trace_id = given_trace or uuid.uuid4().hex
    document: dict[str, Any] = {
        "action": action,
        "context": {
            "decision_id": the_id,
            "action_hash": digest,
            "bundle_revision": bundle_revision,
            "evaluated_at": evaluated_at,
            "trace_id": trace_id,
            "trace_id_generated": given_trace is None,
            "decision_epoch_seconds": seconds,
            "decision_epoch_day": seconds // 86400,
            "action_created_epoch_seconds": created_epoch_seconds(action),
            "satisfied_controls": sorted(set(satisfied_controls)),
            "folded": folded_strings(action),
        },
    }
    if counters is not None:
        document["context"]["counters"] = dict(counters)
    return DecisionInput(document, the_id, digest, trace_id, given_trace is None, evaluated_at)


#: Controls the gate satisfies itself when its audit ledger is on: the decision is durably
#: written before it is returned, or it becomes a DENY ``audit_unavailable``.
SYSTEM_CONTROLS = ("standard_audit_logging",)


class Gate:
    """Decisions from one compiled bundle. Thread-safe; build once, call ``decide`` per action.

    With a ``ledger``, every decision is written to it (durably) before ``decide`` returns, and
    ``standard_audit_logging`` counts as satisfied; without one, that control stays missing and
    no decision allows execution.
    """

    def __init__(
        self,
        bundle: LoadedBundle,
        *,
        preflight: bool = True,
        ledger: AuditLedger | None = None,
        plan_cache: Path | None = None,
        cross_check: str | None = None,
        counters: CounterSource | None = None,
    ) -> None:
        self.bundle = bundle
        #: Where ``input.context.counters`` comes from (class gate); None: no counts, so a
        #: declared budget or rate limit is context_missing (ESCALATE).
        self.counters = counters
        self.plan_cache = plan_cache
        self.engine = RegopyEngine(bundle, DECISION_ENTRYPOINT, preflight=preflight, plan_cache=plan_cache)
        self.cross_check = cross_check
        self.reference: Any = None
        if cross_check is not None:
            from kcp_opa.decide.crosscheck import CROSS_CHECK_ENGINES, OpaReference

            if cross_check not in CROSS_CHECK_ENGINES:
                raise EngineLoadError(f"cross_check={cross_check!r}: the engines are {', '.join(CROSS_CHECK_ENGINES)}")
            self.reference = OpaReference(bundle, DECISION_ENTRYPOINT)
        metadata = bundle.manifest.get("metadata", {}).get("kcp_opa", {})
        self.policy_version = str(metadata.get("policy_version", ""))
        self.bundle_revision = bundle.revision
        self.audit = AuditTrail(ledger, bundle) if ledger is not None else None
        self._seal_key = secrets.token_bytes(32)

    @classmethod
    def from_bundle(
        cls,
        path: str | Path,
        *,
        preflight: bool = True,
        ledger: AuditLedger | None = None,
        plan_cache: str | Path | None = None,
        cross_check: str | None = None,
        counters: CounterSource | None = None,
    ) -> Gate:
        """Load a bundle written by ``kcp-opa compile``.

        ``preflight`` first plans the bundle in a child process, so a policy that would abort
        rego-cpp fails here with :class:`EngineLoadError` instead of killing this process.
        Turn it off only for bundles this process has already checked. ``plan_cache`` (a
        directory) keeps rego-cpp's binary plan per bundle sha256: the first start builds and
        saves it, later starts load it (3.7x faster at 10,000 units; docs/performance.md).
        ``cross_check="opa"`` also evaluates every decision on the OPA reference engine; any
        difference is a DENY ``engine_divergence`` with both results in the ledger.
        """
        cache = Path(plan_cache) if plan_cache is not None else None
        return cls(
            read_bundle(path),
            preflight=preflight,
            ledger=ledger,
            plan_cache=cache,
            cross_check=cross_check,
            counters=counters,
        )

    @property
    def system_controls(self) -> tuple[str, ...]:
        return SYSTEM_CONTROLS if self.audit is not None else ()

    def prepare(self, action: Mapping[str, Any], *, now: dt.datetime | str | None = None) -> DecisionInput:
        """The input ``decide`` would evaluate (for archiving before the decision, or replay).

        No control counts as satisfied here: controls are satisfied only by recorded evidence,
        never by the caller's say-so (an agent must not mark its own controls; contract §1.6).
        """
        counted = None
        if self.counters is not None:
            check_action(action)  # a refused action is not counted as a request
            try:
                counted = self.counters.counters(action, now=decision_time(now))
            except StoreError as exc:  # no counts: a declared limit is context_missing, never an allow
                _log.error("counters_unavailable", error=str(exc))
        return self._seal(
            build_input(
                action,
                now=now,
                satisfied_controls=self.system_controls,
                bundle_revision=self.bundle_revision,
                counters=counted,
            )
        )

    def _seal_of(self, prepared: DecisionInput) -> str:
        fields = [prepared.document, prepared.decision_id, prepared.action_hash, prepared.trace_id]
        message = canonical_json([*fields, prepared.trace_id_generated, prepared.evaluated_at])
        return hmac.new(self._seal_key, message, hashlib.sha256).hexdigest()

    def _seal(self, prepared: DecisionInput) -> DecisionInput:
        """Seal an input this gate built (``prepare``, or the control desk with recorded controls)."""
        return replace(prepared, seal=self._seal_of(prepared))

    def evaluate(self, prepared: DecisionInput) -> tuple[Decision, Mapping[str, Any] | None]:
        """Evaluate a prepared input: the typed decision and the policy's raw result (None on error)."""
        decision, result, _ = self._evaluate(prepared)
        return decision, result

    def _cross_checked(self, prepared: DecisionInput) -> tuple[EngineResult, dict[str, Any] | None]:
        """regopy's result, or a divergence error with both engines' answers (cross_check only)."""
        result = self.engine.evaluate(prepared.document)
        if self.reference is None:
            return result, None
        from kcp_opa.decide.crosscheck import first_difference

        other = self.reference.evaluate(prepared.document)
        if result.error is not None and other.error is not None:
            return result, None  # no decision on either engine: an engine error, not a divergence
        where = first_difference(result.value, other.value) if result.error is None and other.error is None else "/"
        if where is None:
            return result, None
        answers = {
            "regopy": result.value if result.error is None else {"engine_error": result.error},
            "opa": other.value if other.error is None else {"engine_error": other.error},
        }
        _log.error("engine_divergence", decision_id=prepared.decision_id, at=where)
        return EngineResult(None, f"engine_divergence: regopy and OPA differ at {where}"), answers

    def _evaluate(self, prepared: DecisionInput) -> tuple[Decision, Mapping[str, Any] | None, dict[str, Any] | None]:
        result, answers = self._cross_checked(prepared)
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
            policy_version=self.policy_version,
            bundle_revision=self.bundle_revision,
            trace_id=trace_id,
            evaluated_at=prepared.evaluated_at,
            engine_error=error,
        )
        return decision, (result.value if error is None else None), answers

    def decide(self, action: Mapping[str, Any], *, now: dt.datetime | str | None = None) -> Decision:
        """Decide one action. Raises :class:`ActionRejectedError` for an action that may not be evaluated."""
        return self.decide_prepared(self.prepare(action, now=now))

    def decide_prepared(self, prepared: DecisionInput) -> Decision:
        """Evaluate and, with a ledger, record durably; a failed write turns it into a DENY."""
        return self.decide_recorded(prepared)[0]

    def decide_recorded(self, prepared: DecisionInput) -> tuple[Decision, Mapping[str, Any] | None]:
        """Like ``decide_prepared``, also returning the ledger entry that recorded the decision.

        Only inputs this gate sealed are decided: an edited input (say, controls marked
        satisfied by the caller) is refused before it can be evaluated or archived.
        """
        if not hmac.compare_digest(prepared.seal, self._seal_of(prepared)):
            raise ActionRejectedError("", "the prepared input was not built by this gate or was edited after prepare()")
        decision, result, answers = self._evaluate(prepared)
        if self.audit is None:
            return decision, None
        action = prepared.document["action"]
        try:
            entry = self.audit.decision(prepared.document, action, decision, result, engine_results=answers)
        except LedgerError as exc:
            _log.error("audit_unavailable", decision_id=prepared.decision_id, error=str(exc))
            return replace(decision, verdict=AUDIT_UNAVAILABLE_VERDICT, engine_error=f"audit: {exc}"), None
        return decision, entry

    def decide_many(
        self,
        actions: Iterable[Mapping[str, Any]],
        *,
        now: dt.datetime | str | None = None,
        workers: int = 1,
    ) -> list[Decision]:
        """Decide a batch, in order. Every action is checked before any is evaluated.

        An invalid action raises :class:`ActionRejectedError` naming its index, and nothing is
        decided. ``workers`` > 1 evaluates on that many threads (regopy releases the GIL).
        """
        prepared = []
        for index, action in enumerate(actions):
            try:
                prepared.append(self.prepare(action, now=now))
            except ActionRejectedError as exc:
                raise ActionRejectedError(f"[{index}]{exc.path}", exc.reason) from None
        if workers <= 1:
            return [self.decide_prepared(item) for item in prepared]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kcp-opa-gate") as pool:
            return list(pool.map(self.decide_prepared, prepared))
