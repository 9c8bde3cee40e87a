"""``kcp-opa prove``: every generated action, on both engines, against the invariants.

The order spends the budget where holes hide: each unit with each task type in the clean
action; then what each restriction forbids on every unit's weakest action that is not a DENY;
then one fact at a time changed around each of those that is not a DENY (where an
allow can appear); then an all-pairs covering array; then seeded samples. Where the whole
product fits the budget it is enumerated and the report says "exhaustive".
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kcp_opa.analysis.covering import all_pairs
from kcp_opa.analysis.engines import BRIEF, ENGINES_AGREE, Evaluator, Outcome, UserInvariants, brief
from kcp_opa.analysis.neighbours import EVIDENCE, MONOTONE, RESTRICTION, shrink, stronger
from kcp_opa.analysis.pin import counterexample_case
from kcp_opa.analysis.plan import PASSABLE, plan_rows
from kcp_opa.analysis.probes import next_restriction, supplied
from kcp_opa.analysis.space import Sample, Space, derive_space, present
from kcp_opa.analysis.spacedims import PROBED
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.jsonread import JsonDict, items

DEFAULT_BUDGET = 1500
SHRINK_ATTEMPTS = 120
#: A violation shows what its decision still lacks, too.
_SHOWN = (*BRIEF[:4], "missing_controls", "engine_error")
EXECUTABLE = "contract.executable_only_with_every_control"


@dataclass
class Violation:
    invariant: str
    decision: JsonDict
    labels: dict[str, str]
    action: JsonDict
    now: str
    change: str = ""
    before: JsonDict | None = None
    shrink_tries: int = 0

    def to_dict(self) -> JsonDict:
        return {
            "invariant": self.invariant,
            "decision": brief(self.decision, _SHOWN),
            "before": brief(self.before, _SHOWN) if self.before else None,
            "change": self.change or None,
            "labels": self.labels,
            "counterexample": self.action,
            "now": self.now,
            "shrink_tries": self.shrink_tries,
        }


@dataclass
class ProofReport:
    deployment: str
    bundle: str
    engines: tuple[str, ...]
    budget: int
    seed: int
    space_size: int
    exhaustive: bool
    provenance: str = ""
    actions: int = 0
    decisions: int = 0
    rejected: int = 0
    pairs_complete: bool = False
    phases: Counter[str] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    invariants: list[str] = field(default_factory=list)
    #: {invariant: checks whose premise held} (the Rego's premises; OPA's cross-check in Python).
    reach: Counter[str] = field(default_factory=Counter)
    #: {invariant: why it has nothing to test in this bundle, or was not run}.
    inapplicable: dict[str, str] = field(default_factory=dict)
    #: Deployment invariants without a premise_<name> rule: their reach is not counted.
    uncounted: list[str] = field(default_factory=list)
    #: --strict: an invariant whose reach is not counted makes the run VACUOUS too.
    strict: bool = False
    #: {unit label: actions on it that reached a state in PASSABLE}.
    units_passable: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    #: (unit, task, path) already probed in the search (each once; a counterexample's always).
    probed: set[tuple[str | None, str | None, str]] = field(default_factory=set)

    @property
    def proved(self) -> bool:
        """Nothing broke and every invariant was tested: green means something was shown."""
        return self.verdict == "PROVED"

    @property
    def verdict(self) -> str:
        if self.violations:
            return "VIOLATED"
        return "VACUOUS" if self.vacuous() else "PROVED"

    def vacuous(self) -> list[str]:
        """Why nothing broke proves little: no action that could pass (anywhere, or on a unit),
        an invariant never tested."""
        reasons = []
        if not any(self.states[state] for state in PASSABLE):
            reasons.append("no generated action reached ALLOW or an approval state")
        reasons += [
            f"unit {unit}: no generated action on it reached ALLOW or an approval state"
            for unit, passed in sorted(self.units_passable.items())
            if not passed
        ]
        for name in self.invariants:
            if name in self.inapplicable or (name in self.uncounted and not self.strict):
                continue
            if name in self.uncounted:
                reasons.append(f"{name}: no premise_ rule, so what it tested is not counted (--strict)")
            elif not self.reach[name]:
                reasons.append(f"{name}: no generated action met its premise")
        return reasons

    def meaning(self) -> str:
        """What "proved" means for this run."""
        if self.exhaustive:
            return f"exhaustive over the abstraction: all {self.space_size} actions of the generated space"
        pairs = "every pair of values of two dimensions covered" if self.pairs_complete else "pairs NOT all covered"
        return (
            f"sampled: {self.actions} actions ({self.decisions} decisions) of a {self.space_size}-action space; "
            f"{pairs}; seed {self.seed}"
        )

    def to_dict(self) -> JsonDict:
        return {
            "deployment": self.deployment,
            "bundle": self.bundle,
            "provenance": self.provenance,
            "verdict": self.verdict,
            "proved": self.proved,
            "vacuous": self.vacuous(),
            "meaning": self.meaning(),
            "exhaustive": self.exhaustive,
            "engines": list(self.engines),
            "budget": self.budget,
            "seed": self.seed,
            "space_size": self.space_size,
            "actions": self.actions,
            "decisions": self.decisions,
            "rejected": self.rejected,
            "pairs_complete": self.pairs_complete,
            "phases": dict(self.phases),
            "states": dict(sorted(self.states.items())),
            "invariants": self.invariants,
            "reach": {name: self.reach[name] for name in self.invariants},
            "inapplicable": dict(sorted(self.inapplicable.items())),
            "uncounted": self.uncounted,
            "units_passable": {unit: self.units_passable[unit] for unit in sorted(self.units_passable)},
            "violation_counts": dict(sorted(self.counts.items())),
            "violations": [v.to_dict() for v in self.violations],
            "seconds": round(self.seconds, 3),
        }


def builtin_invariants(users: Sequence[UserInvariants]) -> list[str]:
    names = [
        "contract.no_engine_error",
        "contract.engines_agree",
        "contract.executable_only_with_every_control",
        "contract.unknown_unit_never_allows",
        "contract.unknown_task_type_never_allows",
        "contract.absent_needed_fact_never_allows",
        "contract.deny_is_terminal",
        *(f"contract.monotone_{change}" for change in MONOTONE),
        "contract.monotone_stronger_restriction",
        "contract.unit_outside_its_window_never_allows",
        "contract.action_outside_its_age_window_never_allows",
    ]
    return names + [f"{u.package}.{rule}" for u in users for rule in u.rules]


def prove(
    bundle: LoadedBundle,
    *,
    users: Sequence[UserInvariants] = (),
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    requires_from: Sequence[LoadedBundle] = (),
    opa: bool = True,
    evaluator: Evaluator | None = None,
    strict: bool = False,
) -> ProofReport:
    started = time.perf_counter()
    space = derive_space(bundle, requires_from=requires_from)
    ev = evaluator or Evaluator(bundle, users, opa=opa)
    # Each action costs about two decisions (itself and, when it is not a DENY, its neighbours).
    exhaustive = space.size * (1 + len(MONOTONE)) <= budget
    report = ProofReport(space.deployment, bundle.source, ev.engines, budget, seed, space.size, exhaustive)
    report.invariants = builtin_invariants(users)
    report.strict = strict
    report.uncounted = [f"{u.package}.{rule}" for u in users for rule in u.rules if rule not in u.premised]
    report.units_passable = Counter({label: 0 for label in _unit_labels(space)})
    clean: list[tuple[tuple[int, ...], str]] = []
    seen: set[bytes] = set()
    for phase, row in plan_rows(space, seed, exhaustive, clean):
        if ev.decisions >= budget:
            break
        sample = space.sample(row)
        key = canonical_json([sample.action, sample.now])
        if key in seen and phase != "clean":  # a deviation that changes nothing for this unit
            continue
        seen.add(key)
        outcome = _examine(ev, space, sample, report, seed)
        report.phases[phase] += 1
        if phase == "clean" and outcome is not None and outcome.decision is not None:
            clean.append((row, str(outcome.decision.get("decision"))))
        if phase == "pairs":
            report.pairs_complete = True  # reset below if the plan stopped before the last pair row
    report.pairs_complete = report.pairs_complete and report.phases["pairs"] == _pair_rows(space, seed)
    for violation in report.violations:
        _shrink(ev, space, violation)
    report.decisions = ev.decisions
    report.inapplicable = dict(ev.inapplicable)
    if ev.reference is None:
        report.inapplicable[ENGINES_AGREE] = "OPA did not run (--engines regopy)"
    report.seconds = time.perf_counter() - started
    return report


def _unit_labels(space: Space) -> list[str]:
    """The declared units' labels (the unit dimension's choices, less unknown and none)."""
    return [choice.label for choice in space.dims[0].choices if "/" in choice.label]


def _pair_rows(space: Space, seed: int) -> int:
    return len(all_pairs([len(d.choices) for d in space.dims], seed))


def _examine(ev: Evaluator, space: Space, sample: Sample, report: ProofReport, seed: int) -> Outcome | None:
    outcome = ev.decide(sample.action, sample.now)
    report.actions += 1
    if outcome.decision is None:
        report.rejected += 1
        return None
    state = str(outcome.decision.get("decision", "engine_error"))
    report.states[state] += 1
    if state in PASSABLE and sample.labels.get("unit") in report.units_passable:
        report.units_passable[sample.labels["unit"]] += 1
    fresh = {
        path
        for path in PROBED.values()
        if (sample.labels.get("unit"), sample.labels.get("task"), path) not in report.probed
    }
    probes = supplied(ev, space, sample, outcome, fresh)
    facts = {**sample.facts, "supplied": probes}
    report.probed |= {(sample.labels.get("unit"), sample.labels.get("task"), p) for p in probes}
    _record(report, ev.check(outcome, facts), outcome, sample)
    if state == "DENY":
        if report.actions % 4 == seed % 4:  # DENY is terminal: checked on a quarter of the DENYs
            controls = [str(c) for c in items(outcome.decision.get("required_controls"))]
            after = ev.decide(sample.action, sample.now, controls)
            _record(report, ev.check(after, sample.facts, outcome, EVIDENCE), after, sample, EVIDENCE, outcome)
        return outcome
    if state in PASSABLE[1:] and (report.actions % 4 == seed % 4 or not report.reach[EXECUTABLE]):
        # An approval state with every required control recorded: where execution becomes
        # allowed, contract.executable_only_with_every_control is tested (a quarter of them,
        # and each until one was; a deployment that approves everything allows nothing bare).
        controls = [str(c) for c in items(outcome.decision.get("required_controls"))]
        after = ev.decide(sample.action, sample.now, controls)
        _record(report, ev.check(after, sample.facts, outcome, EVIDENCE), after, sample, EVIDENCE, outcome)
    for change in MONOTONE:
        action = stronger(sample.action, change)
        if action is None:
            continue
        after = ev.decide(action, sample.now)
        facts = space.describe(action, sample.now).facts
        _record(report, ev.check(after, facts, outcome, change), after, sample, change, outcome)
    restriction = next_restriction(space, sample, report.actions)
    if restriction is not None:
        after = ev.decide_restricted(restriction, sample.action, sample.now)
        change = RESTRICTION + restriction
        _record(report, ev.check(after, sample.facts, outcome, change), after, sample, change, outcome)
    return outcome


def _record(
    report: ProofReport,
    found: list[str],
    outcome: Outcome,
    sample: Sample,
    change: str = "",
    before: Outcome | None = None,
) -> None:
    report.reach.update(outcome.premises)
    for name in found:
        report.counts[name] += 1
        if any(v.invariant == name for v in report.violations) or outcome.decision is None:
            continue
        report.violations.append(
            Violation(
                name,
                outcome.decision,
                dict(sample.labels),
                sample.action,
                sample.now,
                change,
                before.decision if before is not None else None,
            )
        )


def _shrink(ev: Evaluator, space: Space, violation: Violation) -> None:
    """Replace the counterexample with the smallest action that still breaks the invariant."""

    allowed: set[str] = set()

    def breaks(found: list[str]) -> bool:
        # Still this invariant, and nothing the original did not break: the cause stays isolated.
        return violation.invariant in found and (not allowed or set(found) <= allowed)

    original = violation.action
    target = violation.invariant.partition("[")[2].rstrip("]")

    def still_fails(action: JsonDict) -> bool:
        outcome = ev.decide(action, violation.now)
        if outcome.decision is None:
            return False
        sample = space.describe(action, violation.now)
        facts = sample.facts
        if not violation.change:
            # Probe the fact this invariant names and each probed fact the shrinking dropped (a
            # new absence that allows is a new violation: the counterexample keeps that fact).
            dropped = {p for p in PROBED.values() if present(original, p) and not present(action, p)}
            facts = {**facts, "supplied": supplied(ev, space, sample, outcome, dropped | {target})}
            return breaks(ev.check(outcome, facts))
        if violation.change == EVIDENCE:
            controls = [str(c) for c in items(outcome.decision.get("required_controls"))]
            after = ev.decide(action, violation.now, controls)
        elif violation.change.startswith(RESTRICTION):
            after = ev.decide_restricted(violation.change.removeprefix(RESTRICTION), action, violation.now)
        else:
            stronger_action = stronger(action, violation.change)
            if stronger_action is None:
                return False
            after = ev.decide(stronger_action, violation.now)
            facts = space.describe(stronger_action, violation.now).facts
        return breaks(ev.check(after, facts, outcome, violation.change))

    still_fails(violation.action)
    allowed = set(_last_found(ev))
    smallest, tries = shrink(violation.action, still_fails, SHRINK_ATTEMPTS)
    violation.action, violation.shrink_tries = smallest, tries
    final = ev.decide(smallest, violation.now)
    if final.decision is not None and not violation.change:
        violation.decision = final.decision


def _last_found(ev: Evaluator) -> list[str]:
    return list(ev.last_violations)


def cases_document(report: ProofReport, deployment: str | None = None) -> JsonDict:
    """Every counterexample as a decision-case file (kcp_opa/schemas/decision-cases.schema.json)."""
    cases = [
        counterexample_case(v.invariant, v.action, v.decision, v.now, v.change, v.before) for v in report.violations
    ]
    now = report.violations[0].now if report.violations else ""
    return {"deployment": deployment or report.deployment, "now": now, "cases": cases}
