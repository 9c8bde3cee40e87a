"""`make fuzz`: the differential fuzzer over fixed seeds -> reports/fuzz-report.json and .md.

    .venv/bin/python tests/fuzz/run.py [--decisions 20000] [--first-seed 0] [--report reports/fuzz-report]

Seeds 0, 1, 2, ... each run a fixed number of examples per reference deployment until at least
``--decisions`` actions were decided on both engines (refused actions do not count). Each seed
also mutates ``--declarations`` copies of each deployment's manifest, matrix and trust registry
(tests/fuzz/declarations.py): a copy validate/compile refuses counts as refused, an accepted one
is decided on both engines with actions drawn from its mutated values. Exit 1 on any divergence
or crash, or when a routing state was never reached.

Actions are drawn straight from a seeded generator (tests/fuzz/draws.py), not through
hypothesis's engine: the same values for the same seed, at about three quarters of the cost.

``--workers`` processes (default: one per core) each run whole (seed, deployment) units; the
results are merged in seed and deployment order and the run stops after the same seed a single
process would stop after, so the report (but for its timings) is the same for the same seeds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from declarations import DeclarationTally, case_sweep, mutated_deployment
from differential import REPO, STATES, Deployment, Tally, cases_by_deployment, compare, load_deployment, mutated_actions

PER_SEED = 1000
#: Mutated declaration worlds per deployment and seed, and the actions decided on each accepted one.
DECLARATIONS_PER_SEED = 8
PER_DECLARATION = 40


def run_seed(deployment: Deployment, number: int, tally: Tally, examples: int) -> None:
    """EXAMPLES mutated actions drawn from a generator seeded by (seed NUMBER, the deployment)."""
    rng = random.Random(f"{number}/{deployment.name}")  # str seeds hash stably (SHA-512), unlike hash()
    actions = mutated_actions(deployment)
    for _ in range(examples):
        compare(deployment, *actions.sample(rng), tally)


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Differential fuzzer report (regopy vs OPA, full decision documents)",
        "",
        f"- decisions compared: {report['decisions']:,} ({report['decisions_per_s']} decisions/s on both engines)",
        f"- divergences: {report['divergences']}; crashes: {report['crashes']}",
        f"- actions refused by the input contract: {report['refused']:,} {report['refusals']}",
        f"- declarations mutated: {report['declarations']['mutated']:,}; refused by validate/compile: "
        f"{report['declarations']['refused']:,} {report['declarations']['refusals']}; accepted and decided: "
        f"{report['declarations']['accepted']:,} ({report['declaration_decisions']:,} decisions)",
        f"- decided with the gate's context drawn beside the action: {report['drawn']}",
        f"- seeds: {report['seeds']}; wall time {report['elapsed_s']:.0f} s",
        "",
        "| routing state | decisions |",
        "| --- | ---: |",
        *[f"| {state} | {report['states'].get(state, 0):,} |" for state in STATES],
        "",
        "| reason code | decisions |",
        "| --- | ---: |",
        *[f"| {code} | {count:,} |" for code, count in report["reason_codes"].items()],
        "",
    ]
    for name, part in report["deployments"].items():
        lines.append(f"- {name}: {part['decisions']:,} decided, {part['refused']:,} refused, "
                     f"{part['divergences']} divergences, {len(part['states'])} states")  # fmt: skip
    return "\n".join(lines) + "\n"


#: One worker process's state (set by ``_start``): the options, and the deployments it has started engines for.
_WORKER: dict[str, Any] = {}


def _start(scratch: Path, per_seed: int, declarations: int) -> None:
    _WORKER.update(scratch=scratch, per_seed=per_seed, declarations=declarations, started={},
                   cases=cases_by_deployment())  # fmt: skip


def compile_one(name: str) -> Deployment:
    """One reference deployment compiled in a worker (the parent starts no engine: it forks)."""
    return load_deployment(name, _WORKER["scratch"])


def run_unit(number: int, compiled: Deployment) -> tuple[int, str, Tally, DeclarationTally, int]:
    """Seed NUMBER on one deployment: its mutated actions, then its mutated declaration worlds."""
    name = compiled.name
    deployment: Deployment = _WORKER["started"].setdefault(name, compiled)
    if deployment.regopy is None:
        deployment.engines()
    tally, declared, declaration_decisions = Tally(), DeclarationTally(), 0
    run_seed(deployment, number, tally, _WORKER["per_seed"])
    for index in range(_WORKER["declarations"]):
        cases = _WORKER["cases"][name]
        mutated = mutated_deployment(name, cases, number, index, _WORKER["scratch"] / "declarations", declared)
        if mutated is not None:
            before = tally.decisions
            run_seed(mutated, number, tally, PER_DECLARATION)
            for drawn in case_sweep(mutated):
                compare(mutated, *drawn, tally)
            declaration_decisions += tally.decisions - before
            mutated.opa.close()
    return number, name, tally, declared, declaration_decisions


def merge(into: Tally, part: Tally) -> None:
    into.decisions += part.decisions
    into.refused += part.refused
    into.crashes += part.crashes
    into.divergences += part.divergences
    into.states.update(part.states)
    into.reason_codes.update(part.reason_codes)
    into.refusals.update(part.refusals)
    into.drawn.update(part.drawn)
    into.seconds += part.seconds


def merge_declarations(into: DeclarationTally, part: DeclarationTally) -> None:
    into.mutated += part.mutated
    into.refused += part.refused
    into.crashes += part.crashes
    into.refusals.update(part.refusals)
    into.worlds.update(part.worlds)


def in_order(pool: Any, units: Iterator[tuple[int, Deployment]], window: int) -> Iterator[Any]:
    """``run_unit`` over ``units`` on ``pool``, ``window`` in flight, results in the units' order."""
    pending: deque[Any] = deque()
    while True:
        while len(pending) < window:
            pending.append(pool.apply_async(run_unit, next(units)))
        yield pending.popleft().get()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--report", type=Path, default=REPO / "reports" / "fuzz-report")
    parser.add_argument("--declarations", type=int, default=DECLARATIONS_PER_SEED,
                        help="mutated declaration worlds per deployment and seed (0: actions only)")  # fmt: skip
    parser.add_argument("--per-seed", type=int, default=PER_SEED, help="mutated actions per deployment and seed")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes running (seed, deployment) units (default: one per core)")  # fmt: skip
    args = parser.parse_args()
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="kcp-opa-fuzz-"))
    names = sorted(cases_by_deployment())
    declared = DeclarationTally()
    declaration_decisions = 0
    tallies = {name: Tally() for name in names}
    seeds = []
    options = (scratch, args.per_seed, args.declarations)
    with multiprocessing.get_context("fork").Pool(args.workers, _start, options) as pool:
        world = pool.map(compile_one, names)
        units = ((number, deployment) for number in itertools.count(args.first_seed) for deployment in world)
        results = in_order(pool, units, args.workers + 1)
        while sum(t.decisions for t in tallies.values()) < args.decisions:
            for name in names:  # one whole seed, merged in the order a single process runs it
                number, done_name, tally, part, decided = next(results)
                assert done_name == name
                merge(tallies[name], tally)
                merge_declarations(declared, part)
                declaration_decisions += decided
            seeds.append(number)
            done = sum(t.decisions for t in tallies.values())
            print(f"seed {number}: {done:,} decisions, "
                  f"{sum(len(t.divergences) for t in tallies.values())} divergences", file=sys.stderr)  # fmt: skip
        pool.terminate()  # the units already started past the last seed are not part of the run
    total = Tally()
    for tally in tallies.values():
        merge(total, tally)
    report = {**total.to_dict(), "seeds": seeds, "elapsed_s": time.perf_counter() - started,
              "deployments": {name: t.to_dict() for name, t in tallies.items()},
              "declarations": declared.to_dict(), "declaration_decisions": declaration_decisions}  # fmt: skip
    for part in report["deployments"].values():
        part.pop("divergence_examples"), part.pop("crash_examples")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.with_suffix(".json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    args.report.with_suffix(".md").write_text(markdown(report))
    with args.report.with_name(args.report.name + "-divergences.jsonl").open("w", encoding="utf-8") as out:
        for item in total.divergences + total.crashes:  # every one, to pin as a decision case
            out.write(json.dumps(item, ensure_ascii=False, sort_keys=True) + "\n")
    print(markdown(report))
    failed = report["divergences"] or report["crashes"] or report["states_missing"] or declared.crashes
    if report["states_missing"]:
        print(f"routing states never reached: {report['states_missing']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
