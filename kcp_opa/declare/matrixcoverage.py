"""Which declared data categories and sensitivities no delegation-matrix row covers.

The gate denies an action on a unit whose category or effective sensitivity has no cell in the
action's matrix row (``matrix_not_covered``, policies/kcp/evaluators/matrix.rego). A value that no
row lists at all can therefore never be acted on: ``validate`` says so before the first decision.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kcp_opa.declare.diagnostics import Diagnostic, Severity
from kcp_opa.declare.effective import effective_units
from kcp_opa.declare.manifest import Manifest
from kcp_opa.declare.matrix import DelegationMatrix

#: What the gate looks the sensitivity cell up with when nothing declares one.
UNDECLARED = "undeclared"


def coverage_gaps(manifest: Manifest, matrices: Sequence[DelegationMatrix]) -> list[Diagnostic]:
    """One warning per (dimension, value) the manifest declares that no row of any matrix lists."""
    listed: dict[str, set[str]] = {"data_categories": set(), "sensitivity": set()}
    for matrix in matrices:
        for cell in matrix.cells():
            listed[cell.dimension].add(cell.value)
    names = ", ".join(m.file for m in matrices)
    found: dict[tuple[str, str], list[str]] = {}
    for unit in effective_units(manifest):
        for dimension, value in _needed(unit.to_data()):
            if value not in listed[dimension]:
                found.setdefault((dimension, value), []).append(unit.unit_id)
    out = []
    for (dimension, value), units in sorted(found.items()):
        shown = ", ".join(units[:5]) + (f" (+{len(units) - 5} more)" if len(units) > 5 else "")
        out.append(
            Diagnostic(
                Severity.WARNING,
                "matrix_not_covered",
                f"{dimension} {value!r} (unit {shown}) is in no row of {names}: every action on it is "
                f"DENY matrix_not_covered; add {dimension}: {{{value}: <level>}} to the task types that may touch it",
                ("units",),
                file=manifest.file,
            )
        )
    return out


def _needed(unit: dict[str, object]) -> Iterator[tuple[str, str]]:
    compliance = unit.get("compliance")
    if isinstance(compliance, dict):
        for category in compliance.get("data_categories") or []:
            yield "data_categories", str(category)
    visibility = unit.get("visibility")
    if isinstance(visibility, dict):
        values = [visibility.get("default"), *(c.get("sensitivity") for c in visibility.get("conditions") or [])]
        for value in values:
            yield "sensitivity", str(value) if isinstance(value, str) else UNDECLARED
        return
    sensitivity = unit.get("sensitivity")
    yield "sensitivity", sensitivity if isinstance(sensitivity, str) else UNDECLARED


def unreachable_cells(manifests: Sequence[Manifest], matrix: DelegationMatrix) -> list[Diagnostic]:
    """The matrix's side of coverage: a cell no action can meet is a level that decides nothing.

    A warning when no unit of the manifests declares the cell's category or sensitivity (no
    action on a unit can need it); a note when its task type need not name a unit
    (``parameters.context.knowledge_bound_task_types`` leaves it out): an action of that type
    that names no unit, such as a KYA payment or withdrawal intent, needs no cell at all, so the
    cell's level never applies to it (docs/manifest-rules.md, "Unit-less action types").
    """
    declared: dict[str, set[str]] = {"data_categories": set(), "sensitivity": set()}
    for manifest in manifests:
        for unit in effective_units(manifest):
            for dimension, value in _needed(unit.to_data()):
                declared[dimension].add(value)
    context = matrix.parameters().context
    names = ", ".join(m.file for m in manifests)
    out: list[Diagnostic] = []
    for cell in matrix.cells():
        where = ("task_types", cell.task_type, cell.dimension, cell.value)
        unit_less = not context.knowledge_bound(cell.task_type)
        why_unit_less = (
            f"; and {cell.task_type} need not name a unit (parameters.context.knowledge_bound_task_types), so a "
            f"{cell.task_type} that names none meets no cell at all"
            if unit_less
            else ""
        )
        if cell.value not in declared[cell.dimension]:
            out.append(
                Diagnostic(
                    Severity.WARNING,
                    "matrix_cell_unreachable",
                    f"{cell.task_type} on {cell.dimension} {cell.value!r} ({cell.level}) can never apply: no unit of "
                    f"{names} declares {cell.dimension} {cell.value!r}{why_unit_less}",
                    where,
                    file=matrix.file,
                )
            )
        elif unit_less:
            out.append(
                Diagnostic(
                    Severity.NOTE,
                    "matrix_cell_unit_less",
                    f"{cell.task_type} on {cell.dimension} {cell.value!r} ({cell.level}) applies only to a "
                    f"{cell.task_type} that names a unit: {cell.task_type} is not in "
                    f"parameters.context.knowledge_bound_task_types, so one that names no unit (a KYA intent) meets "
                    f"no cell and is governed by the financial rules and budgets, never by this {cell.level} "
                    "(docs/manifest-rules.md, Unit-less action types)",
                    where,
                    file=matrix.file,
                )
            )
    return out
