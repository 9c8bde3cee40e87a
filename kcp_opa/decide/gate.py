"""The gate agents call: check and hash the action, build the input, evaluate, type the answer.

Everything the policy reads is in ``input`` (the action and the decision time), so an archived
input and the bundle revision reproduce the decision on regopy and on ``opa eval`` alike.
Python decides nothing here: a malformed or missing policy answer becomes the fail-closed
``engine_error`` verdict.
"""

from __future__ import annotations

import datetime as dt
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.context.builder import ContextSources
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.errors import ActionRejectedError, EngineLoadError, KcpOpaError, LedgerError, LedgerUnavailableError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.signing import seal, seal_holds
from kcp_opa.decide.active import ActiveBundle, utc_now
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.crosscheck import CROSS_CHECK_ENGINES, OpaReference
from kcp_opa.decide.engine import DECISION_ENTRYPOINT, Evaluator
from kcp_opa.decide.evaluation import evaluated
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.decide.gateinput import DecisionInput, build_input, created_epoch_seconds, decision_time
from kcp_opa.decide.modes import ModeSwitch
from kcp_opa.decide.pool import open_engine, retire_later
from kcp_opa.decide.shadow import ShadowCandidate
from kcp_opa.models.decision import AUDIT_UNAVAILABLE_VERDICT, Decision
from kcp_opa.trail.entries import AuditTrail

_log = structlog.get_logger("kcp_opa.gate")
__all__ = ["ActiveBundle", "DecisionInput", "Gate", "build_input", "created_epoch_seconds", "decision_time"]


#: Controls the gate satisfies itself when its audit ledger is on: the decision is durably
#: written before it is returned, or it becomes a DENY ``audit_unavailable`` (an outage raises).
SYSTEM_CONTROLS = ("standard_audit_logging",)


