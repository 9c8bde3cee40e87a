"""``kcp-opa diff OLD NEW``: what a policy, manifest or matrix change decides differently.

Both bundles decide the same generated actions (the spaces of both, deduplicated, in the
budget order ``prove`` uses). Every change of routing state, required controls or reason codes
is counted by ``OLD -> NEW`` state with examples; a change weakens when the new state is weaker
in the contract's order, execution becomes allowed, or a control is no longer required.

An action OLD denied because its declarations did not cover it (a task type the matrix
lacks, a unit it does not know) and NEW, adding to OLD's declarations, covers is new
coverage, not a weakening: adding a task type is how a deployment grows, and it is counted and
shown apart, each NEW state with examples, so a reviewer reads what the new declaration allows.

Before the generated actions, every matrix cell OLD and NEW set differently is aimed at directly
(kcp_opa.analysis.cells): a generated action may never reach a cell in a way its change shows.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from kcp_opa.analysis.cells import NOT_REACHED, SHOWN, WEAKEN, CellChange, aimed, changed_cells, judge, settle
from kcp_opa.analysis.engines import Evaluator, brief
from kcp_opa.analysis.plan import PASSABLE, STATE_ORDER, plan_rows
from kcp_opa.analysis.space import Sample, Space, derive_space
from kcp_opa.analysis.spacedims import DimContext
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.jsonread import JsonDict, JsonObject, strings

DEFAULT_BUDGET = 1500
EXAMPLES = 3

#: The reason codes that say an action lies outside what the deployment declares, each with the
#: declaration that covers it (policies/kcp/evaluators/matrix.rego, action.rego and unit.rego; a
#: test pins them to the shipped policies). An undeclared task type's tool is listed by no type,
#: so the new type covers both codes; a tool added to a type OLD declared is judged as usual, as
#: is a matrix cell added for a sensitivity.
UNDECLARED = {"task_type_not_in_matrix": "task", "requested_action_not_in_task_type": "task", "unknown_unit": "unit"}


@dataclass
class Change:
    transition: str
    weakens: bool
    why: list[str]
    action: JsonDict
    now: str
    old: JsonDict
    new: JsonDict

    def to_dict(self) -> JsonDict:
        return asdict(self)


@dataclass
class DiffReport:
    old: str
    new: str
    budget: int
    seed: int
    old_provenance: str = ""
    new_provenance: str = ""
    actions: int = 0
    decisions: int = 0
    rejected: int = 0
    unchanged: int = 0
    transitions: Counter[str] = field(default_factory=Counter)
    weakening: Counter[str] = field(default_factory=Counter)
    #: Per transition, the actions OLD denied as undeclared that NEW covers (never weakening).
    new_coverage: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[Change]] = field(default_factory=dict)
    #: Per routing state, the generated actions each bundle decided that way (what it reached).
    old_states: Counter[str] = field(default_factory=Counter)
    new_states: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    #: Every matrix cell OLD and NEW set differently, and what the actions aimed at it showed.
    cells: list[CellChange] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(self.transitions.values())

    @property
    def unreached(self) -> list[CellChange]:
        """Changed cells no decided action reached: the diff did not check them, so it fails. (A
        lowered cell fails whether shown or held: other rules that mask it today may change.)"""
        return [c for c in self.cells if c.status == NOT_REACHED]

    @property
    def vacuous(self) -> bool:
        """Neither bundle let any action reach ALLOW or an approval state: "no change" (or no
        weakening) then says nothing about what either lets through."""
        return not any(self.old_states[s] or self.new_states[s] for s in PASSABLE)

    @property
    def weakens(self) -> bool:
        return bool(self.weakening) or any(c.direction == WEAKEN for c in self.cells)

    def to_dict(self) -> JsonDict:
        return {
            "old": self.old,
            "new": self.new,
            "old_provenance": self.old_provenance,
            "new_provenance": self.new_provenance,
            "budget": self.budget,
            "seed": self.seed,
            "actions": self.actions,
            "decisions": self.decisions,
            "rejected": self.rejected,
            "unchanged": self.unchanged,
            "changed": self.changed,
            "weakens": self.weakens,
            "vacuous": self.vacuous,
            "old_states": dict(sorted(self.old_states.items())),
            "new_states": dict(sorted(self.new_states.items())),
            "transitions": dict(sorted(self.transitions.items())),
            "weakening": dict(sorted(self.weakening.items())),
            "new_coverage": dict(sorted(self.new_coverage.items())),
            "examples": {k: [c.to_dict() for c in v] for k, v in sorted(self.examples.items())},
            "cells": [c.to_dict() for c in self.cells],
            "unreached": len(self.unreached),
            "seconds": round(self.seconds, 3),
        }


def classify(old: JsonObject, new: JsonObject) -> tuple[list[str], list[str]]:
    """(what changed, why it weakens) between two decisions of the same action."""
    changed, weaker = [], []
    before, after = str(old.get("decision")), str(new.get("decision"))
    if before != after:
        changed.append("state")
        if _rank(after) < _rank(before):
            weaker.append(f"state {before} -> {after} is weaker")
    if old.get("execution_allowed") is not True and new.get("execution_allowed") is True:
        weaker.append("execution is now allowed")
    had, has = (set(strings(decision.get("required_controls"))) for decision in (old, new))
    dropped = sorted(had - has)
    if had != has:
        changed.append("controls")
    if dropped and after != "DENY":  # a DENY is terminal: the controls listed beside it are moot
        weaker.append(f"no longer requires {', '.join(dropped)}")
    if set(strings(old.get("reason_codes"))) != set(strings(new.get("reason_codes"))):
        changed.append("reasons")
    if ("engine_error" in old) != ("engine_error" in new):
        changed.append("engine_error")
    return changed, weaker


def diff(old: LoadedBundle, new: LoadedBundle, *, budget: int = DEFAULT_BUDGET, seed: int = 0) -> DiffReport:
    """Decide the actions aimed at each changed matrix cell, then the generated actions, on both
    bundles (regopy; ``prove`` cross-checks engines)."""
    started = time.perf_counter()
    report = DiffReport(old.source, new.source, budget, seed)
    engines = (Evaluator(old, opa=False), Evaluator(new, opa=False))
    seen: set[bytes] = set()
    declared = (Declared.of(old), Declared.of(new))
    spaces = [derive_space(new, requires_from=[old]), derive_space(old, requires_from=[new])]
    report.cells = changed_cells(old, new)
    _aim(report, spaces, engines, declared, seen)
    plans = []
    for space in spaces:
        clean: list[tuple[tuple[int, ...], str]] = []
        exhaustive = space.size * 2 <= budget // 2
        plans.append((space, clean, plan_rows(space, seed, exhaustive, clean)))
    exhausted = [False, False]
    while sum(e.decisions for e in engines) < budget and not all(exhausted):
        for index, (space, clean, rows) in enumerate(plans):
            step = next(rows, None)
            if step is None:
                exhausted[index] = True
                continue
            phase, row = step
            sample = space.sample(row)
            key = canonical_json([sample.action, sample.now])
            if key in seen:
                continue
            seen.add(key)
            decided = _decide(report, engines, sample, declared)
            if phase == "clean" and decided is not None:
                states = {str(decided[0].get("decision")), str(decided[1].get("decision"))}
                clean.append((row, "DENY" if states == {"DENY"} else "other"))
    report.decisions = sum(e.decisions for e in engines)
    report.seconds = time.perf_counter() - started
    return report


def _aim(
    report: DiffReport,
    spaces: list[Space],
    engines: tuple[Evaluator, Evaluator],
    declared: tuple[Declared, Declared],
    seen: set[bytes],
) -> None:
    """Decide actions aimed at each changed cell, one per cell in turn, until each shows its
    change or runs out of aims, or the budget is spent (NEW's space; OLD's for a cell NEW lacks)."""
    aims = {id(c): aimed(spaces[1] if c.new == "(none)" else spaces[0], c) for c in report.cells}
    done: dict[bytes, tuple[JsonDict, JsonDict] | None] = {}
    while aims and sum(e.decisions for e in engines) < report.budget:
        for cell in report.cells:
            if id(cell) not in aims or sum(e.decisions for e in engines) >= report.budget:
                continue
            sample = next(aims[id(cell)], None) if cell.status != SHOWN else None
            if sample is None:
                del aims[id(cell)]
                continue
            key = canonical_json([sample.action, sample.now])
            if key not in done:  # two cells of one row share their aims: decided once
                seen.add(key)
                done[key] = _decide(report, engines, sample, declared)
            decided = done[key]
            if decided is not None:
                judge(cell, sample, *decided)
    settle(report.cells, spaces)


def _decide(
    report: DiffReport,
    engines: tuple[Evaluator, Evaluator],
    sample: Sample,
    declared: tuple[Declared, Declared],
) -> tuple[JsonDict, JsonDict] | None:
    """Both bundles' decisions of one action, counted and compared (None: refused)."""
    first, second = (e.decide(sample.action, sample.now) for e in engines)
    report.actions += 1
    if first.decision is None or second.decision is None:
        report.rejected += 1
        return None
    report.old_states[str(first.decision.get("decision", "engine_error"))] += 1
    report.new_states[str(second.decision.get("decision", "engine_error"))] += 1
    _compare(report, sample.action, sample.now, (first.decision, second.decision), declared)
    return first.decision, second.decision


