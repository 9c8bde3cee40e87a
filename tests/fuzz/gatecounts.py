"""The gate's own counts and attested spend, drawn for the differential fuzzer (issue 25).

A decision on a deployment with budgets, velocity rules or KCP rate limits reads
``input.context.counters`` (what the gate counted in its store) and ``input.context.metering``
(spend attestations a metering issuer signed, verified by the context stage). Neither comes
from the action, so mutating the action alone never reaches the budget evaluator's counted
branches. These strategies draw both the way a store and a metering source hand them over:

- counters keyed as the gate keys them for the MUTATED action (``kcp_opa.context.counting``),
  sometimes under the case's original key or another one (a count under another key is
  ``context_missing``), with values on each side of every declared limit and threshold;
- spend attestations per declared budget: amounts around the limit, the budget's currency or
  another, periods inside and outside the window, current, just expired and expiring at the
  decision time to the second; sometimes a refused one (``attestations_refused``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import draws as st

from kcp_opa.context import counting
from kcp_opa.context.metering import epoch_seconds

#: Hidden keys of a drawn action (popped before the action is checked: the gate holds these).
COUNTERS = "__fuzz_counters"
METERING = "__fuzz_metering"


def _near(*bounds: Any) -> Any:
    """Integers on each side of every bound, zero, and now and then any count."""
    values = sorted({max(0, b + d) for b in bounds if isinstance(b, int) for d in (-1, 0, 1)} | {0})
    return st.sampled_from(values) | st.integers(0, 10**8)


def _keyed(draw: Any, per: str, action: Mapping[str, Any], before: Any) -> str:
    """The mutated action's key mostly; the case's key or a stranger's now and then."""
    choice = draw(st.integers(0, 5))
    mine = counting.key(per, action)
    if choice == 0 and isinstance(before, str):
        return before
    if choice == 1 or mine is None:
        return "someone/else"
    return mine


@st.composite
def drawn_counters(draw: Any, parameters: Mapping[str, Any], rate_limits: list[int],
                   base: Mapping[str, Any] | None, action: Mapping[str, Any]) -> dict[str, Any] | None:  # fmt: skip
    """``input.context.counters`` for ``action``: None (no counter source) now and then."""
    if draw(st.integers(0, 9)) == 0:
        return None
    given = copy.deepcopy(dict(base or {}))
    out: dict[str, Any] = {}
    budgets: dict[str, Any] = {}
    for b in parameters.get("budgets") or []:
        before = (given.get("budgets") or {}).get(b["id"], {})
        if draw(st.integers(0, 7)) == 0:
            continue  # not counted: context_missing for this budget
        bounds = (b.get("limit_minor"), b.get("approval_threshold_minor"))
        budgets[b["id"]] = {"key": _keyed(draw, str(b["per"]), action, before.get("key")),
                            "spent_minor": draw(_near(*bounds)), "reserved_minor": draw(_near(0, *bounds))}  # fmt: skip
    out["budgets"] = budgets
    velocity: dict[str, Any] = {}
    for v in parameters.get("velocity") or []:
        before = (given.get("velocity") or {}).get(v["id"], {})
        if draw(st.integers(0, 7)) == 0:
            continue
        velocity[v["id"]] = {
            "key": _keyed(draw, str(v["per"]), action, before.get("key")),
            "count": draw(_near(v.get("max_count"))),
            "sum_minor": draw(_near(v.get("max_sum_minor"))),
        }
    out["velocity"] = velocity
    if draw(st.integers(0, 5)):
        paid = counting.beneficiary(action)
        key = f"{action.get('tenant_id')}/{paid}" if paid is not None else "someone/else"
        out["beneficiary"] = {"key": key if draw(st.integers(0, 5)) else "someone/else",
                              "prior_payments": draw(st.sampled_from([0, 0, 1, 2, 7]))}  # fmt: skip
    knowledge = action.get("knowledge") if isinstance(action.get("knowledge"), Mapping) else {}
    if knowledge and draw(st.integers(0, 4)):
        windows = ("requests_per_minute", "requests_per_hour", "requests_per_day")
        unit = f"{knowledge.get('project', '')}/{knowledge.get('unit', '')}"
        rate: dict[str, Any] = {
            "unit": unit if draw(st.integers(0, 5)) else "other/unit",
            "principal": counting.principal(action) or "nobody",
        }
        rate.update({w: draw(_near(*rate_limits)) for w in windows})
        out["rate"] = rate
    return out


@st.composite
def drawn_metering(draw: Any, parameters: Mapping[str, Any], action: Mapping[str, Any],
                   now: str) -> tuple[list[dict[str, Any]] | None, list[dict[str, str]]]:  # fmt: skip
    """(``input.context.metering`` or None for no metering source, ``attestations_refused``)."""
    budgets = [b for b in parameters.get("budgets") or [] if isinstance(b, Mapping)]
    if not budgets or draw(st.integers(0, 2)) == 0:
        return None, []
    at = epoch_seconds(now)
    assert at is not None, now
    spends: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 3))):
        b = draw(st.sampled_from(budgets))
        window = int(b.get("window_seconds", 86400))
        end = at + draw(st.sampled_from([-window - 1, -window, -window + 1, -60, 0, 60]))
        issued = end + draw(st.sampled_from([0, 1]))
        spends.append({
            "budget": b["id"] if draw(st.integers(0, 7)) else "unknown_budget",
            "subject": _keyed(draw, str(b["per"]), action, None),
            "amount_minor": draw(_near(b.get("limit_minor"), b.get("approval_threshold_minor"))),
            "currency": draw(st.sampled_from([b.get("currency"), b.get("currency"), "EUR", "JPY"])),
            "period_start_epoch_seconds": end - 3600,
            "period_end_epoch_seconds": end,
            "issued_epoch_seconds": issued,
            "expires_epoch_seconds": at + draw(st.sampled_from([-1, 0, 1, 600])),
            "class": "attested",
            "source": "attestation:meter/k1",
        })  # fmt: skip
    refused: list[dict[str, str]] = []
    if draw(st.integers(0, 5)) == 0:
        refused.append({"fact": "metered_spend", "reason": draw(st.sampled_from(["bad_signature", "unsigned"])),
                        **({"budget": draw(st.sampled_from([str(b["id"]) for b in budgets]))}
                           if draw(st.booleans()) else {})})  # fmt: skip
    return sorted(spends, key=lambda s: (s["budget"], s["subject"], s["period_start_epoch_seconds"])), refused
