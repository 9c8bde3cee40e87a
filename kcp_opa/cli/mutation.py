"""`kcp-opa mutate`: mutation testing of the policies, the full run and its CI slice."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from kcp_opa.authoring.cases import case_files, load_cases
from kcp_opa.authoring.policytree import load_modules
from kcp_opa.authoring.regotest import discover
from kcp_opa.cli import render
from kcp_opa.cli.options import ANY_PATH, FORMAT, JUNIT, cases_options, file_option
from kcp_opa.cli.output import EXIT_USAGE, as_json, console
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.compile.policyfiles import default_policies
from kcp_opa.core.errors import SourceUnreadableError


@click.command(name="mutate")
@click.argument("paths", nargs=-1, type=ANY_PATH)
@cases_options("Decision-case YAML files each mutant must still pass [default: fixtures/cases if it exists].")
@click.option("--threshold", type=click.FloatRange(0, 100), help="Exit 2 when the mutation score is below this.")
@click.option(
    "--sample",
    type=click.IntRange(1),
    help="Only this many mutants, stratified by file and seeded by the policies' fingerprint (the CI slice).",
)
@click.option("--seed", type=int, help="Mix this into the sample's seed [default: the fingerprint alone].")
@click.option("--only", "only_regex", metavar="REGEX", help="Only mutate policy files whose path matches REGEX.")
@file_option(
    "--score-file",
    help="The full run's record: a full run writes it; a --sample run reads it (refused when stale), "
    "draws from the mutants it scored and prints the full score beside the sample's.",
)
@click.option(
    "--full-threshold",
    type=click.FloatRange(0, 100),
    help="With --sample and --score-file: exit 2 when the recorded full score is below this.",
)
@click.option("--jobs", type=click.IntRange(1), help="Worker processes [default: one per core].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=120.0, show_default=True, help="Per mutant.")
@FORMAT
@JUNIT
def mutate_command(
    paths: Sequence[Path],
    cases_dir: Path | None,
    deployments_dir: Path,
    threshold: float | None,
    sample: int | None,
    seed: int | None,
    only_regex: str | None,
    score_file: Path | None,
    full_threshold: float | None,
    jobs: int | None,
    timeout_s: float,
    fmt: str | None,
    junit: Path | None,
) -> None:
    """Mutation testing: change the policies one point at a time; the tests must notice.

    \b
    Each mutant (a flipped comparison, a shifted boundary, a negation, a dropped body
    expression or rule, a swapped routing state, control or reason code, a swapped set
    operation, a changed default) runs the Rego tests and the decision cases on OPA. A
    mutant nobody notices *survives*: the report names its file:line, the change, and the
    tests and cases that reach the line. Excuse an equivalent mutant on its line with
    `# mutate: equivalent <reason>` (counted as excused, not scored). Exit 2 when the score
    is below --threshold or the unmutated suite does not pass.
    \b
    The full run records its score with --score-file, keyed by a fingerprint of the
    policies, tests and cases; the CI slice (--sample with the same --score-file) refuses a
    stale record, samples the recorded run stratified by file, and prints both scores.
    \b
    Examples:
      kcp-opa mutate policies --threshold 90 --score-file policies/mutation-score.json
      kcp-opa mutate policies --sample 40 --threshold 85 --score-file policies/mutation-score.json \\
          --full-threshold 90                                # the CI slice
      kcp-opa mutate policies --only residency --format json
    """
    import os

    from kcp_opa.authoring import mutate_slice
    from kcp_opa.authoring.mutate import build_suite, mutants_of, run_cases_batched, run_mutants, run_tests_batched
    from kcp_opa.authoring.mutate_report import attach_reached_by, print_report, print_slice, summary
    from kcp_opa.authoring.mutate_report import junit_xml as mutate_junit
    from kcp_opa.authoring.mutate_report import to_dict as mutate_dict

    targets = list(paths) or [default_policies()]
    policy_dirs = [t for t in targets if t.is_dir()]
    if not policy_dirs:
        files = [t for t in targets if t.is_file()]
        if files:
            first = files[0]
            root = Path(first.parts[0]) if not first.is_absolute() and len(first.parts) > 1 else first.parent
            raise click.BadParameter(
                f"give the policy directory, not a file; to mutate only {files[0]}, run: "
                f"kcp-opa mutate {root} --only {re.escape(files[0].name)}",
                param_hint="PATHS",
            )
        raise click.BadParameter("give the policy directory (e.g. policies)", param_hint="PATHS")
    if score_file is not None and only_regex is not None:
        raise click.BadParameter("a record covers every policy file: drop --only", param_hint="--score-file")
    if full_threshold is not None and (score_file is None or sample is None):
        raise click.BadParameter("needs --sample and --score-file", param_hint="--full-threshold")
    try:
        modules = load_modules(policy_dirs[:1])
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceUnreadableError(str(targets[0]), f"cannot read policies: {exc}") from None
    directory = cases_dir or (Path("fixtures/cases") if Path("fixtures/cases").is_dir() else None)
    case_paths = case_files(directory) if directory else []
    cases = [case for path in case_paths for case in load_cases(path)]
    inputs = mutate_slice.input_files(case_paths, deployments_dir, (c.deployment for c in cases))
    fingerprint = mutate_slice.fingerprint(modules, inputs)
    everything = mutants_of(modules, only_regex)
    try:
        record, mutants = mutate_slice.select(everything, sample, score_file, fingerprint, seed)
    except mutate_slice.RecordError as exc:
        click.echo(f"kcp-opa: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    began = time.monotonic()
    suite = build_suite(modules, discover(modules), cases, policy_dirs[0], deployments_dir)
    baseline = run_tests_batched(suite.modules, suite.tests) or run_cases_batched(suite, suite.modules)
    if baseline is not None:
        click.echo(f"kcp-opa: the unmutated suite does not pass ({baseline}); fix it first", err=True)
        sys.exit(EXIT_USAGE)
    workers = jobs or os.cpu_count() or 1
    if sys.stderr.isatty() and not as_json(fmt):
        from rich.progress import Progress

        with Progress(console=console()) as bar:
            task = bar.add_task(f"{len(mutants)} mutants, {workers} workers", total=len(mutants))
            results = run_mutants(
                suite, mutants, jobs=workers, timeout_s=timeout_s, progress=lambda _: bar.advance(task)
            )
    else:
        results = run_mutants(suite, mutants, jobs=workers, timeout_s=timeout_s)
    attach_reached_by(suite, [r for r in results if r.status.value == "survived"])
    seconds = time.monotonic() - began
    score = summary(results)["score"]
    if sample is None and score_file is not None:
        record = mutate_slice.record_of(results, summary(results), fingerprint, seconds, threshold)
    the_slice = mutate_slice.compare(record, results, sample, mutate_slice.seed_text(fingerprint, seed))
    if sample is None and score_file is not None and record is not None:
        write_atomically(score_file, mutate_slice.write_record(record, the_slice))
    if junit is not None:
        write_atomically(junit, mutate_junit(results))
    if as_json(fmt):
        render.print_json({**mutate_dict(results, seconds, threshold), **the_slice.to_dict()})
    else:
        print_report(console(), results, seconds)
        print_slice(console(), the_slice)
    failures = mutate_slice.failures(score, threshold, record, full_threshold, the_slice)
    for failure in failures:
        click.echo(f"kcp-opa: {failure}", err=True)
    if failures:
        sys.exit(EXIT_USAGE)
