"""prove, diff and cases pin: the analysis commands (the work is in kcp_opa.analysis)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click
import yaml

from kcp_opa.analysis.analysed import load_bundle, resolve
from kcp_opa.analysis.diff import DEFAULT_BUDGET as DIFF_BUDGET
from kcp_opa.analysis.diff import diff
from kcp_opa.analysis.engines import UserInvariants
from kcp_opa.analysis.pin import pin
from kcp_opa.analysis.prove import DEFAULT_BUDGET, cases_document, prove
from kcp_opa.analysis.report import diff_markdown, diff_text, proof_text
from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.options import FILE, file_option
from kcp_opa.cli.output import EXIT_INVALID
from kcp_opa.models.decision import RoutingState

STATES = [state.value for state in RoutingState]  # strongest first, as the contract lists them
_file = click.Path(exists=True, dir_okay=False, path_type=Path)
_source = click.Path(exists=True, path_type=Path)
_dir = click.Path(exists=True, file_okay=False, path_type=Path)


@click.command(name="prove")
@click.argument("bundle", type=_file)
@click.option(
    "--invariants",
    "invariant_files",
    multiple=True,
    type=_file,
    help="A Rego file of the deployment's own invariants (rules named invariant_<name>); repeatable.",
)
@click.option("--budget", type=click.IntRange(1), default=DEFAULT_BUDGET, show_default=True, help="Decisions to spend.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the covering array and samples.")
@click.option(
    "--requires-from",
    "requires_from",
    multiple=True,
    type=_file,
    help="Also hold the facts another bundle's rules need (an old policy against today's contract).",
)
@file_option("--cases-out", help="Write every shrunk counterexample as a decision-case file here.")
@click.option("--deployment", help="The cases' deployment name [default: the bundle's first project].")
@click.option("--engines", type=click.Choice(["regopy,opa", "regopy"]), default="regopy,opa", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--strict",
    is_flag=True,
    help="A deployment invariant without a premise_<name> rule (what it tested cannot be counted) "
    "makes the run VACUOUS too.",
)
@verification_options
def prove_command(
    bundle: Path,
    invariant_files: tuple[Path, ...],
    budget: int,
    seed: int,
    requires_from: tuple[Path, ...],
    cases_out: Path | None,
    deployment: str | None,
    engines: str,
    fmt: str,
    strict: bool,
    verification_keys: tuple[str, ...],
    verification_scope: str,
) -> None:
    """Check the contract's invariants (and yours) on every generated action of BUNDLE.

    The verdict is PROVED, VIOLATED (each broken invariant with a shrunk counterexample) or
    VACUOUS: nothing broke, but no action reached ALLOW or an approval state, or an invariant's
    premise held for no action (it was never tested); the report counts both. A signed bundle
    is verified under --verification-key (and refused when it does not verify); without a key
    its signature is not checked and the report says so. Exit 0 when PROVED, 1 when VIOLATED or
    VACUOUS, 2 when it cannot run.
    """
    verification = verification_of(verification_keys, verification_scope)
    users = [UserInvariants.load(path) for path in invariant_files]
    subject = load_bundle(bundle, verification)
    report = prove(
        subject.bundle,
        users=users,
        budget=budget,
        seed=seed,
        requires_from=[load_bundle(p, verification).bundle for p in requires_from],
        opa=engines == "regopy,opa",
        strict=strict,
    )
    report.provenance = subject.provenance
    document = cases_document(report, deployment)
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    if cases_out is not None and report.violations:
        cases_out.write_text(text, encoding="utf-8")
    if fmt == "json":
        click.echo(json.dumps({**report.to_dict(), "cases": document if report.violations else None}, indent=2))
    else:
        click.echo(proof_text(report))
        if report.violations:
            click.echo("\nAs decision cases (fixtures/cases format), ready to pin:\n")
            click.echo(text.rstrip())
    if not report.proved:
        sys.exit(EXIT_INVALID)


@click.command(name="diff")
@click.argument("old", type=_source)
@click.argument("new", type=_source)
@click.option("--old-matrix", type=_file, help="OLD's delegation matrix [default: matrix.yaml beside its manifests].")
@click.option("--new-matrix", type=_file, help="NEW's delegation matrix [default: matrix.yaml beside its manifests].")
@click.option("--old-policies", type=_dir, help="OLD's policies directory [default: the shipped policies].")
@click.option("--new-policies", type=_dir, help="NEW's policies directory [default: the shipped policies].")
@click.option("--budget", type=click.IntRange(2), default=DIFF_BUDGET, show_default=True, help="Decisions to spend.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--allow-weakening", is_flag=True, help="Exit 0 even when a change weakens a decision.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@verification_options
def diff_command(
    old: Path,
    new: Path,
    old_matrix: Path | None,
    new_matrix: Path | None,
    old_policies: Path | None,
    new_policies: Path | None,
    budget: int,
    seed: int,
    allow_weakening: bool,
    fmt: str,
    verification_keys: tuple[str, ...],
    verification_scope: str,
) -> None:
    """What NEW decides differently from OLD: each changed matrix cell, then generated actions.

    OLD and NEW are bundles, or declarations compiled on the fly: a deployment directory
    (knowledge*.yaml and matrix.yaml) or a manifest, with --old-/--new-matrix and
    --old-/--new-policies. A signed bundle is verified under --verification-key (refused when
    it does not verify).

    Every matrix cell (task type x data category or sensitivity) OLD and NEW set differently is
    decided first, with actions aimed at it (a unit that needs it, the task type's tool), and
    listed in every format (text, json, markdown) as WEAKEN or STRENGTHEN by autonomous <
    confirm < approve < forbidden (a missing cell denies: forbidden; a task type NEW adds is NEW
    COVERAGE), and as shown (a decided action changed), held (the other findings that kept the
    decision are named), no unit (no unit of either bundle needs it) or NOT REACHED.

    Exit 1 when a change weakens (a weaker state, execution newly allowed, a control no longer
    required, a lowered cell even where held) unless --allow-weakening, and whenever a changed
    cell is NOT REACHED; 0 otherwise; 2 when it cannot run.
    """
    verification = verification_of(verification_keys, verification_scope)
    with tempfile.TemporaryDirectory(prefix="kcp-opa-diff-") as workdir:
        before = resolve(
            old, name="old", verification=verification, matrix=old_matrix, policies=old_policies, workdir=Path(workdir)
        )
        after = resolve(
            new, name="new", verification=verification, matrix=new_matrix, policies=new_policies, workdir=Path(workdir)
        )
        report = diff(before.bundle, after.bundle, budget=budget, seed=seed)
    report.old, report.new = str(old), str(new)  # not the temporary bundle a compile wrote
    report.old_provenance, report.new_provenance = before.provenance, after.provenance
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(diff_markdown(report) if fmt == "markdown" else diff_text(report))
    if (report.weakens and not allow_weakening) or report.unreached:
        sys.exit(EXIT_INVALID)


@click.group(name="cases")
def cases_group() -> None:
    """Decision cases: pin an archived decision as a regression case."""


@cases_group.command(name="pin")
@click.argument("ledger", type=_file)
@click.argument("decision_id")
@click.option("--expect", "expect", type=click.Choice(STATES), required=True, help="The corrected decision.")
@click.option("--reason", "reasons", multiple=True, help="A reason code the corrected decision must carry; repeatable.")
@click.option("--to", "to", type=FILE, required=True, help="The case file.")
@click.option("--deployment", help="The deployment (required for a new case file; checked for an existing one).")
@click.option("--case-id", help="The case id [default: pinned-<decision id>].")
def pin_command(
    ledger: Path,
    decision_id: str,
    expect: str,
    reasons: tuple[str, ...],
    to: Path,
    deployment: str | None,
    case_id: str | None,
) -> None:
    """Turn DECISION_ID in LEDGER into a decision case expecting --expect, appended to --to."""
    case = pin(ledger, decision_id, expect=expect, reasons=reasons, to=to, deployment=deployment, case_id=case_id)
    click.echo(f"pinned {case['case_id']} to {to}: expects {expect}")
