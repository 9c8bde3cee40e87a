"""Text and Markdown for prove and diff reports (JSON is each report's ``to_dict``)."""

from __future__ import annotations

import json
from collections import Counter

from kcp_opa.analysis.cells import HELD, NO_UNIT, SHOWN, WEAKEN, CellChange
from kcp_opa.analysis.diff import UNDECLARED, DiffReport
from kcp_opa.analysis.prove import ProofReport
from kcp_opa.authoring.regoexplain import compact


def proof_text(report: ProofReport) -> str:
    verdict = report.verdict
    if report.violations:
        verdict = f"VIOLATED: {len(report.violations)} invariant(s)"
    elif report.vacuous():
        verdict = "VACUOUS: nothing broke, but what it did not reach is not proved"
    lines = [
        f"prove {report.bundle} ({report.deployment}): {verdict}",
        *([f"  bundle: {report.provenance}"] if report.provenance else []),
        f"  what was proved: {report.meaning()}",
        f"  engines: {', '.join(report.engines)}; {report.decisions} decisions in {report.seconds:.1f} s "
        f"({report.decisions / report.seconds if report.seconds else 0:.0f}/s); {report.rejected} actions refused",
        f"  invariants: {', '.join(report.invariants)}",
        f"  states: {', '.join(f'{k} {v}' for k, v in sorted(report.states.items()))}",
        f"  reach (checks whose premise held): {', '.join(_reach(report, name) for name in report.invariants)}",
        f"  units (actions reaching ALLOW or an approval state): "
        f"{', '.join(f'{unit} {count}' for unit, count in sorted(report.units_passable.items())) or 'none declared'}",
        *(f"  VACUOUS: {reason}" for reason in report.vacuous() if not report.violations),
    ]
    for v in report.violations:
        lines += [
            "",
            f"VIOLATION {v.invariant} ({report.counts[v.invariant]} action(s))",
            f"  decision: {compact(v.to_dict()['decision'], 600)}",
        ]
        if v.change:
            lines.append(f"  after {v.change}; before it: {compact(v.to_dict()['before'], 600)}")
        lines += [f"  shrunk counterexample ({v.shrink_tries} tries), now {v.now}:", f"    {compact(v.action, 2000)}"]
    return "\n".join(lines)


def _reach(report: ProofReport, name: str) -> str:
    if name in report.inapplicable:
        return f"{name} n/a ({report.inapplicable[name]})"
    if name in report.uncounted:
        return f"{name} not counted (no premise_ rule)"
    return f"{name} {report.reach[name]}"


def _new_coverage(report: DiffReport) -> str:
    count = sum(report.new_coverage.values())
    return (
        f"new coverage: {count} actions OLD denied as undeclared ({', '.join(sorted(UNDECLARED))}) are decided by "
        "a task type or unit NEW adds, OLD's other reasons kept; not a weakening: review the states they reach below"
    )


def _verdict(report: DiffReport) -> str:
    if report.weakens:
        return "WEAKENS"
    if report.unreached:
        return "NOT REACHED: a changed matrix cell no decided action reached"
    return "changes" if report.changed or report.cells else "no change"


def cell_line(cell: CellChange) -> str:
    """``payment financial approve -> autonomous WEAKEN held by ...`` (one changed cell)."""
    if cell.status == HELD:
        how = f"held by {', '.join(cell.held_by) or 'nothing else'}"
    elif cell.status == SHOWN:
        how = "shown"
    elif cell.status == NO_UNIT:
        how = "no unit (no unit of either bundle needs it: no action can reach it there)"
    else:
        how = "NOT REACHED (no decided action named a unit that needs it; the diff did not check it)"
    return f"{cell.label} {cell.direction} {how} ({cell.dimension}; {cell.tries} aimed)"


def _cells_summary(report: DiffReport) -> str:
    weak = sum(c.direction == WEAKEN for c in report.cells)
    return f"matrix cells changed: {len(report.cells)} ({weak} lowered, {len(report.unreached)} not reached)"


