"""The auditor's commands: the audit group (verify, checkpoint, export, replay, query) and ropa."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console

from kcp_opa.audit.auditor import export_decision, query, replay
from kcp_opa.audit.ropa import build_ropa, to_markdown, to_text
from kcp_opa.audit.rows import row
from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.keyarg import signer_from
from kcp_opa.cli.ledgerarg import LEDGER, ledger_line, shown_ledger
from kcp_opa.cli.options import (
    ANY_PATH,
    DIR,
    FILE,
    FORMAT,
    MAX_BYTES,
    bundles_option,
    checkpoints_option,
    keyring_option,
    signing_key_option,
)
from kcp_opa.cli.output import EXIT_INVALID, as_json, console, fail
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, load_keyring
from kcp_opa.declare.exceptionfile import validate_exceptions
from kcp_opa.declare.manifest import load_manifest
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoints
from kcp_opa.trail.ledger import kept_tree_root, verify_ledger


@click.command()
@click.argument("manifests", nargs=-1, required=True, type=ANY_PATH)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "markdown", "text"]),
    default=None,
    help="json for tools, markdown for a wiki or a ticket, text for a terminal (values never cut). "
    "Default: text on a terminal, json when piped.",
)
@click.option("-o", "--output", type=FILE, help="Write here instead of stdout.")
@click.option(
    "--exceptions",
    type=FILE,
    help="A kcp-opa/exceptions file: each record lists the exceptions in force for its unit.",
)
@MAX_BYTES
def ropa(
    manifests: Sequence[Path], fmt: str | None, output: Path | None, exceptions: Path | None, max_bytes: int
) -> None:
    """GDPR Article 30 records of processing from KCP manifests (one record per personal-data unit).

    The controller is the manifest's trust.provenance.publisher; special categories need
    compliance.article_9_condition (any Art. 9(2) condition, docs/auditing.md). Units missing a
    field get "not declared" and a warning on stderr, never a silent gap. With --exceptions, each
    record lists the waivers in force for its unit (verify them with `kcp-opa exceptions check`).
    """
    if fmt is None:
        fmt = "json" if output is not None or as_json(None) else "text"
    loaded = [load_manifest(path, max_bytes=max_bytes) for path in manifests]
    held = validate_exceptions(exceptions, max_bytes=max_bytes) if exceptions is not None else None
    if held is not None and held.document is None:
        fail(f"{exceptions}: not a valid exceptions file (kcp-opa validate {exceptions} names the lines)", EXIT_INVALID)
    records = build_ropa(loaded, held.document.exceptions if held is not None and held.document else ())
    renderers = {"markdown": to_markdown, "text": to_text}
    text = renderers[fmt](records) if fmt in renderers else json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    for warning in records["warnings"]:
        click.echo(f"kcp-opa: warning: {warning}", err=True)
    if output is not None:
        write_atomically(output, text.encode("utf-8"))
    else:
        click.echo(text, nl=False)


@click.group()
def audit() -> None:
    """The auditor's tools over a ledger written by the gate (verify, export, replay, query)."""


def _expect_head(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, str] | None:
    """--expect-head SEQ:HASH, checked at parse time (a malformed anchor is a usage error)."""
    if value is None:
        return None
    seq, _, digest = value.partition(":")
    if not seq.isdigit() or int(seq) < 1 or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise click.BadParameter("expected SEQ:sha256:<64 hex>, as `audit verify` prints the head")
    return int(seq), digest


