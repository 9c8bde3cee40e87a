"""The policy author's commands: test (Rego tests and decision cases) and check (engine hazards)."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from kcp_opa.authoring.caserun import run_cases
from kcp_opa.authoring.cases import case_files, load_cases
from kcp_opa.authoring.policycheck import check_modules
from kcp_opa.authoring.regotest import Outcome, discover, load_modules, load_selection, run_tests
from kcp_opa.authoring.testreport import junit_xml, policy_coverage, print_report, to_dict
from kcp_opa.cli import render
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, FORMAT, as_json, console
from kcp_opa.compile.bundle import read_bundle, write_atomically
from kcp_opa.core.errors import SourceUnreadableError


@click.command(name="test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--run", "run_regex", metavar="REGEX", help="Only tests (data.pkg.test_x) and cases matching REGEX.")
@click.option("-v", "--verbose", "verbose", is_flag=True, help="Every test with its engines' details.")
@click.option("--engines", default="regopy,opa", show_default=True, help="Comma-separated: regopy, opa.")
@click.option(
    "--cases",
    "cases_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Decision-case YAML files to run [default: fixtures/cases if it exists].",
)
@click.option(
    "--deployments",
    "deployments_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("fixtures/deployments"),
    show_default=True,
    help="Where each case's deployment (knowledge.yaml, matrix.yaml) lives.",
)
@click.option("--no-cases", is_flag=True, help="Rego tests only.")
@click.option("--coverage", is_flag=True, help="Report policy line coverage (OPA reference engine).")
@click.option("--threshold", type=click.FloatRange(0, 100), help="With --coverage: fail below this percentage.")
@click.option(
    "--fail-on-false-allow/--no-fail-on-false-allow",
    default=True,
    show_default=True,
    help="A case that must not execute but would fails the run.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Output format. Default: text on a terminal, json when piped.",
)
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), help="Also write JUnit XML here.")
def test_command(
    paths: Sequence[Path],
    run_regex: str | None,
    verbose: bool,
    engines: str,
    cases_dir: Path | None,
    deployments_dir: Path,
    no_cases: bool,
    coverage: bool,
    threshold: float | None,
    fail_on_false_allow: bool,
    fmt: str | None,
    junit: Path | None,
) -> None:
    """Run Rego tests (`test_*` in *_test.rego) on regopy and OPA, then the decision cases.

    \b
    Like `opa test`: exit 0 when everything passes, 2 on any failure, error, engine
    divergence, false allow or coverage below --threshold. A test that aborts regopy is an
    ERROR that names the construct, never a crash of the runner.
    \b
    Examples:
      kcp-opa test policies/                        # tests + fixtures/cases + metrics
      kcp-opa test policies/ --coverage --threshold 90 --junit report.xml
      kcp-opa test policies/ --run residency -v
    """
    targets = list(paths) or [Path("policies")]
    wanted = tuple(e.strip() for e in engines.split(",") if e.strip())
    unknown = set(wanted) - {"regopy", "opa"}
    if unknown or not wanted:
        raise click.BadParameter(f"unknown engine(s) {', '.join(sorted(unknown)) or '(none)'}", param_hint="--engines")
    try:
        modules, root = load_selection(targets)
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceUnreadableError(str(targets[0]), f"cannot read policies: {exc}") from None
    tests = discover(modules, run_regex)
    results, test_coverage = run_tests(modules, tests, wanted, coverage=coverage)
    case_run = None
    directory = cases_dir or (Path("fixtures/cases") if Path("fixtures/cases").is_dir() else None)
    policy_dirs = [t for t in targets if t.is_dir()]
    if root is not None:
        # Cases decide whole deployments: they run for the policies root, or a sub-path with --cases.
        policy_dirs = [root] if cases_dir is not None or any(t.resolve() == root for t in targets) else []
    if not no_cases and directory is not None and policy_dirs:
        cases = [case for path in case_files(directory) for case in load_cases(path)]
        if run_regex:
            cases = [c for c in cases if re.search(run_regex, c.case_id)]
        case_run = run_cases(cases, policy_dirs[0], deployments_dir, wanted, coverage=coverage)
    covered = policy_coverage(test_coverage, case_run.coverage if case_run else None) if coverage else None
    if junit is not None:
        write_atomically(junit, junit_xml(results, case_run))
    if as_json(fmt):
        render.print_json(to_dict(results, case_run, covered))
    else:
        print_report(console(), results, case_run, covered, verbose=verbose)
    failed = any(r.outcome in {Outcome.FAIL, Outcome.ERROR} for r in results)
    if case_run is not None:
        metrics = case_run.metrics()
        failed = failed or metrics["passed"] != metrics["cases"]
        failed = failed or (fail_on_false_allow and bool(metrics["false_allows"]))
    if coverage and threshold is not None and (covered is None or covered["coverage"] < threshold):
        shown = "no coverage" if covered is None else f"{covered['coverage']:.1f}%"
        click.echo(f"kcp-opa: coverage {shown} is below the threshold {threshold:g}%", err=True)
        failed = True
    if failed:
        sys.exit(EXIT_USAGE)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--bundle",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also check the policies against this bundle's data (shadowed rules).",
)
@click.option("--strict", is_flag=True, help="Warnings fail the check too (exit 1).")
@FORMAT
def check(paths: Sequence[Path], bundle: Path | None, strict: bool, fmt: str | None) -> None:
    """Compile every module on OPA and regopy and flag the constructs engine-notes.md lists.

    Exit 1 on any error (or, with --strict, any warning); 0 otherwise.
    """
    targets = list(paths) or [Path("policies")]
    try:
        modules = load_modules(targets)
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceUnreadableError(str(targets[0]), f"cannot read policies: {exc}") from None
    data = read_bundle(bundle).data if bundle is not None else None
    findings = check_modules(modules, data=data)
    errors = [f for f in findings if f.severity == "error"]
    if as_json(fmt):
        render.print_json({"modules": len(modules), "findings": [f.to_dict() for f in findings]})
    else:
        out = console()
        for finding in findings:
            style = "bold red" if finding.severity == "error" else "yellow"
            out.print(
                f"[{style}]{finding.severity}[/] {finding.file}:{finding.line}: {finding.message} ({finding.code})",
                highlight=False,
            )
        out.print(f"{len(modules)} modules: {len(errors)} errors, {len(findings) - len(errors)} warnings")
    if errors or (strict and findings):
        sys.exit(EXIT_INVALID)
