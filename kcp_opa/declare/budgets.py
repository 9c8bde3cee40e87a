"""Budgets, velocity rules and the rate-limit outcome of the delegation matrix.

The matrix declares them (integer minor units, rolling windows); the gate counts its own
history against them (``input.context.counters``, docs/budgets.md) and the policies decide
(``policies/kcp/evaluators/budget.rego``). Here: the checks a schema cannot make (their
normalised form, which the bundle carries, is kcp_opa.declare.parameters').
"""

from __future__ import annotations

from kcp_opa.core.jsonread import JsonObject, items
from kcp_opa.declare.diagnostics import Findings


def check(params: JsonObject, task_types: JsonObject, findings: Findings) -> None:
    """Unique ids, a threshold at or under its limit, a velocity rule with a threshold."""
    seen: dict[str, str] = {}
    for kind in ("budgets", "velocity"):
        for index, entry in enumerate(items(params.get(kind))):
            if not isinstance(entry, dict):
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


def _check_budget(entry: JsonObject, task_types: JsonObject, here: tuple[str | int, ...], findings: Findings) -> None:
    threshold, limit = entry.get("approval_threshold_minor"), entry.get("limit_minor")
    if isinstance(threshold, int) and isinstance(limit, int) and threshold > limit:
        findings.error(
            "budget_threshold_above_limit",
            f"approval_threshold_minor {threshold} is above limit_minor {limit}: the approval would never be asked",
            (*here, "approval_threshold_minor"),
        )
    for position, task in enumerate(items(entry.get("task_types"))):
        if isinstance(task, str) and task not in task_types:
            findings.warn(
                "budget_for_unknown_task",
                f"budget task type {task!r} is not in the matrix: no action of it is ever allowed",
                (*here, "task_types", position),
            )
