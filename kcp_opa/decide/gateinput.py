"""The gate's input: the action checked and hashed, the decision time, the context the policy reads.

Everything the policy reads is in ``input``, so an archived input and the bundle it names
reproduce the decision on regopy and on ``opa eval`` alike.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kcp_opa.context.builder import ContextSources, build_context
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.decide.action import check_action
from kcp_opa.decide.checked import CheckedAction

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: The decision times the gate accepts: epoch seconds and days stay non-negative and every
#: later step (a receipt expiry, a ledger timestamp) stays inside datetime's years.
_FIRST, _LAST = _EPOCH, dt.datetime(9998, 12, 31, 23, 59, 59, tzinfo=dt.UTC)


@dataclass(frozen=True)
class DecisionInput:
    """The exact ``input`` document evaluated, kept so it can be archived and replayed."""

    document: Mapping[str, Any]
    decision_id: str
    action_hash: str
    trace_id: str
    trace_id_generated: bool
    evaluated_at: str
    #: The sha256 of the bundle it was prepared for: it is decided on that bundle or refused.
    bundle_sha256: str = ""
    #: HMAC by the gate that built it; ``decide_prepared`` refuses an input without a valid one.
    seal: str = field(default="", repr=False)
    #: A re-decision's link, for the ledger only (never part of ``document``, so never of what is
    #: decided): the decision it re-decides and the step that re-decided it (``Gate.reprepare``).
    original_decision_id: str = ""
    redecision: str = ""


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
    try:
        utc = moment.astimezone(dt.UTC).replace(microsecond=0)
    except (OverflowError, ValueError):  # 9999-12-31T23:59:59-14:00 is past the last representable year
        utc = None
    if utc is None or not _FIRST <= utc <= _LAST:
        raise ActionRejectedError("", f"decision time {str(now)[:64]!r} is outside {_FIRST:%Y}-{_LAST:%Y} (UTC)")
    return utc


def created_epoch_seconds(action: JsonObject) -> int:
    """``created_at`` as epoch seconds: the policy cannot parse RFC 3339 the same way on both
    engines (docs/engine-findings.md), so the freshness rules read this integer from input."""
    text = action.get("created_at")
    try:
        moment = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ActionRejectedError("/created_at", f"{text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ActionRejectedError("/created_at", "must carry a timezone")
    try:
        return int((moment - _EPOCH).total_seconds() // 1)
    except OverflowError:
        raise ActionRejectedError("/created_at", f"{text!r} is outside the representable years") from None


#: The keys of ``input.context`` the context stage builds (kcp_opa.context.builder).
CONTEXT_KEYS = (
    "facts",
    "facts_principal",
    "facts_refused",
    "attestations_refused",
    "metering",
    "counters",
    "exceptions",
)


def built_context(document: JsonObject) -> JsonDict:
    """The context-stage part of an input: re-deciding a recorded decision (recorded controls,
    a restored record) keeps the facts it was decided on instead of asking the sources again."""
    context = document.get("context")
    if not isinstance(context, Mapping):
        return {}
    return {key: context[key] for key in CONTEXT_KEYS if key in context}


def build_input(
    action: JsonObject | CheckedAction,
    *,
    now: dt.datetime | str | None = None,
    satisfied_controls: Sequence[str] = (),
    bundle_revision: str = "",
    decision_id: str | None = None,
    context: ContextSources | None = None,
    principal: str | None = None,
    built: JsonObject | None = None,
) -> DecisionInput:
    """Check the action and assemble the policy input; raises :class:`ActionRejectedError`.

    The gate and attested facts come from ``context`` (the context stage), established for
    ``principal`` (the authenticated caller; over the library, whom the host runs the agent as).
    Without a source a fact is absent, and a rule that needs it fails closed; the counts
    (``context.counters``, docs/budgets.md) come from ``context.counters`` the same way, counted
    once the action is checked. ``built`` is a context built before (:func:`built_context`),
    used as it is. A :class:`CheckedAction` is used as checked; anything else is checked here,
    and the input holds the checked, read-only copy (never the caller's own mapping).
    """
    checked = check_action(action)
    frozen = checked.mapping
    moment = decision_time(now)
    evaluated_at = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    seconds = int((moment - _EPOCH).total_seconds())
    the_id = decision_id or f"dec_{uuid.uuid4().hex}"
    digest = checked.hash
    given_trace = checked.trace_id
    trace_id = given_trace or uuid.uuid4().hex
    document: JsonDict = {
        "action": frozen,
        "context": {
            "decision_id": the_id,
            "action_hash": digest,
            "bundle_revision": bundle_revision,
            "evaluated_at": evaluated_at,
            "trace_id": trace_id,
            "trace_id_generated": given_trace is None,
            "decision_epoch_seconds": seconds,
            "decision_epoch_day": seconds // 86400,
            "action_created_epoch_seconds": created_epoch_seconds(frozen),
            "satisfied_controls": sorted(set(satisfied_controls)),
            "folded": dict(checked.folded),
            **({"folded_refused": dict(checked.folded_refused)} if checked.folded_refused else {}),
            **(
                dict(built)
                if built is not None
                else build_context(context, frozen, principal=principal, action_hash=digest, now=moment)
            ),
        },
    }
    return DecisionInput(document, the_id, digest, trace_id, given_trace is None, evaluated_at)
