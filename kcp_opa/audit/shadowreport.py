"""``kcp-opa audit shadow-report``: what a candidate bundle would have changed, from the ledger.

Per candidate (by sha256): how many recorded decisions it shadowed (decision entries labelled
with it), how many it would route differently, from what to what, how many of those weaken the
decision (kcp_opa.decide.shadow.weakens), and examples to look at before promoting it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from kcp_opa.core.jsonread import mapping
from kcp_opa.trail.ledger import read_entries

MAX_EXAMPLES = 10


class Example(TypedDict):
    line: int
    decision_id: object
    transition: str
    weakens: bool
    reason_codes: dict[str, object]  # active and candidate: what each entry recorded


class Candidate(TypedDict):
    sha256: str
    revision: object
    decisions: int
    changed: int
    weakened: int
    transitions: dict[str, int]
    examples: list[Example]


class ShadowReport(TypedDict):
    ledger: str
    candidates: list[Candidate]


def _candidate(sha256: str, revision: str = "") -> Candidate:
    return {"sha256": sha256, "revision": revision, "decisions": 0, "changed": 0, "weakened": 0, "transitions": {},
            "examples": []}  # fmt: skip


def shadow_report(ledger: str | Path) -> ShadowReport:
    """The summary, per candidate, of the ``shadow`` entries and the decisions they shadowed."""
    candidates: dict[str, Candidate] = {}
    for line, entry in read_entries(ledger):
        if entry.get("type") == "decision":
            labels = entry.get("labels")
            shadow = labels.get("shadow") if isinstance(labels, Mapping) else None
            if isinstance(shadow, str):
                candidates.setdefault(shadow, _candidate(shadow))["decisions"] += 1
        elif entry.get("type") == "shadow":
            active, candidate = mapping(entry.get("active")), mapping(entry.get("candidate"))
            sha256 = str(candidate.get("sha256", ""))
            summary = candidates.setdefault(sha256, _candidate(sha256))
            summary["revision"] = candidate.get("revision", summary["revision"])
            summary["changed"] += 1
            summary["weakened"] += 1 if entry.get("weakens") is True else 0
            key = f"{active.get('decision') or 'engine_error'} -> {candidate.get('decision') or 'engine_error'}"
            summary["transitions"][key] = summary["transitions"].get(key, 0) + 1
            if len(summary["examples"]) < MAX_EXAMPLES:
                summary["examples"].append(
                    {
                        "line": line,
                        "decision_id": entry.get("decision_id"),
                        "transition": key,
                        "weakens": entry.get("weakens") is True,
                        "reason_codes": {
                            "active": active.get("reason_codes"),
                            "candidate": candidate.get("reason_codes"),
                        },
                    }
                )
    ordered = sorted(candidates.values(), key=lambda c: (-c["changed"], c["sha256"]))
    return {"ledger": str(ledger), "candidates": ordered}


def to_markdown(report: ShadowReport) -> str:
    lines = [f"# Shadow report: {report['ledger']}", ""]
    if not report["candidates"]:
        lines.append("No candidate bundle was shadowed in this ledger.")
    for summary in report["candidates"]:
        lines += [
            f"## Candidate `{summary['revision'] or '?'}` (sha256 `{summary['sha256']}`)",
            "",
            f"- decisions shadowed: {summary['decisions']}",
            f"- would change: {summary['changed']}",
            f"- would weaken: {summary['weakened']}",
            "",
            "| from -> to | decisions |",
            "|---|---|",
        ]
        lines += [f"| {key} | {count} |" for key, count in sorted(summary["transitions"].items())]
        if summary["examples"]:
            lines += ["", "Examples:", ""]
            for example in summary["examples"]:
                flag = " (weakens)" if example["weakens"] else ""
                codes = example["reason_codes"]
                lines.append(
                    f"- line {example['line']} `{example['decision_id']}`: {example['transition']}{flag}; "
                    f"reasons {codes['active']} -> {codes['candidate']}"
                )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
