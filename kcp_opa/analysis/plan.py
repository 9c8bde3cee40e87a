"""The order ``prove`` and ``diff`` spend a budget in: the rows of the space, phase by phase.

Each unit with each task type in the clean action; then what each restriction forbids on every
unit's weakest action that is not a DENY; then one fact at a time around each clean action that
is not a DENY (where an allow can appear), with the clock's edges after two passes; then an
all-pairs covering array; then seeded samples.
"""

from __future__ import annotations

from collections.abc import Iterator

from kcp_opa.analysis.covering import all_pairs, full_product, sampled
from kcp_opa.analysis.restricted import RESTRICTED_FACTS
from kcp_opa.analysis.space import Space

#: The states an action can be executed from (ALLOW, or once its controls are satisfied: the
#: contract's require_approval outcome). A run that reaches none proved only that things deny.
PASSABLE = ("ALLOW", "USER_CONFIRMATION", "STEP_UP_AUTHENTICATION", "IDENTITY_VERIFICATION", "HUMAN_APPROVAL")


def plan_rows(
    space: Space, seed: int, exhaustive: bool, clean: list[tuple[tuple[int, ...], str]]
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(phase, row) in the order the budget is spent; CLEAN is filled by the caller with each
    clean row's decision as it goes (one fact at a time is varied around those not DENY)."""
    sizes = [len(d.choices) for d in space.dims]
    if exhaustive:
        for row in full_product(sizes):
            yield "exhaustive", row
        return
    units, tasks = sizes[0], sizes[1]
    for task in range(tasks):  # every unit (the unknown one too) early, whatever the budget
        for unit in range(units):
            yield "clean", (unit, task, *([0] * (len(sizes) - 2)))
    # One fact at a time around each clean action that is not a DENY, weakest first (where an
    # allow can appear), absences first, spread: each pass gives every such action a different
    # deviation, so a small budget still varies every fact on some action.
    around = [row for row, state in sorted(clean, key=lambda item: strength(item[1])) if state != "DENY"]
    deviations = sorted(
        ((dim, value) for dim in range(2, len(sizes)) for value in range(1, sizes[dim])),
        key=lambda dv: space.dims[dv[0]].choices[dv[1]].label not in ("absent", "none", "empty"),
    )
    # The clock's edges (the action's age and skew limits, the unit's freshness and temporal
    # window, each at the edge and one past it) on every such action, after two passes:
    # they are unit-specific, and where a unit declares none the action repeats and costs nothing.
    clock = [d for d, dim in enumerate(space.dims) if dim.name == "clock"]
    edges = [(dim, value) for dim in clock for value in range(1, sizes[dim])]
    # What each restriction forbids (an external model, a target outside the residency, a
    # training purpose) on every unit's weakest action that is not a DENY, first: a restriction
    # lost to a typo leaves that action allowed, and a small budget still decides it.
    weakest: dict[int, tuple[int, ...]] = {}
    for row in around:
        weakest.setdefault(row[0], row)
    for row in weakest.values():
        for dim, value in _restricted(space):
            yield "restricted", (*row[:dim], value, *row[dim + 1 :])
    for k in range(len(deviations) if around else 0):
        for i, row in enumerate(around):
            dim, value = deviations[(k + i) % len(deviations)]
            yield "one_fact", (*row[:dim], value, *row[dim + 1 :])
        for row in around if k == 1 else ():
            for dim, value in edges:
                yield "edges", (*row[:dim], value, *row[dim + 1 :])
    for row in all_pairs(sizes, seed):
        yield "pairs", row
    while True:
        for row in sampled(sizes, 256, seed := seed + 1):
            yield "sampled", row


#: The contract's routing order, weakest first (gate contract section 2).
STATE_ORDER = (
    "ALLOW",
    "USER_CONFIRMATION",
    "STEP_UP_AUTHENTICATION",
    "IDENTITY_VERIFICATION",
    "HUMAN_APPROVAL",
    "ESCALATE",
    "COMPLIANCE_REVIEW",
    "DENY",
)


def strength(state: str) -> int:
    return STATE_ORDER.index(state) if state in STATE_ORDER else len(STATE_ORDER)


def _restricted(space: Space) -> list[tuple[int, int]]:
    """(dimension, value) of each fact a restriction forbids (RESTRICTED_FACTS)."""
    out = []
    first_purpose = space.context.purposes[0] if space.context.purposes else None
    for name, label in RESTRICTED_FACTS.values():
        wanted = label if label is not None else first_purpose
        for d, dim in enumerate(space.dims):
            labels = [choice.label for choice in dim.choices]
            if dim.name == name and wanted in labels:
                out.append((d, labels.index(wanted)))
    return out
