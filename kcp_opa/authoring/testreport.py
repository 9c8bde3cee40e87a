"""Reports for `kcp-opa test`: a rich summary, JSON, and JUnit XML for CI servers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from kcp_opa.authoring.caserun import CaseRun
from kcp_opa.authoring.regotest import CoverageReport, Outcome, TestResult
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping


def policy_coverage(*reports: CoverageReport | None) -> JsonDict | None:
    """Union of covered lines over the reports, for policy modules only (tests are not covered)."""
    covered: dict[str, set[int]] = {}
    seen: dict[str, set[int]] = {}
    for report in reports:
        for name, item in (report["files"] if report else {}).items():
            if name.endswith("_test.rego"):
                continue
            covered.setdefault(name, set()).update(item["covered"])
            seen.setdefault(name, set()).update(item["covered"], item["not_covered"])
    if not seen:
        return None
    files: JsonDict = {}
    for name in sorted(seen):
        missed = sorted(seen[name] - covered[name])
        files[name] = {
            "coverage": 100.0 * (len(seen[name]) - len(missed)) / len(seen[name]) if seen[name] else 100.0,
            "not_covered": missed,
        }
    total = sum(len(v) for v in seen.values())
    hit = sum(len(covered[k]) for k in seen)
    return {"files": files, "coverage": 100.0 * hit / total if total else 100.0}


def to_dict(tests: Sequence[TestResult], cases: CaseRun | None, coverage: JsonObject | None) -> JsonDict:
    return {
        "tests": [
            {
                "name": r.test.name,
                "file": r.test.file,
                "line": r.test.line,
                "outcome": r.outcome.value,
                "divergent": r.divergent,
                "engines": {k: {"outcome": v.outcome.value, "detail": v.detail} for k, v in r.engines.items()},
                **({"explain": r.explain} if r.explain else {}),
            }
            for r in tests
        ],
        "cases": None
        if cases is None
        else {
            "results": [
                {
                    "case_id": r.case.case_id,
                    "file": r.case.file,
                    "line": r.case.line,
                    "passed": r.passed,
                    "problems": r.problems,
                    "divergent": r.divergent,
                    "error": r.error,
                    "decision": r.decision.decision.value if r.decision else None,
                }
                for r in cases.results
            ],
            "metrics": cases.metrics(),
        },
        "coverage": coverage,
    }


def junit_xml(tests: Sequence[TestResult], cases: CaseRun | None) -> bytes:
    """JUnit XML (the schema Jenkins, GitLab and GitHub reporters read)."""
    root = ET.Element("testsuites", name="kcp-opa")
    suites: list[tuple[str, list[tuple[str, str, str, str]]]] = []
    rows = []
    for result in tests:
        detail = "; ".join(f"{engine}: {r.detail}" for engine, r in result.engines.items() if r.detail)
        if result.divergent:
            detail = "engines disagree: " + detail
        rows.append((result.test.file, result.test.name, result.outcome.value, detail))
    suites.append(("rego", rows))
    if cases is not None:
        case_rows = []
        for ran in cases.results:
            state = "ERROR" if ran.error else ("PASS" if ran.passed else "FAIL")
            detail = ran.error or "; ".join(ran.problems) or ("engines disagree" if ran.divergent else "")
            case_rows.append((ran.case.file, ran.case.case_id, state, detail))
        suites.append(("decision-cases", case_rows))
    for suite_name, suite_rows in suites:
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(suite_rows)),
            failures=str(sum(1 for r in suite_rows if r[2] == "FAIL")),
            errors=str(sum(1 for r in suite_rows if r[2] == "ERROR")),
            skipped=str(sum(1 for r in suite_rows if r[2] == "SKIP")),
        )
        for file, name, state, detail in suite_rows:
            element = ET.SubElement(suite, "testcase", name=name, classname=file)
            if state == "FAIL":
                ET.SubElement(element, "failure", message=detail[:500] or "failed").text = detail
            elif state == "ERROR":
                ET.SubElement(element, "error", message=detail[:500] or "error").text = detail
            elif state == "SKIP":
                ET.SubElement(element, "skipped", message=detail[:500] or "skipped")
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml


_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "SKIP": "yellow"}


def _pct(value: float | None) -> str:
    """A rate, or "n/a" when no case it is measured on ran."""
    return "n/a" if value is None else f"{value:.1%}"


def print_report(
    console: Console,
    tests: Sequence[TestResult],
    cases: CaseRun | None,
    coverage: JsonObject | None,
    *,
    verbose: bool,
) -> None:
    for result in tests:
        state = result.outcome.value
        if verbose or state in {"FAIL", "ERROR"} or result.explain:
            line = f"[{_STYLE[state]}]{state:5s}[/] {result.test.name} ({result.test.file}:{result.test.line})"
            console.print(line + (" [red]engines disagree[/]" if result.divergent else ""))
            if state != "PASS" or verbose:
                for engine, r in result.engines.items():
                    if r.detail:
                        console.print(f"        {engine}: {r.detail}", markup=False)
        if result.explain:
            console.print("        explain (traced on OPA):", markup=False)
            for line in result.explain:
                console.print(f"          {line}", markup=False, highlight=False)
    counts = {o.value: sum(1 for r in tests if r.outcome is o) for o in Outcome}
    if tests or cases is None:  # --cases-only runs none: no "Rego tests: 0" line
        console.print(
            f"Rego tests: {len(tests)}  "
            + "  ".join(f"[{_STYLE[k]}]{k} {v}[/]" for k, v in counts.items() if v)
            + f"  divergent {sum(r.divergent for r in tests)}"
        )
    if cases is not None:
        metrics = cases.metrics()
        for case_id in metrics["false_allows"]:
            console.print(f"[bold red]FALSE ALLOW[/] {case_id}")
        for outcome in cases.results:
            if not outcome.passed:
                reason = outcome.error or "; ".join(outcome.problems) or "engines disagree"
                where = f"{outcome.case.file}:{outcome.case.line}"
                console.print(f"[bold red]FAIL[/]  case {outcome.case.case_id} ({where}): {reason}", highlight=False)
        table = Table(title=f"Decision cases ({metrics['cases']}, engines: {', '.join(cases.engines)})")
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_row("cases passed", f"{metrics['passed']} / {metrics['cases']} ({metrics['ran']} ran)")
        table.add_row("decision accuracy", _pct(metrics["decision_accuracy"]))
        style = "bold red" if metrics["false_allows"] or metrics["false_allow_rate"] is None else "green"
        table.add_row(f"[{style}]false-allow rate[/]", f"[{style}]{_pct(metrics['false_allow_rate'])}[/]")
        table.add_row("false-denial rate", _pct(metrics["false_denial_rate"]))
        table.add_row(
            "approval-routing accuracy",
            f"{_pct(metrics['approval_routing_accuracy'])} of {metrics['approval_routing_cases']}",
        )
        table.add_row("engine divergences", str(len(metrics["divergences"])))
        console.print(table)
    if coverage is not None:
        table = Table(title="Policy coverage (OPA reference)")
        table.add_column("file")
        table.add_column("coverage", justify="right")
        table.add_column("lines not covered")
        for name, file in mapping(coverage["files"]).items():
            item = mapping(file)
            missed = items(item["not_covered"])
            table.add_row(
                name,
                f"{item['coverage']:.1f}%",
                ", ".join(map(str, missed[:12])) + (" ..." if len(missed) > 12 else ""),
            )
        table.add_row("[bold]total[/]", f"[bold]{coverage['coverage']:.1f}%[/]", "")
        console.print(table)
