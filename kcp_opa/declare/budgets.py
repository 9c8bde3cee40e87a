"""Budgets, velocity rules and the rate-limit outcome of the delegation matrix.

The matrix declares them (integer minor units, rolling windows); the gate counts its own
history against them (``input.context.counters``, docs/budgets.md) and the policies decide
(``policies/kcp/evaluators/budget.rego``). Here: the checks a schema cannot make, and the
normalised form the bundle carries, so the policies never meet a missing key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kcp_opa.declare.diagnostics import Findings

DEFAULT_RATE_LIMIT_OUTCOME = "DENY"
DEFAULT_VELOCITY_OUTCOME = "HUMAN_APPROVAL"


def normalised(given: Mapping[str, Any]) -> dict[str, Any]:
    """``budgets``, ``velocity`` and ``rate_limits`` with defaults filled in, sorted by id."""
    budgets = [
        {**entry, "task_types": sorted(entry["task_types"]) if "task_types" in entry else "all"}
        for entry in given.get("budgets") or []
    ]
    velocity = [{"outcome": DEFAULT_VELOCITY_OUTCOME, **entry} for entry in given.get("velocity") or []]
    for entry in (*budgets, *velocity):
        entry.pop("description", None)
    rate = {"outcome": DEFAULT_RATE_LIMIT_OUTCOME, **(given.get("rate_limits") or {})}
    return {
        "budgets": sorted(budgets, key=lambda b: str(b["id"])),
        "velocity": sorted(velocity, key=lambda v: str(v["id"])),
        "rate_limits": rate,
    }


def check(params: Mapping[str, Any], task_types: Mapping[str, Any], findings: Findings) -> None:
    """Unique ids, a threshold at or under its limit, a velocity rule with a threshold."""
    seen: dict[str, str] = {}
    for kind in ("budgets", "velocity"):
        entries = params.get(kind)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(entry, Mapping):
                continue
            here = ("parameters", kind, index)
            ident = entry.get("id")
            if isinstance(ident, str):
                if ident in seen:
                    findings.error(
                        "duplicate_counter_id",
                        f"{kind} id {ident!r} is also declared in {seen[ident]}: counts are keyed by id",
                        (*here, "id"),
                    )
                seen.setdefault(ident, kind)
            if kind == "budgets":
                _check_budget(entry, task_types, here, findings)
            elif "max_count" not in entry and "max_sum_minor" not in entry:
                findings.error(
                    "velocity_without_threshold",
                    "a velocity rule needs max_count, max_sum_minor or both: without one it never fires",
                    here,
                )


def _check_budget(
    entry: Mapping[str, Any], task_types: Mapping[str, Any], here: tuple[str | int, ...], findings: Findings
) -> None:
    threshold, limit = entry.get("approval_threshold_minor"), entry.get("limit_minor")
    if isinstance(threshold, int) and isinstance(limit, int) and threshold > limit:
        findings.error(
            "budget_threshold_above_limit",
            f"approval_threshold_minor {threshold} is above limit_minor {limit}: the approval would never be asked",
            (*here, "approval_threshold_minor"),
        )
    listed = entry.get("task_types")
    for position, task in enumerate(listed if isinstance(listed, list) else []):
        if isinstance(task, str) and task not in task_types:
            findings.warn(
                "budget_for_unknown_task",
                f"budget task type {task!r} is not in the matrix: no action of it is ever allowed",
                (*here, "task_types", position),
            )
