"""`kcp-opa generate`: the files kcp-opa derives from the policies, written or checked."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.output import EXIT_INVALID, FORMAT, as_json, console
from kcp_opa.compile.evaluatorgen import GENERATED, stale, write_union


@click.command(name="generate")
@click.option(
    "--policies",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("policies"),
    show_default=True,
    help="The policies tree (holding VERSION and kcp/evaluators/).",
)
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 when a generated file is stale.")
@FORMAT
def generate(policies: Path, check_only: bool, fmt: str | None) -> None:
    """Write the gate's findings union (kcp/gate/evaluators.rego) from the evaluators' METADATA.

    Run it after adding, renaming or removing an evaluator under kcp/evaluators/
    (docs/extending.md); `kcp-opa check` and `kcp-opa compile` refuse a stale union.
    """
    target = str(policies / GENERATED)
    if check_only:
        reason = stale(policies)
        report = {"file": target, "stale": reason is not None, "reason": reason}
    else:
        report = {"file": target, "written": write_union(policies)}
    if as_json(fmt):
        render.print_json(report)
    elif check_only:
        console().print(f"{target}: {report['reason'] or 'up to date'}", highlight=False)
    else:
        console().print(f"{target}: {'written' if report['written'] else 'unchanged'}", highlight=False)
    if check_only and report["stale"]:
        sys.exit(EXIT_INVALID)
