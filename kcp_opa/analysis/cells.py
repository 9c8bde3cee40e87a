"""The matrix cells ``diff`` checks first: every cell whose level OLD and NEW set differently.

A generated action reaches a cell only when it names a unit of the cell's category or
sensitivity, under the cell's task type with its matrix tool, and no other finding holds the
decision where it was. The generated space need not contain such an action (a payment without an
amount is denied whatever the matrix says), so a lowered cell could pass unseen. Each changed
cell is therefore aimed at directly: the clean action with a unit that needs the cell, the
cell's task type, and each amount, environment and role in turn, until one shows the change.

A cell is judged by the autonomy order (autonomous < confirm < approve < forbidden); a cell one
matrix lacks denies (``matrix_not_covered``), so it ranks as forbidden. The cells of a task type
NEW adds to OLD's matrix (OLD's task types all kept) are new coverage, as ``diff`` counts them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field

from kcp_opa.analysis.engines import brief
from kcp_opa.analysis.space import Sample, Space
from kcp_opa.analysis.spacedims import leaves
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, mapping, objects, strings
from kcp_opa.declare.vocabulary import AUTONOMY_LEVELS

#: The most actions aimed at one cell (units x amounts, then environments and roles).
MAX_TRIES = 24
#: The direction of a cell's change.
WEAKEN, STRENGTHEN, SAME, NEW_COVERAGE = "WEAKEN", "STRENGTHEN", "SAME", "NEW COVERAGE"
#: What a decided action showed about the cell.
SHOWN, HELD, NOT_REACHED, NO_UNIT = "shown", "held", "NOT REACHED", "no unit"
_MISSING = "(none)"


@dataclass
class CellChange:
    """One cell (task type x dimension value) whose level OLD and NEW set differently."""

    task: str
    dimension: str
    value: str
    old: str
    new: str
    direction: str
    status: str = NOT_REACHED
    held_by: list[str] = field(default_factory=list)
    tries: int = 0
    action: JsonDict | None = None
    now: str = ""
    decisions: tuple[JsonDict, JsonDict] | None = None

    @property
    def label(self) -> str:
        return f"{self.task} {self.value} {self.old} -> {self.new}"

    def to_dict(self) -> JsonDict:
        """Every field, ``task`` as ``task_type`` and each side's decision in brief."""
        shown = None
        if self.decisions is not None:
            shown = {side: brief(d) for side, d in zip(("old", "new"), self.decisions, strict=True)}
        return {"task_type": self.task, **{k: v for k, v in asdict(self).items() if k != "task"}, "decisions": shown}


def matrix_rows(bundle: LoadedBundle) -> dict[str, dict[str, dict[str, str]]]:
    """Task type -> {dimension: {value: level}}, read from the bundle's ``kcp_data/tasks`` index."""
    index = mapping(mapping(bundle.data.get("kcp_data")).get("tasks"))
    rows: dict[str, dict[str, dict[str, str]]] = {}
    for task, row in leaves(index.get("slots"), integer(index.get("depth")) or 0):
        rows[task] = {
            str(dim): {str(v): str(level) for v, level in values.items()}
            for dim, values in row.items()
            if isinstance(values, Mapping)
        }
    return rows


def changed_cells(old: LoadedBundle, new: LoadedBundle) -> list[CellChange]:
    """Every cell added, removed or set to another level, in (task, dimension, value) order."""
    before, after = matrix_rows(old), matrix_rows(new)
    grown = set(before) <= set(after)
    cells = []
    keys = {(t, d, v) for rows in (before, after) for t, row in rows.items() for d, vs in row.items() for v in vs}
    for task, dim, value in sorted(keys):
        was = before.get(task, {}).get(dim, {}).get(value, _MISSING)
        now = after.get(task, {}).get(dim, {}).get(value, _MISSING)
        if was == now:
            continue
        if task not in before and grown:
            direction = NEW_COVERAGE
        else:
            gap = _rank(now) - _rank(was)
            direction = WEAKEN if gap < 0 else STRENGTHEN if gap > 0 else SAME
        cells.append(CellChange(task, dim, value, was, now, direction))
    return cells


def _rank(level: str) -> int:
    order = list(AUTONOMY_LEVELS)
    return order.index(level) if level in order else order.index("forbidden")


def needs(profile: JsonObject, dimension: str, value: str) -> bool:
    """Whether an action on a unit of PROFILE can need the cell (policies/kcp/evaluators/matrix.rego)."""
    if dimension == "data_categories":
        return value in strings(mapping(profile.get("compliance")).get("data_categories"))
    return value in sensitivities(profile)