class Gate:
    """Decisions from one compiled bundle at a time. Thread-safe; build once, call ``decide`` per action.

    Its settings are one :class:`GateConfig`. With a ledger, every decision is written to it
    (durably) before ``decide`` returns, and ``standard_audit_logging`` counts as satisfied;
    without one, that control stays missing and no decision allows execution. ``activate`` swaps
    in a new bundle atomically: a decision runs wholly on the bundle it was prepared for
    (decisions in flight finish on the old one).
    """

    def __init__(self, bundle: LoadedBundle, *, config: GateConfig = GateConfig()) -> None:  # noqa: B008 (frozen)
        #: Where the gate's facts come from (kcp_opa.context); None: every gate fact is missing.
        self.context, self.isolation = config.context, config.isolation
        self.plan_cache, self.cross_check = config.plan_cache, config.cross_check
        self.verification = config.verification
        self.ledger = config.ledger
        self._swap_lock = threading.Lock()
        self._recent: dict[str, ActiveBundle] = {}
        self.last_error: str | None = None
        self.last_error_at: str | None = None
        self.shadow: ShadowCandidate | None = None
        self.modes = ModeSwitch()  # enforce | log_only; changed only through modes.request (ledger)
        self._active = self._load(bundle, config.preflight)
        self._recent[bundle.sha256] = self._active
        self._seal_key = secrets.token_bytes(32)

    def _load(self, bundle: LoadedBundle, preflight: bool) -> ActiveBundle:
        engine = open_engine(bundle, preflight=preflight, plan_cache=self.plan_cache, isolation=self.isolation)
        reference: OpaReference | None = None
        if self.cross_check is not None:
            if self.cross_check not in CROSS_CHECK_ENGINES:
                raise EngineLoadError(
                    f"cross_check={self.cross_check!r}: the engines are {', '.join(CROSS_CHECK_ENGINES)}"
                )
            reference = OpaReference(bundle, DECISION_ENTRYPOINT)
        metadata = bundle.manifest.get("metadata", {}).get("kcp_opa", {})
        audit = AuditTrail(self.ledger, bundle) if self.ledger is not None else None
        version, counting = str(metadata.get("policy_version", "")), bundle.parameters.to_dict()
        return ActiveBundle(bundle, engine, reference, version, audit, utc_now(), counting)

    @classmethod
    def from_bundle(cls, path: str | Path, *, config: GateConfig = GateConfig()) -> Gate:  # noqa: B008 (frozen)
        """Load a bundle written by ``kcp-opa compile``, verified with ``config.verification``."""
        return cls(read_bundle(path, verification=config.verification), config=config)

    # -- the active bundle, and swapping it ------------------------------------------------------

    @property
    def bundle(self) -> LoadedBundle:
        return self._active.bundle

    @property
    def engine(self) -> Evaluator:
        return self._active.engine

    @property
    def reference(self) -> OpaReference | None:
        return self._active.reference

    @property
    def policy_version(self) -> str:
        return self._active.policy_version

    @property
    def bundle_revision(self) -> str:
        return self._active.bundle.revision

    @property
    def audit(self) -> AuditTrail | None:
        return self._active.audit

    def activate(self, path: str | Path) -> ActiveBundle:
        """Read, verify (the gate's keys), plan (in a child) and swap in the bundle at ``path``.

        All or nothing: on any failure the running bundle keeps serving, the error is kept for
        :meth:`status` and raised. A bundle whose sha256 is already active is not reloaded.
        """
        with self._swap_lock:
            try:
                loaded = read_bundle(path, verification=self.verification)
                if loaded.sha256 == self._active.bundle.sha256:
                    return self._active
                candidate = self._load(loaded, preflight=True)
            except KcpOpaError as exc:
                self.record_refusal(str(exc))
                raise
            previous = self._active
            self._recent[loaded.sha256] = candidate
            while len(self._recent) > 4:  # inputs prepared on older bundles are refused, not misdecided
                retire_later(self._recent.pop(next(iter(self._recent))).engine)
            self._active = candidate  # one reference assignment: a decision sees old or new, whole
            self.last_error = self.last_error_at = None
        _log.info("bundle_activated", revision=loaded.revision, sha256=loaded.sha256, previous=previous.bundle.revision)
        return candidate

    def record_refusal(self, error: str) -> None:
        """A new bundle that did not activate (here or in a service reload): kept for :meth:`status`."""
        self.last_error, self.last_error_at = error, utc_now()
        _log.error("bundle_activation_refused", error=error, serving=self._active.bundle.revision)

    def status(self) -> JsonDict:
        """The active bundle (revision, sha256, signer), when it was activated and the last refused activation."""
        active = self._active
        return {
            "bundle_revision": active.bundle.revision,
            "policy_version": active.policy_version,
            "mode": self.modes.status(),
            "bundle": {
                "revision": active.bundle.revision,
                "sha256": active.bundle.sha256,
                "signer": active.bundle.signer,
                "verified": active.bundle.signature is not None,
                "activated_at": active.activated_at,
                "last_error": self.last_error,
                "last_error_at": self.last_error_at,
            },
        }

    def _active_for(self, prepared: DecisionInput) -> ActiveBundle:
        active = self._active
        if not prepared.bundle_sha256 or prepared.bundle_sha256 == active.bundle.sha256:
            revision = prepared.document.get("context", {}).get("bundle_revision")
            if not prepared.bundle_sha256 and revision not in ("", active.bundle.revision):
                raise ActionRejectedError(
                    "", f"prepared for bundle revision {revision}, which is not active: prepare again"
                )
            return active
        found = self._recent.get(prepared.bundle_sha256)
        if found is None:
            raise ActionRejectedError("", "prepared for a bundle that is no longer loaded: prepare again")
        return found

    @property
    def system_controls(self) -> tuple[str, ...]:
        return SYSTEM_CONTROLS if self.audit is not None else ()

    def prepare(
        self,
        action: JsonObject | CheckedAction,
        *,
        now: dt.datetime | str | None = None,
        principal: str | None = None,
        context: ContextSources | None = None,
    ) -> DecisionInput:
        """The input ``decide`` would evaluate (for archiving before the decision, or replay), sealed
        by this gate: ``decide_prepared`` refuses it if anything in it is changed.

        No control counts as satisfied here: controls are satisfied only by recorded evidence,
        never by the caller's say-so (an agent must not mark its own controls; contract §1.6).
        """
        return self._seal(self.input_for(action, now=now, principal=principal, context=context))

    def input_for(
        self,
        action: JsonObject | CheckedAction,
        *,
        now: dt.datetime | str | None = None,
        principal: str | None = None,
        context: ContextSources | None = None,
    ) -> DecisionInput:
        """The input for ``action`` on the active bundle, unsealed: ``decide`` evaluates it at once,
        ``prepare`` seals it. A host that vouches for its facts (a subclass) builds its sources here."""
        active = self._active
        controls = SYSTEM_CONTROLS if active.audit is not None else ()
        sources = StoreCounters.bound_to(context if context is not None else self.context, active.counting)
        return self._built(active, action, now=now, satisfied_controls=controls, context=sources, principal=principal)

    @staticmethod
    def _sealed_fields(prepared: DecisionInput) -> list[object]:
        """What the gate's seal on a prepared input covers."""
        fields: list[object] = [prepared.document, prepared.decision_id, prepared.action_hash, prepared.trace_id]
        fields += [prepared.trace_id_generated, prepared.evaluated_at, prepared.bundle_sha256]
        return [*fields, prepared.original_decision_id, prepared.redecision]

    def reprepare(
        self,
        action: JsonObject | CheckedAction,
        *,
        at: str,
        decision_id: str,
        satisfied: Sequence[str],
        facts: object,
        redecision: str,
        original_decision_id: str | None = None,
    ) -> DecisionInput:
        """A recorded decision's input again, sealed: its id, time ``at`` and recorded context (``facts``),
        with ``satisfied`` as the control desk verified them. For the desk and reloaded records, never a caller.
        Its ledger entry is a re-decision (step ``redecision``) of ``original_decision_id`` (default: its id)."""
        built = facts if isinstance(facts, Mapping) else {}
        made = self._built(
            self._active, action, now=at, satisfied_controls=satisfied, decision_id=decision_id, built=built
        )
        made = replace(made, original_decision_id=original_decision_id or decision_id, redecision=redecision)
        return self._seal(made)

    @staticmethod
    def _built(active: ActiveBundle, action: JsonObject | CheckedAction, **fields: Any) -> DecisionInput:
        """An input built for ``active`` (it is decided on that bundle or refused)."""
        built = build_input(action, bundle_revision=active.bundle.revision, **fields)
        return replace(built, bundle_sha256=active.bundle.sha256)

    def _seal(self, built: DecisionInput) -> DecisionInput:
        """``built`` sealed by this gate (``decide_recorded`` refuses inputs it did not seal)."""
        return replace(built, seal=seal(self._seal_key, self._sealed_fields(built)))

    def evaluate(self, prepared: DecisionInput) -> tuple[Decision, JsonObject | None]:
        """Evaluate a prepared input: the typed decision and the policy's raw result (None on error)."""
        decision, result, _ = evaluated(self._active_for(prepared), prepared, self.modes.mode)
        return decision, result

    def decide(
        self,
        action: JsonObject | CheckedAction,
        *,
        now: dt.datetime | str | None = None,
        principal: str | None = None,
        context: ContextSources | None = None,
    ) -> Decision:
        """Decide one action (``principal``: whom the facts are established for; ``context``: this
        decision's sources instead of the gate's). Raises :class:`ActionRejectedError` for an action
        that may not be evaluated, :class:`StoreUnavailableError` when a database it needs is down.

        The input is built and evaluated here, never handed out in between: it is not sealed and
        re-verified (the seal is for inputs that leave the gate, ``prepare``)."""
        return self._decide(self.input_for(action, now=now, principal=principal, context=context))[0]

    def decide_prepared(self, prepared: DecisionInput) -> Decision:
        """Evaluate and, with a ledger, record durably; a failed write turns it into a DENY."""
        return self.decide_recorded(prepared)[0]

    def decide_recorded(self, prepared: DecisionInput) -> tuple[Decision, JsonObject | None]:
        """Like ``decide_prepared``, also returning the ledger entry that recorded the decision.

        Only inputs this gate sealed are decided: an edited input (say, controls marked
        satisfied by the caller) is refused before it can be evaluated or archived.
        """
        if not seal_holds(self._seal_key, self._sealed_fields(prepared), prepared.seal):
            raise ActionRejectedError("", "the prepared input was not built by this gate or was edited after prepare()")
        return self._decide(prepared)

    def _decide(self, prepared: DecisionInput) -> tuple[Decision, JsonObject | None]:
        """Evaluate an input this gate built (sealed and verified, or never handed out) and record it."""
        active = self._active_for(prepared)
        decision, result, answers = evaluated(active, prepared, self.modes.mode)
        if active.audit is None:
            return decision, None
        shadow = self.shadow
        try:
            entry = active.audit.decision(
                prepared.document,
                prepared.document["action"],
                decision,
                result,
                engine_results=answers,
                shadow=None if shadow is None else shadow.sha256,
                redecision=(prepared.original_decision_id, prepared.redecision) if prepared.redecision else None,
            )
        except LedgerUnavailableError:
            raise  # the ledger's database is down: a fault to retry, not a decision (nothing was recorded)
        except LedgerError as exc:
            _log.error("audit_unavailable", decision_id=prepared.decision_id, error=str(exc))
            return replace(decision, verdict=AUDIT_UNAVAILABLE_VERDICT, engine_error=f"audit: {exc}"), None
        if shadow is not None and active.audit is not None:
            ref = {"revision": active.bundle.revision, "sha256": active.bundle.sha256}
            shadow.record(active.audit, ref, prepared.document, decision, result)
        return decision, entry

    def set_shadow(self, path: str | Path | None) -> ShadowCandidate | None:
        """Evaluate the candidate bundle at ``path`` beside the active one on every recorded
        decision (None stops); verified with this gate's keys. It never decides: differences are
        ``shadow`` ledger entries (``kcp-opa audit shadow-report``)."""
        if path is None:
            self.shadow = None
            return None
        bundle = read_bundle(path, verification=self.verification)
        self.shadow = ShadowCandidate.of(bundle, plan_cache=self.plan_cache)
        return self.shadow

    def decide_many(
        self,
        actions: Iterable[JsonObject | CheckedAction],
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
                prepared.append(self.input_for(action, now=now))
            except ActionRejectedError as exc:
                raise ActionRejectedError(f"[{index}]{exc.path}", exc.reason) from None
        if workers <= 1:
            return [self._decide(item)[0] for item in prepared]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kcp-opa-gate") as pool:
            return [decision for decision, _ in pool.map(self._decide, prepared)]
