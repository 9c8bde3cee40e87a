"""The policy author's commands: test (Rego tests and decision cases) and check (engine hazards)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import click

from kcp_opa.authoring.caserun import CaseRun, run_cases
from kcp_opa.authoring.cases import case_files, load_cases
from kcp_opa.authoring.findingcheck import CheckFinding
from kcp_opa.authoring.policycheck import check_modules
from kcp_opa.authoring.policytree import load_modules, load_selection, policy_root
from kcp_opa.authoring.regoexplain import explain_results
from kcp_opa.authoring.regotest import Outcome, TestResult, discover, run_tests
from kcp_opa.authoring.testreport import junit_xml, policy_coverage, print_report, to_dict
from kcp_opa.cli import render
from kcp_opa.cli.options import ANY_PATH, FORMAT, JUNIT, cases_options, dir_option, file_option
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, as_json, console, status
from kcp_opa.compile.bundle import read_bundle, write_atomically
from kcp_opa.compile.evaluatorgen import EVALUATORS_DIR, GENERATED
from kcp_opa.compile.evaluatorgen import stale as union_stale
from kcp_opa.compile.overlay import overlaid, overlay_targets
from kcp_opa.compile.policyfiles import default_policies
from kcp_opa.core.errors import KcpOpaError, SourceUnreadableError
from kcp_opa.core.jsonread import JsonDict, number

#: Files whose change re-runs `kcp-opa test --watch`, and how often to look.
WATCHED = frozenset({".rego", ".yaml", ".yml", ".json"})
WATCH_INTERVAL_S = 1.0


@click.command(name="test")
@click.argument("paths", nargs=-1, type=ANY_PATH)
@click.option("--run", "run_regex", metavar="REGEX", help="Only tests (data.pkg.test_x) and cases matching REGEX.")
@click.option("-v", "--verbose", "verbose", is_flag=True, help="Every test with its engines' details.")
@click.option("--engines", default="regopy,opa", show_default=True, help="Comma-separated: regopy, opa.")
@cases_options("Decision-case YAML files to run [default: fixtures/cases if it exists].")
@click.option("--rego-only", "--no-cases", "no_cases", is_flag=True, help="Rego tests only, no decision cases.")
@click.option("--cases-only", is_flag=True, help="Decision cases only, no Rego tests (a deployment's own cases).")
@click.option("--coverage", is_flag=True, help="Report policy line coverage (OPA reference engine).")
@click.option(
    "--explain",
    type=click.Choice(["fails", "full"]),
    help="Show each failing expression with its values (fails), or every evaluated one (full); traced on OPA.",
)
@click.option("--threshold", type=click.FloatRange(0, 100), help="With --coverage: fail below this percentage.")
@click.option(
    "--fail-on-false-allow/--no-fail-on-false-allow",
    default=True,
    show_default=True,
    help="A case that must not execute but would fails the run.",
)
@FORMAT
@JUNIT
@click.option("--watch", is_flag=True, help="Run again whenever a .rego, case or deployment file changes.")
@dir_option(
    "--overlay",
    help="A directory of your own evaluators and their tests, run beside PATHS (the policies they extend "
    "[default: the shipped ones]) without copying them: only the overlay's tests run (docs/extending.md).",
)
def test_command(
    paths: Sequence[Path],
    run_regex: str | None,
    verbose: bool,
    engines: str,
    cases_dir: Path | None,
    deployments_dir: Path,
    no_cases: bool,
    cases_only: bool,
    coverage: bool,
    explain: str | None,
    threshold: float | None,
    fail_on_false_allow: bool,
    fmt: str | None,
    junit: Path | None,
    watch: bool,
    overlay: Path | None,
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
      kcp-opa test my/policies --rego-only --explain fails   # the failing expression and its values
      kcp-opa test policies/ --cases my/cases --deployments my/deployments --cases-only
      kcp-opa test policies/kcp/evaluators/ --watch   # one folder's tests, again on every save
      kcp-opa test --overlay my-evaluators/          # your evaluators' tests beside the shipped policies
    """
    targets = list(paths) or [default_policies()]
    wanted = tuple(e.strip() for e in engines.split(",") if e.strip())
    unknown = set(wanted) - {"regopy", "opa"}
    if unknown or not wanted:
        raise click.BadParameter(f"unknown engine(s) {', '.join(sorted(unknown)) or '(none)'}", param_hint="--engines")
    directory = cases_dir or (Path("fixtures/cases") if Path("fixtures/cases").is_dir() else None)
    if no_cases and cases_only:
        raise click.BadParameter("--rego-only and --cases-only exclude each other", param_hint="--cases-only")
    run = TestRun(
        targets, wanted, run_regex, directory, cases_dir is not None, deployments_dir, no_cases, coverage, cases_only,
        explain,
    )  # fmt: skip

    if overlay is not None and len(targets) > 1:
        raise click.BadParameter("with --overlay, PATHS is the one policies tree it extends", param_hint="PATHS")

    def once() -> bool:
        # --threshold applies with --coverage only, as it always has.
        with overlaid(targets[0], overlay) as tree:
            selected = run if overlay is None else replace(run, targets=overlay_targets(tree, overlay))
            outcome = selected.execute()
        return _report(outcome, verbose, threshold if coverage else None, fail_on_false_allow, fmt, junit)

    if not watch:
        if once():
            sys.exit(EXIT_USAGE)
        return
    watched = [*targets, *([directory] if directory else []), deployments_dir, *([overlay] if overlay else [])]
    seen: tuple[tuple[str, int], ...] | None = None
    while True:  # Ctrl-C ends it (exit 130)
        now = _snapshot(watched)
        if now != seen:
            seen = now
            once()
            click.echo("kcp-opa: watching for changes to .rego, case and deployment files (Ctrl-C stops)", err=True)
        time.sleep(WATCH_INTERVAL_S)