def diff_text(report: DiffReport) -> str:
    verdict = _verdict(report)
    lines = [
        f"diff {report.old} -> {report.new}: {verdict}",
        *([f"  old: {report.old_provenance}"] if report.old_provenance else []),
        *([f"  new: {report.new_provenance}"] if report.new_provenance else []),
        f"  {report.actions} actions ({report.decisions} decisions, {report.rejected} refused), "
        f"{report.unchanged} unchanged, {report.changed} changed, in {report.seconds:.1f} s",
        f"  states old: {_states(report.old_states)}; new: {_states(report.new_states)}",
        *([f"  VACUOUS: {_VACUOUS_DIFF}"] if report.vacuous else []),
        *([f"  {_new_coverage(report)}"] if report.new_coverage else []),
        f"  {_cells_summary(report)}",
        *(f"    cell {cell_line(cell)}" for cell in report.cells),
    ]
    for cell in report.cells:
        if cell.action is not None:
            lines.append(f"      {cell.task} {cell.value} action: {compact(cell.action, 600)}")
    for transition, count in sorted(report.transitions.items()):
        weak = report.weakening.get(transition, 0)
        lines.append(f"  {transition}: {count}" + (f"  ({weak} WEAKEN)" if weak else ""))
    for transition, examples in sorted(report.examples.items()):
        for change in examples:
            flag = "WEAKENS: " + "; ".join(change.why) if change.weakens else "example"
            lines += [
                f"    {transition} {flag}",
                f"      action: {compact(change.action, 600)}",
                f"      old: {compact(change.old, 600)}",
                f"      new: {compact(change.new, 600)}",
            ]
    return "\n".join(lines)


def diff_markdown(report: DiffReport) -> str:
    verdict = _verdict(report)
    verdict = "**weakens**" if report.weakens else f"**{verdict}**" if report.unreached else verdict
    lines = [
        f"### kcp-opa diff: {verdict}",
        "",
        f"{report.actions} generated actions decided by both bundles: {report.unchanged} unchanged, "
        f"{report.changed} changed.",
        "",
        f"States reached: old {_states(report.old_states)}; new {_states(report.new_states)}.",
        "",
        *([f"**Vacuous**: {_VACUOUS_DIFF}", ""] if report.vacuous else []),
        *([f"**{_escape(_new_coverage(report))}**", ""] if report.new_coverage else []),
        *(f"- {side} `{_escape(path)}`: {_escape(how)}" for side, path, how in _sides(report) if how),
        "",
        f"{_escape(_cells_summary(report))}.",
        "",
    ]
    if report.cells:
        lines += ["| task type | cell | old -> new | direction | decided |", "|---|---|---|---|---|"]
        lines += [
            f"| `{c.task}` | `{c.dimension}={c.value}` | {c.old} -> {c.new} | {c.direction} | "
            f"{c.status}{' by ' + ', '.join(f'`{h}`' for h in c.held_by) if c.held_by else ''} |"
            for c in report.cells
        ]
        lines.append("")
    if report.transitions:
        lines += ["| old -> new | actions | weaken |", "|---|---:|---:|"]
        lines += [f"| `{t}` | {n} | {report.weakening.get(t, 0)} |" for t, n in sorted(report.transitions.items())]
        lines.append("")
    for transition, examples in sorted(report.examples.items()):
        for change in examples[:1] + [c for c in examples[1:] if c.weakens][:1]:
            why = f" (weakens: {'; '.join(change.why)})" if change.weakens else ""
            lines += [
                f"<details><summary><code>{_escape(transition)}</code>{_escape(why)}</summary>",
                "",
                "```json",
                json.dumps(
                    {"action": change.action, "now": change.now, "old": change.old, "new": change.new},
                    indent=2,
                    sort_keys=True,
                ),
                "```",
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines)


_VACUOUS_DIFF = (
    "neither bundle let a generated action reach ALLOW or an approval state, so this diff says "
    "nothing about what they let through"
)


def _states(states: Counter[str]) -> str:
    return ", ".join(f"{state} {count}" for state, count in sorted(states.items())) or "none"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _sides(report: DiffReport) -> list[tuple[str, str, str]]:
    return [("old", report.old, report.old_provenance), ("new", report.new, report.new_provenance)]