def _compare(
    report: DiffReport,
    action: JsonDict,
    now: str,
    decisions: tuple[JsonDict, JsonDict],
    declared: tuple[Declared, Declared],
) -> None:
    old, new = decisions
    changed, weaker = classify(old, new)
    if not changed and not weaker:
        report.unchanged += 1
        return
    transition = f"{old.get('decision', 'engine_error')} -> {new.get('decision', 'engine_error')}"
    if not ({"state"} & set(changed)):
        transition += f" ({', '.join(changed) or 'execution'})"
    if newly_covered(action, old, new, declared):
        transition += " (new coverage)"
        weaker = []
        report.new_coverage[transition] += 1
    report.transitions[transition] += 1
    if weaker:
        report.weakening[transition] += 1
    examples = report.examples.setdefault(transition, [])
    if len(examples) < EXAMPLES or (weaker and not any(c.weakens for c in examples)):
        examples.append(Change(transition, bool(weaker), weaker, action, now, brief(old), brief(new)))


@dataclass(frozen=True)
class Declared:
    """What one bundle's declarations cover: the matrix's task types and the units it knows."""

    tasks: frozenset[str]
    units: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, bundle: LoadedBundle) -> Declared:
        context = DimContext.from_bundle(bundle, set(), [])
        return cls(frozenset(context.matrix_tasks), frozenset(context.units))

    def names(self, action: JsonObject) -> set[str]:
        """Which of this action's task type and unit these declarations cover."""
        knowledge = action.get("knowledge")
        unit = (str(knowledge.get("project")), str(knowledge.get("unit"))) if isinstance(knowledge, Mapping) else None
        covered = {"task"} if action.get("action_type") in self.tasks else set()
        return covered | {"unit"} if unit in self.units else covered


def newly_covered(action: JsonObject, old: JsonObject, new: JsonObject, declared: tuple[Declared, Declared]) -> bool:
    """OLD denied the action as undeclared, and NEW covers it by a pure addition.

    Each undeclared code OLD gave must be answered by its own declaration appearing in NEW (a
    task type for ``task_type_not_in_matrix``, a unit for ``unknown_unit``); NEW must keep every
    task type and unit OLD declared (a rename is judged as usual, never as coverage); NEW must
    no longer give those codes; and every other reason OLD gave still stands in NEW.
    """
    before, after = set(strings(old.get("reason_codes"))), set(strings(new.get("reason_codes")))
    undeclared = before & set(UNDECLARED)
    grown = declared[1].names(action) - declared[0].names(action)
    return (
        old.get("decision") == "DENY"
        and bool(undeclared)
        and all(UNDECLARED[code] in grown for code in undeclared)
        and declared[0].tasks <= declared[1].tasks
        and declared[0].units <= declared[1].units
        and not (after & undeclared)
        and before - set(UNDECLARED) <= after
    )


def _rank(state: str) -> int:
    return STATE_ORDER.index(state) if state in STATE_ORDER else len(STATE_ORDER)