@audit.command(name="verify")
@click.argument("ledger", type=LEDGER)
@checkpoints_option(
    "Signed checkpoint file(s) (kept off-box); the chain must contain each one's head. Needs --keyring."
)
@keyring_option("The writer's keys (public ones suffice): checkpoints and every entry's writer signature are checked.")
@click.option(
    "--writer",
    metavar="KID",
    help="The writer kid the ledger must be bound to (its header names it, it signs every entry). Needs --keyring.",
)
@click.option(
    "--allow-unbound",
    is_flag=True,
    help="With --keyring, accept a ledger whose header names no writer (only its chain and anchors are checked).",
)
@click.option("--expect-head", callback=_expect_head, metavar="SEQ:HASH", help="The chain must contain this entry.")
@FORMAT
def audit_verify(
    ledger: Path,
    checkpoints: Sequence[Path],
    keyring_path: Path | None,
    writer: str | None,
    allow_unbound: bool,
    expect_head: tuple[int, str] | None,
    fmt: str | None,
) -> None:
    """Check the hash chain and every line; report the first break with its line number (exit 1).

    Prints the head it verified (SEQ:HASH): keep it, or a signed `audit checkpoint`, off-box;
    with --checkpoint/--expect-head a later cut, re-chained tail or regenerated file is caught.
    With --keyring, a ledger whose writer signs its entries has each signature checked: an
    entry appended without the writer's key is reported as a foreign entry. With --keyring
    the ledger must be bound to a writer (to --writer's, if given): a header without
    `entry_auth`, or no header, fails unless --allow-unbound. An empty ledger is not ok.
    """
    if writer is not None and keyring_path is None:
        raise click.UsageError("--writer needs --keyring (the writer's public key)")
    if writer is not None and allow_unbound:
        raise click.UsageError("--writer and --allow-unbound contradict each other")
    keyring = load_keyring(keyring_path) if keyring_path is not None else None
    anchors, ledger_id, tree_roots = _anchors(checkpoints, keyring)
    tree_roots.update(kept_tree_root(ledger))
    if expect_head is not None:
        anchors.append(expect_head)
    conflicting = {seq for seq, digest in anchors if dict(anchors)[seq] != digest}
    if conflicting:
        fail(f"the anchors disagree about seq {min(conflicting)}", EXIT_INVALID)
    report = verify_ledger(
        ledger,
        anchors=anchors,
        ledger_id=ledger_id,
        keyring=keyring,
        writer=writer,
        allow_unbound=allow_unbound,
        tree_roots=tree_roots,
    )
    document = {
        "ledger": shown_ledger(ledger),
        "ok": report.ok,
        "entries": report.entries,
        "head": report.head,
        "ledger_id": report.ledger_id,
        "header": report.headed,
        "anchors": [f"{seq}:{digest}" for seq, digest in report.anchors],
        "torn_tail": report.torn_tail,
        "writer": report.writer,
        "entries_authenticated": report.authenticated,
        "tree_root": report.tree_root,
        "problems": [{"line": p.line, "message": p.message} for p in report.problems],
    }
    if as_json(fmt):
        render.print_json(document)
    else:
        out = console()
        if report.ok:
            anchored = f", {len(report.anchors)} anchor(s) hold" if report.anchors else ""
            where = shown_ledger(ledger)
            out.print(f"[green]ok[/] {where}: {report.entries} entries, chain intact{anchored}, head {report.head}")
            if report.writer is not None and not report.authenticated:
                out.print(f"[yellow]note[/] entries are signed by writer {report.writer}: give --keyring to check them")
            if report.writer is None:
                out.print("[yellow]warning[/] unbound: the header names no writer key; no entry is authenticated")
        for problem in report.problems:
            verified = f"{report.entries} entries verified before it"
            out.print(f"[red]broken[/] {ledger_line(ledger, problem.line)}: {problem.message} ({verified})")
    if not report.ok:
        sys.exit(EXIT_INVALID)


def _anchors(
    checkpoints: Sequence[Path], keyring: Keyring | None
) -> tuple[list[tuple[int, str]], str | None, dict[int, str]]:
    """(seq, hash) of every checkpoint after its signature verified; the ledger_id they name; their tree roots."""
    if not checkpoints:
        return [], None, {}
    if keyring is None:
        raise click.UsageError("--checkpoint needs --keyring (the key that signed it)")
    anchors: list[tuple[int, str]] = []
    roots: dict[int, str] = {}
    ids: set[str | None] = set()
    for path in checkpoints:
        for checkpoint in read_checkpoints(path):
            try:
                checkpoint.verify(keyring)
            except LedgerError as exc:
                fail(f"{path}: {exc}", EXIT_INVALID)
            anchors.append((checkpoint.seq, checkpoint.entry_hash))
            ids.add(checkpoint.ledger_id)
            if checkpoint.tree_root is not None:
                roots[checkpoint.seq] = checkpoint.tree_root
    if len(ids) > 1:
        fail("the checkpoints name different ledgers", EXIT_INVALID)
    return anchors, ids.pop(), roots


