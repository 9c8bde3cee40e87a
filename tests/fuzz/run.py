"""`make fuzz`: the differential fuzzer over fixed seeds -> reports/fuzz-report.json and .md.

    .venv/bin/python tests/fuzz/run.py [--decisions 20000] [--first-seed 0] [--report reports/fuzz-report]

Seeds 0, 1, 2, ... each run a fixed number of examples per reference deployment until at least
``--decisions`` actions were decided on both engines (refused actions do not count). Each seed
also mutates ``--declarations`` copies of each deployment's manifest, matrix and trust registry
(tests/fuzz/declarations.py): a copy validate/compile refuses counts as refused, an accepted one
is decided on both engines with actions drawn from its mutated values. Exit 1 on any divergence
or crash, or when a routing state was never reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from declarations import DeclarationTally, case_sweep, mutated_deployment
from differential import REPO, STATES, Deployment, Tally, cases_by_deployment, compare, load_world, mutated_actions
from hypothesis import HealthCheck, Phase, given, seed, settings

PER_SEED = 1000
#: Mutated declaration worlds per deployment and seed, and the actions decided on each accepted one.
DECLARATIONS_PER_SEED = 8
PER_DECLARATION = 40


def run_seed(deployment: Deployment, number: int, tally: Tally, examples: int) -> None:
    @seed(number)
    @settings(max_examples=examples, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(drawn=mutated_actions(deployment))
    def one(drawn: tuple[str, dict[str, Any], str, list[str]]) -> None:
        compare(deployment, *drawn, tally)

    one()


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--report", type=Path, default=REPO / "reports" / "fuzz-report")
    parser.add_argument("--declarations", type=int, default=DECLARATIONS_PER_SEED,
                        help="mutated declaration worlds per deployment and seed (0: actions only)")  # fmt: skip
    parser.add_argument("--per-seed", type=int, default=PER_SEED, help="mutated actions per deployment and seed")
    args = parser.parse_args()
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="kcp-opa-fuzz-"))
    world = load_world(scratch)
    cases = cases_by_deployment()
    declared = DeclarationTally()
    declaration_decisions = 0
    for deployment in world.values():
        deployment.engines()
    tallies = {name: Tally() for name in world}
    number = args.first_seed
    seeds = []
    while sum(t.decisions for t in tallies.values()) < args.decisions:
        for name, deployment in world.items():
            run_seed(deployment, number, tallies[name], args.per_seed)
            for index in range(args.declarations):
                mutated = mutated_deployment(name, cases[name], number, index, scratch / "declarations", declared)
                if mutated is not None:
                    before = tallies[name].decisions
                    run_seed(mutated, number, tallies[name], PER_DECLARATION)
                    for drawn in case_sweep(mutated):
                        compare(mutated, *drawn, tallies[name])
                    declaration_decisions += tallies[name].decisions - before
                    mutated.opa.close()
        seeds.append(number)
        number += 1
        done = sum(t.decisions for t in tallies.values())
        print(f"seed {number - 1}: {done:,} decisions, "
              f"{sum(len(t.divergences) for t in tallies.values())} divergences", file=sys.stderr)  # fmt: skip
    total = Tally()
    for tally in tallies.values():
        total.decisions += tally.decisions
        total.refused += tally.refused
        total.crashes += tally.crashes
        total.divergences += tally.divergences
        total.states.update(tally.states)
        total.reason_codes.update(tally.reason_codes)
        total.refusals.update(tally.refusals)
        total.drawn.update(tally.drawn)
        total.seconds += tally.seconds
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
