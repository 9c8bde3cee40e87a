"""`kcp-opa generate`: the files kcp-opa derives from the policies, written or checked."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.options import FORMAT, dir_option, file_option
from kcp_opa.cli.output import EXIT_INVALID, as_json, console
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.compile.evaluatorgen import GENERATED, stale, write_union
from kcp_opa.compile.referencegen import reference_stale, render_reference
from kcp_opa.core.jsonread import JsonDict


@click.command(name="generate")
@dir_option(
    "--policies",
    default=Path("policies"),
    show_default=True,
    help="The policies tree (holding VERSION and kcp/evaluators/).",
)
@file_option("--reference", help="Also the reference (docs/reference.md) generated from the policies and the schemas.")
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 when a generated file is stale.")
@FORMAT
def generate(policies: Path, reference: Path | None, check_only: bool, fmt: str | None) -> None:
    """Write the gate's findings union (kcp/gate/evaluators.rego) from the evaluators' METADATA.

    Run it after adding, renaming or removing an evaluator under kcp/evaluators/
    (docs/extending.md); `kcp-opa check` and `kcp-opa compile` refuse a stale union. With
    --reference, also the reference of states, reason codes, action types, flags and controls
    (`make docs`).
    """
    reports = [_union(policies, check_only)]
    if reference is not None:
        reports.append(_reference(policies, reference, check_only))
    if as_json(fmt):
        render.print_json(reports[0] if len(reports) == 1 else reports)
    else:
        for report in reports:
            shown = (
                (report["reason"] or "up to date") if check_only else ("written" if report["written"] else "unchanged")
            )
            console().print(f"{report['file']}: {shown}", highlight=False)
    if check_only and any(r["stale"] for r in reports):
        sys.exit(EXIT_INVALID)


def _union(policies: Path, check_only: bool) -> JsonDict:
    target = str(policies / GENERATED)
    if check_only:
        reason = stale(policies)
        return {"file": target, "stale": reason is not None, "reason": reason}
    return {"file": target, "written": write_union(policies)}


def _reference(policies: Path, target: Path, check_only: bool) -> JsonDict:
    if check_only:
        reason = reference_stale(policies, target)
        return {"file": str(target), "stale": reason is not None, "reason": reason}
    text = render_reference(policies).encode("utf-8")
    changed = not target.is_file() or target.read_bytes() != text
    if changed:
        write_atomically(target, text)
    return {"file": str(target), "written": changed}