@audit.command(name="checkpoint")
@click.argument("ledger", type=LEDGER)
@keyring_option("Keyring whose signing key (Ed25519 or HMAC via secret_env) signs the checkpoint.")
@signing_key_option()
@click.option(
    "--allow-unbound",
    is_flag=True,
    help="Sign the chain head of a ledger whose header names no writer (its entries are not authenticated).",
)
@click.option("-o", "--output", type=FILE, help="Write here, not stdout.")
def audit_checkpoint(
    ledger: Path, keyring_path: Path | None, signing_key: str | None, allow_unbound: bool, output: Path | None
) -> None:
    """Sign the head of a verified ledger (ledger_id, seq, entry_hash, time) for off-box keeping.

    Only the writer's own ledger is signed, as the writer itself would extend it: the header
    must name the signing key and every entry must carry its signature. Refused (exit 1)
    otherwise, and when the chain is broken. --allow-unbound signs the chain head of a ledger
    whose header names no writer (never one bound to another key).
    """
    key = signer_from(signing_key, keyring_path)
    keyring = Keyring({key.kid: key})
    # with --allow-unbound a bound ledger is still checked against this key alone (kid and signatures)
    writer = None if allow_unbound else key.kid
    report = verify_ledger(ledger, keyring=keyring, writer=writer, allow_unbound=allow_unbound)
    if not report.ok:
        problem = report.problems[0]
        fail(f"{ledger_line(ledger, problem.line)}: {problem.message}; not signing it", EXIT_INVALID)
    checkpoint = Checkpoint.sign(report.ledger_id, report.head_seq, report.head_hash, key)
    text = json.dumps(checkpoint.to_dict(), indent=2, sort_keys=True) + "\n"
    if output is not None:
        write_atomically(output, text.encode("utf-8"))
    else:
        click.echo(text, nl=False)


@audit.command(name="export")
@click.argument("ledger", type=LEDGER)
@click.option("--decision-id", required=True, help="The decision to export.")
@click.option(
    "--seq", type=click.IntRange(min=1), help="Which of its entries, when the decision has several (see audit query)."
)
@bundles_option("Where to find the bundle revision the decision names.")
@click.option(
    "-o", "--output", required=True, type=DIR, help="Directory for input.json, result.json, the bundle and a README."
)
@verification_options
def audit_export(
    ledger: Path,
    decision_id: str,
    seq: int | None,
    bundles_dir: Path,
    output: Path,
    verification_keys: tuple[str, ...],
    verification_scope: str,
) -> None:
    """Export one decision entry so it can be re-run with `opa eval -b bundle.tar.gz -i input.json`.

    A decision with several entries (re-evaluated as controls arrived) needs --seq: export never
    picks one silently. `audit case` gathers them all, with the evidence, and proves them. Only
    the bundle file whose sha256 the decision names is exported; another with its revision is refused.
    """
    verification = verification_of(verification_keys, verification_scope)
    out = export_decision(ledger, decision_id, bundles_dir, output, seq=seq, verification=verification)
    render.print_json({"ok": True, "output": str(out), "files": sorted(p.name for p in out.iterdir())})


