"""Human-readable views (rich) of reports, effective units and bundles; JSON is the other view."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from kcp_opa.compile.compiler import CompileResult
from kcp_opa.core.jsonread import JsonObject, items, mapping, objects, strings
from kcp_opa.declare.diagnostics import Diagnostic, Report
from kcp_opa.declare.effective import EffectiveUnit


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def _diagnostic_line(d: Diagnostic) -> str:
    colour = {"error": "red", "warning": "yellow"}.get(d.severity.value, "cyan")
    return f"  [{colour}]{d.severity.value}[/{colour}] {escape(d.location)}: {escape(d.message)} [dim]({d.code})[/dim]"


def escape(text: str) -> str:
    return text.replace("[", "\\[")


def reports(console: Console, items: Sequence[Report[Any]]) -> None:
    for report in items:
        mark = "[green]valid[/green]" if report.valid else "[red]invalid[/red]"
        counts = ", ".join(f"{v} {k.removesuffix('_count').replace('_', ' ')}s" for k, v in report.counts.items())
        console.print(f"[bold]{escape(report.file)}[/bold]: {mark} ({counts})")
        for d in (*report.errors, *report.warnings, *report.notes):
            console.print(_diagnostic_line(d), highlight=False)
    invalid = sum(not r.valid for r in items)
    warnings = sum(len(r.warnings) for r in items)
    notes = sum(len(r.notes) for r in items)
    summary = f"{len(items)} file(s): {len(items) - invalid} valid, {invalid} invalid, {warnings} warning(s)"
    summary += f", {notes} note(s)" if notes else ""
    console.print(f"[{'red' if invalid else 'green'}]{summary}[/]")


def effective(console: Console, unit: EffectiveUnit, unenforced: Sequence[Diagnostic] = ()) -> None:
    table = Table(title=f"{unit.project} / {unit.unit_id}: effective unit", title_justify="left")
    table.add_column("field", style="bold", overflow="fold")
    table.add_column("value", overflow="fold")
    table.add_column("from", style="cyan")
    for name, sourced in unit.fields.items():
        value = sourced.value
        shown = "—" if value is None else json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
        table.add_row(name, escape(shown), sourced.source)
    console.print(table)
    if unenforced:
        console.print("[bold]declared but not enforced by the gate:[/bold]")
    for d in unenforced:
        console.print(_diagnostic_line(d), highlight=False)


def compiled(console: Console, result: CompileResult) -> None:
    for d in result.warnings:
        console.print(_diagnostic_line(d), highlight=False)
    table = Table(title=f"bundle {result.output}", title_justify="left", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    rows = {
        "revision": result.revision,
        "sha256": result.sha256,
        "size": f"{result.size:,} bytes",
        "units": f"{result.unit_count:,}",
        "matrix cells": f"{result.cell_count:,}",
        "rego modules": str(result.module_count),
        "policy version": result.policy_version,
    }
    for key, value in rows.items():
        table.add_row(key, value)
    for entry in result.unenforced:
        table.add_row("unenforced", escape(f"{entry.at} ({entry.code}): {entry.reason}"))
    console.print(table)


def bundle_summary(console: Console, manifest: JsonObject, sha256: str, source: str) -> None:
    meta = mapping(mapping(manifest.get("metadata")).get("kcp_opa"))
    table = Table(title=f"{source}", title_justify="left", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("revision", str(manifest.get("revision")))
    table.add_row("sha256", sha256)
    table.add_row("roots", ", ".join(strings(manifest.get("roots"))))
    table.add_row("policy version", str(meta.get("policy_version")))
    for m in objects(meta.get("manifests")):
        table.add_row("manifest", f"{m['project']} {m.get('version') or ''} ({m['unit_count']} units, {m['file']})")
    matrix = mapping(meta.get("matrix"))
    table.add_row("matrix", f"{matrix.get('name')} {matrix.get('version')} ({matrix.get('cell_count')} cells)")
    table.add_row("entrypoints", ", ".join(strings(meta.get("entrypoints"))) or "—")
    evaluators = mapping(meta.get("evaluators"))
    table.add_row("evaluators", ", ".join(f"{k}@{v}" for k, v in evaluators.items()) or "—")
    table.add_row("packages", ", ".join(strings(meta.get("packages"))))
    for entry in objects(meta.get("unenforced")):
        table.add_row("unenforced", escape(f"{entry.get('at')} ({entry.get('code')}): {entry.get('reason')}"))
    console.print(table)


def decision(console: Console, document: JsonObject) -> None:
    """One decision for a person: the verdict first, then why, then what is still needed."""
    allowed = document.get("execution_allowed") is True
    style = "green" if allowed else "red" if document.get("decision") == "DENY" else "yellow"
    console.print(
        f"[bold {style}]{document.get('decision')}[/] risk {document.get('risk_level')}, "
        f"{document.get('authorization_status')}, execution {'allowed' if allowed else 'not allowed'}",
        highlight=False,
    )
    for reason in objects(document.get("reasons")):
        console.print(f"  {escape(str(reason.get('code')))}: {escape(str(reason.get('message')))}", highlight=False)
    for key in ("missing_controls", "satisfied_controls", "approver_roles", "obligations"):
        values = items(document.get(key))
        if values:
            shown = ", ".join(escape(v if isinstance(v, str) else json.dumps(v)) for v in values)
            console.print(f"  {key.replace('_', ' ')}: {shown}", highlight=False)
    for key in ("decision_id", "action_hash", "bundle_revision", "policy_version"):
        console.print(f"  {key}: {document.get(key)}", highlight=False)