def sensitivities(profile: JsonObject) -> set[str]:
    """Every sensitivity the unit's visibility can resolve to ("undeclared" when none)."""
    view = profile.get("effective_visibility")
    if not isinstance(view, Mapping):
        return {"undeclared"}
    found = {
        str(c.get("sensitivity"))
        for row in mapping(view.get("cells")).values()
        for c in objects([*mapping(row).values()])
    }
    incomplete = view.get("incomplete")
    if isinstance(incomplete, Mapping) and incomplete.get("sensitivity"):
        found.add(str(incomplete["sensitivity"]))
    return found


def aimed(space: Space, cell: CellChange) -> Iterator[Sample]:
    """Actions aimed at CELL: each unit that needs it (those whose other cells for the task type
    sit lowest first), the cell's task type, each amount; then each environment and role."""
    dims = {dim.name: index for index, dim in enumerate(space.dims)}
    task = _label_index(space, "task", cell.task)
    if task is None:
        return
    units = []
    for index, choice in enumerate(space.dims[dims["unit"]].choices):
        project, slash, unit = choice.label.partition("/")
        entry = space.context.units.get((project, unit)) if slash else None
        if entry is not None and needs(entry[0], cell.dimension, cell.value):
            units.append((index, entry[0]))
    varied = [dims["amount"]] + [dims[n] for n in ("environment", "actor_role") if n in dims]
    tries = 0
    for position in varied:
        for at, _ in units:
            for value in range(len(space.dims[position].choices)):
                if position != varied[0] and value == 0:
                    continue  # the clean value, already decided with each amount
                row = [0] * len(space.dims)
                row[dims["unit"]], row[dims["task"]], row[position] = at, task, value
                if tries >= MAX_TRIES:
                    return
                tries += 1
                yield space.sample(row)


def settle(cells: list[CellChange], spaces: list[Space]) -> None:
    """Mark NO_UNIT the unreached cells that no unit of either bundle needs: no action can reach
    them in these bundles (a unit of that category or sensitivity would)."""
    for cell in cells:
        if cell.status == NOT_REACHED and not any(
            needs(profile, cell.dimension, cell.value)
            for space in spaces
            for profile, _ in space.context.units.values()
        ):
            cell.status = NO_UNIT


def _label_index(space: Space, name: str, label: str) -> int | None:
    for dim in space.dims:
        if dim.name == name:
            return next((i for i, c in enumerate(dim.choices) if c.label == label), None)
    return None


def names_cell(decision: JsonObject, cell: CellChange) -> bool:
    """Whether DECISION carries a matrix finding about CELL (its level, or its absence)."""
    return any(r.get("rule") == "kcp.matrix.cell" and _about(r, cell) for r in objects(decision.get("reasons"))) or (
        cell.task in _task_labels(decision, "task_type_not_in_matrix") and _MISSING in (cell.old, cell.new)
    )


def _task_labels(decision: JsonObject, code: str) -> set[str]:
    return {
        str(r.get("message", "")).split(" ")[2]
        for r in objects(decision.get("reasons"))
        if r.get("code") == code and len(str(r.get("message", "")).split(" ")) > 2
    }


def judge(cell: CellChange, sample: Sample, old: JsonObject, new: JsonObject) -> None:
    """Record what one decided action aimed at CELL showed: the change, or the findings that held
    the decision (the weaker side's reasons other than the cell's own)."""
    cell.tries += 1
    if cell.status == SHOWN or not (names_cell(old, cell) or names_cell(new, cell)):
        return
    keys = ("decision", "execution_allowed")
    shown = any(old.get(k) != new.get(k) for k in keys) or set(strings(old.get("required_controls"))) != set(
        strings(new.get("required_controls"))
    )
    holder = old if cell.direction == STRENGTHEN else new
    held_by = sorted({_code(r) for r in objects(holder.get("reasons")) if not _about(r, cell)})
    if shown or cell.status == NOT_REACHED or len(held_by) < len(cell.held_by):
        cell.status = SHOWN if shown else HELD
        cell.held_by = [] if shown else held_by
        cell.action, cell.now, cell.decisions = sample.action, sample.now, (dict(old), dict(new))


def _code(reason: JsonObject) -> str:
    """A reason's code, with the cell it is about for a matrix finding (``matrix_approve
    (sensitivity=restricted)``): which other cell holds the decision."""
    message = str(reason.get("message", ""))
    if reason.get("rule") == "kcp.matrix.cell" and " on " in message:
        return f"{reason.get('code')} ({message.rsplit(' on ', 1)[1]})"
    return str(reason.get("code"))


def _about(reason: JsonObject, cell: CellChange) -> bool:
    tail = f" for {cell.task} on {cell.dimension}={cell.value}"
    return str(reason.get("message", "")).endswith(tail)