@dataclass(frozen=True)
class TestRun:
    """One `kcp-opa test` run's inputs, so --watch can repeat it."""

    targets: Sequence[Path]
    engines: tuple[str, ...]
    run_regex: str | None
    cases_dir: Path | None
    cases_asked: bool
    deployments_dir: Path
    no_cases: bool
    coverage: bool
    cases_only: bool = False
    explain: str | None = None

    def execute(self) -> tuple[list[TestResult], CaseRun | None, JsonDict | None]:
        try:
            modules, root = load_selection(self.targets)
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceUnreadableError(str(self.targets[0]), f"cannot read policies: {exc}") from None
        tests = discover(modules, self.run_regex)
        results: list[TestResult] = []
        test_coverage = None
        if not self.cases_only:
            with status(f"{len(tests)} Rego tests on {' and '.join(self.engines)}"):
                results, test_coverage = run_tests(modules, tests, self.engines, coverage=self.coverage)
            if self.explain:
                explain_results(modules, results, self.explain)
        case_run = None
        policy_dirs = [t for t in self.targets if t.is_dir()]
        if root is not None:
            # Cases decide whole deployments: they run for the policies root, or a sub-path with --cases.
            policy_dirs = [root] if self.cases_asked or any(t.resolve() == root for t in self.targets) else []
        if not self.no_cases and self.cases_dir is not None and policy_dirs:
            cases = [case for path in case_files(self.cases_dir) for case in load_cases(path)]
            if self.run_regex:
                cases = [c for c in cases if re.search(self.run_regex, c.case_id)]
            with status(f"{len(cases)} decision cases on {' and '.join(self.engines)}"):
                case_run = run_cases(cases, policy_dirs[0], self.deployments_dir, self.engines, coverage=self.coverage)
        coverage = case_run.coverage if case_run else None
        covered = policy_coverage(test_coverage, coverage) if self.coverage else None
        return results, case_run, covered


def _report(
    outcome: tuple[list[TestResult], CaseRun | None, JsonDict | None],
    verbose: bool,
    threshold: float | None,
    fail_on_false_allow: bool,
    fmt: str | None,
    junit: Path | None,
) -> bool:
    """Print one run; True when it failed (a test, a case, a false allow, coverage below threshold)."""
    results, case_run, covered = outcome
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
        empty = case_run.nothing_ran()
        if empty is not None and (case_run.results or not results):
            click.echo(f"kcp-opa: {empty}", err=True)
            failed = True
    elif not results:
        click.echo("kcp-opa: no Rego test and no decision case was selected: nothing was checked", err=True)
        failed = True
    percent = None if covered is None else number(covered.get("coverage"))
    if threshold is not None and (percent is None or percent < threshold):
        shown = "no coverage" if percent is None else f"{percent:.1f}%"
        click.echo(f"kcp-opa: coverage {shown} is below the threshold {threshold:g}%", err=True)
        failed = True
    return failed


def _snapshot(paths: Sequence[Path]) -> tuple[tuple[str, int], ...]:
    """(path, mtime) of every watched file: a change, an addition or a removal changes it."""
    files = []
    for path in paths:
        candidates = path.rglob("*") if path.is_dir() else [path]
        files += [(str(f), f.stat().st_mtime_ns) for f in candidates if f.suffix in WATCHED and f.is_file()]
    return tuple(sorted(files))


@click.command()
@click.argument("paths", nargs=-1, type=ANY_PATH)
@file_option("--bundle", help="Also check the policies against this bundle's data (shadowed rules).")
@click.option("--strict", is_flag=True, help="Warnings fail the check too (exit 1).")
@FORMAT
def check(paths: Sequence[Path], bundle: Path | None, strict: bool, fmt: str | None) -> None:
    """Compile every module on OPA and regopy and flag the constructs docs/engine-findings.md lists.

    Exit 1 on any error (or, with --strict, any warning); 0 otherwise.
    """
    targets = list(paths) or [default_policies()]
    try:
        modules = load_modules(targets)
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceUnreadableError(str(targets[0]), f"cannot read policies: {exc}") from None
    data = read_bundle(bundle).data if bundle is not None else None
    with status(f"checking {len(modules)} modules on OPA and regopy"):
        findings = check_modules(modules, data=data)
    findings += _stale_generated(targets)
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


def _stale_generated(targets: Sequence[Path]) -> list[CheckFinding]:
    """An error for each checked policies tree whose generated findings union is stale."""
    found = []
    for root in sorted({r for r in map(policy_root, targets) if r is not None and (r / EVALUATORS_DIR).is_dir()}):
        try:
            reason = union_stale(root)
        except KcpOpaError as exc:
            reason = str(exc)
        if reason is not None:
            found.append(CheckFinding(str(root / GENERATED), 1, "error", "generated_stale", reason))
    return found
