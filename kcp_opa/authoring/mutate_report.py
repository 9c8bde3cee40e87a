"""Reports for ``kcp-opa mutate``: the score per file, every survivor with what reaches its line.

"Reached by" comes from OPA coverage of the unmutated policies: each test package's tests
that cover the line (test by test, for the packages that reach a survivor), and the decision
cases of each deployment whose run covers it. A survivor reached by nothing needs a test; one
reached by tests needs a sharper expectation.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypedDict

from rich.console import Console

from kcp_opa.authoring.mutate import MutantResult, Status, Suite
from kcp_opa.authoring.mutate_slice import SliceView
from kcp_opa.authoring.regotest import CoverageMerger, opa_engine
from kcp_opa.core.jsonread import JsonDict, mapping

SCORED = (Status.KILLED, Status.TIMEOUT, Status.SURVIVED)


class Tally(TypedDict):
    """Mutants per status, how many, and the score: (killed + timeout) / (those + survived)."""

    killed: int
    survived: int
    timeout: int
    invalid: int
    excused: int
    mutants: int
    score: float


class Summary(Tally):
    files: dict[str, Tally]


def _covered(report: object) -> dict[str, set[int]]:
    """The lines OPA's coverage REPORT covers, per file."""
    merged = CoverageMerger()
    merged.add(mapping(report))
    return merged.covered


def _reaches(covered: Mapping[str, set[int]], result: MutantResult) -> bool:
    lines = covered.get(result.mutant.file, set())
    return any(n in lines for n in range(result.mutant.start, result.mutant.end + 1))


def attach_reached_by(suite: Suite, survivors: Sequence[MutantResult]) -> None:
    """Fill ``reached_by`` of each survivor: the tests and case sets that execute its line."""
    if not survivors:
        return
    engine = opa_engine(suite.modules)
    try:
        for package in sorted({t.package for t in suite.tests}):
            engine.eval_query(f"x := data.{package}", {}, coverage=True)
            if not any(_reaches(_covered(engine.last_coverage), s) for s in survivors):
                continue
            for test in (t for t in suite.tests if t.package == package):
                engine.eval_query(f"x := {test.name}", {}, coverage=True)
                covered = _covered(engine.last_coverage)
                for survivor in survivors:
                    if _reaches(covered, survivor):
                        survivor.reached_by.append(test.name)
    finally:
        engine.close()
    policies = {k: v for k, v in suite.modules.items() if not k.endswith("_test.rego")}
    for name, items in sorted(suite.cases.items()):
        engine = opa_engine(policies, suite.deployments[name])
        try:
            engine.eval_query(
                "x := [d | some i in input.cases; d := data.kcp.gate.decision with input as i]",
                {"cases": [dict(p.document) for _, p in items]},
                coverage=True,
            )
            covered = _covered(engine.last_coverage)
        finally:
            engine.close()
        for survivor in survivors:
            if _reaches(covered, survivor):
                survivor.reached_by.append(f"cases of {name} ({len(items)})")


def summary(results: Sequence[MutantResult]) -> Summary:
    """Counts and score per file and overall."""

    def block(items: Sequence[MutantResult]) -> Tally:
        n = Counter(r.status for r in items)
        scored = sum(n[s] for s in SCORED)
        detected = n[Status.KILLED] + n[Status.TIMEOUT]
        return {
            "killed": n[Status.KILLED],
            "survived": n[Status.SURVIVED],
            "timeout": n[Status.TIMEOUT],
            "invalid": n[Status.INVALID],
            "excused": n[Status.EXCUSED],
            "mutants": len(items),
            "score": 100.0 * detected / scored if scored else 100.0,
        }

    files: dict[str, list[MutantResult]] = {}
    for result in results:
        files.setdefault(result.mutant.file, []).append(result)
    return {"files": {name: block(items) for name, items in sorted(files.items())}, **block(results)}