@audit.command(name="replay")
@click.argument("ledger", type=LEDGER)
@bundles_option("Directory of bundles; each decision is replayed with the revision it names.")
@click.option("--no-opa", is_flag=True, help="Replay on regopy only (default: also on the OPA reference if installed).")
@verification_options
@FORMAT
def audit_replay(
    ledger: Path,
    bundles_dir: Path,
    no_opa: bool,
    verification_keys: tuple[str, ...],
    verification_scope: str,
    fmt: str | None,
) -> None:
    """Re-evaluate every archived decision and report any that does not reproduce (exit 1).

    Each decision is replayed with the bundle file whose sha256 its entry names; a bundle that
    claims the entry's revision with other bytes is refused (exit 2, one line).
    """
    verification = verification_of(verification_keys, verification_scope)
    report = replay(ledger, bundles_dir, with_opa=not no_opa, verification=verification)
    if as_json(fmt):
        render.print_json(report.to_dict())
    else:
        out = console()
        counts = ", ".join(f"{engine} {count}" for engine, count in sorted(report.reproduced.items()))
        out.print(f"{report.decisions} decisions; reproduced: {counts or 'none'}")
        for item in report.mismatches:
            why = f" ({item['reason']})" if item.get("reason") else ""
            out.print(f"[red]differs[/] line {item['line']} {item['decision_id']} on {item['engine']}{why}")
        for revision, count in report.missing_bundles.items():
            out.print(f"[red]missing bundle[/] revision {revision} ({count} decisions)")
        for erased in report.erased_unverifiable:
            out.print(f"[yellow]erased[/] {erased}: content erased under no-logging; not reproducible")
    if not report.ok:
        sys.exit(EXIT_INVALID)


@audit.command(name="query")
@click.argument("ledger", type=LEDGER)
@click.option("--unit", help="project/unit or unit id.")
@click.option("--agent", help="agent_id.")
@click.option("--model", help="runtime model id.")
@click.option("--decision", help="Routing state, e.g. DENY.")
@click.option("--decision-id", help="One decision: its entries and the refusals of evidence for it.")
@click.option("--principal", help="The service principal (or, for gate entries, the agent).")
@click.option("--code", help="Refusal code, e.g. replay or not_authorized.")
@click.option(
    "--type",
    "event_type",
    type=click.Choice(["decision", "control", "receipt", "intent", "execution", "failure", "note"]),
)
@click.option("--since", metavar="RFC3339", help="From this time (UTC, e.g. 2026-11-29T00:00:00Z).")
@click.option("--until", metavar="RFC3339", help="Up to this time.")
@FORMAT
def audit_query(ledger: Path, fmt: str | None, **filters: str | None) -> None:
    """Entries matching every filter: "every action by model X on unit Y" is one command.

    Text shows one row per entry (decision id whole; who acted, what, and the detail folded to
    the terminal's width); json keeps every field.
    """
    entries = query(ledger, **filters)
    if as_json(fmt):
        render.print_json(entries)
        return
    width = int(os.environ.get("COLUMNS", "0") or 0) or 100
    out = Console(highlight=False) if sys.stdout.isatty() else Console(width=width, highlight=False)
    out.print(f"{len(entries)} entries in {shown_ledger(ledger)}", markup=False)
    for entry in entries:
        cells = row(entry)
        head = f"{cells['seq']:>5}  {cells['time']}  {cells['type']:<9} {cells['decision_id']}"
        out.print(head.rstrip(), markup=False)
        said = " · ".join(cells[name] for name in ("who", "what", "detail") if cells[name])
        out.print(
            textwrap.fill(said, width=max(out.width, 40), initial_indent=" " * 7, subsequent_indent=" " * 7),
            markup=False,
        )


@audit.command(name="shadow-report")
@click.argument("ledger", type=LEDGER)
@click.option("--format", "fmt", type=click.Choice(["json", "markdown"]), default="json", show_default=True)
def audit_shadow_report(ledger: Path, fmt: str) -> None:
    """Summarise what a shadowed candidate bundle would have changed: how many decisions, from what
    to what, which weaken, with examples (the `shadow` entries a gate with a shadow writes)."""
    from kcp_opa.audit.shadowreport import shadow_report, to_markdown

    report = shadow_report(ledger)
    if fmt == "markdown":
        click.echo(to_markdown(report), nl=False)
    else:
        render.print_json(report)