def to_dict(results: Sequence[MutantResult], seconds: float, threshold: float | None) -> JsonDict:
    return {
        "summary": summary(results),
        "seconds": round(seconds, 1),
        "threshold": threshold,
        "survivors": [_row(r) for r in results if r.status is Status.SURVIVED],
        "excused": [_row(r) for r in results if r.status is Status.EXCUSED],
        "mutants": [_row(r) for r in results],
    }


def _row(result: MutantResult) -> dict[str, str | list[str]]:
    mutant = result.mutant
    return {
        "location": f"{mutant.file}:{mutant.start}",
        "operator": mutant.operator,
        "original": mutant.original,
        "mutated": mutant.replacement,
        "status": result.status.value,
        "detail": result.detail,
        "reached_by": result.reached_by,
    }


def print_report(out: Console, results: Sequence[MutantResult], seconds: float) -> None:
    info = summary(results)
    out.print("[bold]Mutation score per file[/]")
    for name, item in info["files"].items():
        out.print(
            f"  {name:<36} {item['score']:5.1f}%  killed {item['killed']:>3}  survived {item['survived']:>2}"
            f"  excused {item['excused']:>2}  invalid {item['invalid']:>2}  timeout {item['timeout']}",
            highlight=False,
        )
    survivors = [r for r in results if r.status is Status.SURVIVED]
    if survivors:
        out.print(f"[bold]{len(survivors)} survivors[/] (no test noticed the change)")
    for result in survivors:
        mutant = result.mutant
        out.print(f"[yellow]{mutant.file}:{mutant.start}[/] {mutant.operator}", highlight=False)
        out.print(f"    - {mutant.original.strip()[:160]}", highlight=False, markup=False)
        out.print(f"    + {mutant.replacement.strip()[:160] or '(removed)'}", highlight=False, markup=False)
        reached = ", ".join(result.reached_by[:6]) + (" ..." if len(result.reached_by) > 6 else "")
        out.print(f"    reached by: {reached or 'nothing (no test or case runs this line)'}", highlight=False)
    out.print(
        f"{info['mutants']} mutants: {info['killed']} killed, {info['timeout']} timed out, "
        f"{info['survived']} survived, {info['excused']} excused, {info['invalid']} invalid; "
        f"score {info['score']:.1f}% in {seconds:.0f} s",
        highlight=False,
    )


def print_slice(out: Console, view: SliceView) -> None:
    """The full run's score beside the CI slice's (nothing when neither is known)."""
    if view.full_score is not None:
        out.print(
            f"[bold]full run[/] (every mutant, recorded for these policies): {view.full_score:.1f}%", highlight=False
        )
    if view.sample_score is not None:
        line = f"[bold]CI slice[/] ({view.sample_size} mutants, stratified by file): {view.sample_score:.1f}%"
        if view.recorded_sample_score is not None:
            line += f" (the full run scored the same mutants {view.recorded_sample_score:.1f}%)"
        out.print(line, highlight=False)
    for result in view.disagreements:
        out.print(f"[red]recorded as killed, survived now:[/] {result.mutant.key}", highlight=False, markup=False)


def junit_xml(results: Sequence[MutantResult]) -> bytes:
    """One testcase per scored or excused mutant; a survivor is a failure."""
    root = ET.Element("testsuites", name="kcp-opa-mutate")
    files: dict[str, list[MutantResult]] = {}
    for result in results:
        files.setdefault(result.mutant.file, []).append(result)
    for name, items in sorted(files.items()):
        survivors = [r for r in items if r.status is Status.SURVIVED]
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(items)), failures=str(len(survivors)))
        for result in items:
            mutant = result.mutant
            case = ET.SubElement(suite, "testcase", classname=name, name=f"{mutant.start}:{mutant.operator}")
            if result.status is Status.SURVIVED:
                failure = ET.SubElement(case, "failure", message="mutant survived")
                reached = ", ".join(result.reached_by)
                failure.text = f"- {mutant.original}\n+ {mutant.replacement}\nreached by: {reached}"
            elif result.status in (Status.EXCUSED, Status.INVALID):
                ET.SubElement(case, "skipped", message=f"{result.status.value}: {result.detail[:200]}")
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data
