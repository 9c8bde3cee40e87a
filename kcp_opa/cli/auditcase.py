"""The auditor's case file and report commands: `audit case`, `audit case verify`, `audit report`.

Thin: the work is in kcp_opa.audit.case, .casecheck and .report; these parse and print.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from kcp_opa.audit.case import build_case
from kcp_opa.audit.casecheck import verify_case
from kcp_opa.audit.caseproofs import TreePins
from kcp_opa.audit.report import WHOLE, page_decisions, pages_of, render_html
from kcp_opa.audit.selection import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, OUTCOMES, parse_selection
from kcp_opa.audit.summary import entries_by_decision, summarize
from kcp_opa.authorize.documents import Receipt
from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.ledgerarg import LEDGER, ledger_snapshot
from kcp_opa.cli.options import DIR, FILE, FORMAT, checkpoints_option, keyring_option, stacked
from kcp_opa.cli.output import EXIT_INVALID, as_json
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.core.signing import load_keyring


class _CaseGroup(click.Group):
    """`audit case LEDGER DECISION_ID ...` gathers; `audit case verify DIR` proves.

    Gathering is the group's default command, so its usage and options are part of the group's
    --help: `audit case --help` teaches how to gather, not only that `verify` exists."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["gather", *args]
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help(ctx, formatter)
        gather = self.commands["gather"]
        with click.Context(gather, info_name=ctx.info_name, parent=ctx.parent) as default:
            formatter.write_paragraph()
            formatter.write_text("Gather a case (the default command; `audit case gather ...` is the same):")
            gather.format_usage(default, formatter)
            gather.format_options(default, formatter)


@click.group(name="case", cls=_CaseGroup)
def audit_case() -> None:
    """A decision case file: `audit case LEDGER DECISION_ID -o DIR`, then `audit case verify DIR`.

    The case holds every entry of the decision, the ledger from seq 1 to a signed checkpoint, the
    archived inputs, the bundle, the trust registry, each signed attestation with its issuer's
    key, and (given --receipt) the receipt: verify proves it offline, one line per check. With
    --proofs it holds only the decision's own entries, each with an inclusion proof to a tree
    checkpoint, instead of the ledger.
    """


@audit_case.command(name="gather", short_help="Write a case directory (the default: `audit case LEDGER DECISION_ID`).")
@click.argument("ledger", type=LEDGER)
@click.argument("decision_id")
@click.option("-o", "--output", required=True, type=DIR, help="New directory.")
@click.option(
    "--bundles", "bundles_dir", type=DIR, default=Path("bundles"), help="The archived bundles [default: bundles]."
)
@click.option("--trust", required=True, type=FILE, help="The bundle's trust registry.")
@keyring_option(
    "Checkpoint keys: its signing key signs a checkpoint of the head (without --checkpoint); its public keys "
    "verify --checkpoint (not needed when --receipt-keyring holds the checkpoint's key)."
)
@checkpoints_option(
    "Signed checkpoint file(s) of this ledger you hold: the newest anchors the case, so `audit case verify "
    "--checkpoint` with the same file passes."
)
@click.option("--receipt", "receipt_path", type=FILE, help="The receipt JSON.")
@click.option("--receipt-keyring", type=FILE, help="The keyring that verifies it.")
@click.option(
    "--proofs",
    is_flag=True,
    help="Carry only the decision's own entries, each with an inclusion proof to a tree checkpoint (no other "
    "decision's data), instead of the ledger from seq 1.",
)
@click.option(
    "--tree-checkpoint",
    type=FILE,
    help="With --proofs: the signed tree checkpoint to prove against (`audit tree-checkpoint`, cosigned or not); "
    "without it --keyring's signing key signs one of the tree now.",
)
@click.option("--log-key", metavar="VKEY", help="With --tree-checkpoint: the log's verifier key (`audit tree-key`).")
@verification_options
def audit_case_gather(
    ledger: Path,
    decision_id: str,
    output: Path,
    bundles_dir: Path,
    trust: Path,
    keyring_path: Path | None,
    checkpoints: Sequence[Path],
    receipt_path: Path | None,
    receipt_keyring: Path | None,
    proofs: bool,
    tree_checkpoint: Path | None,
    log_key: str | None,
    verification_keys: tuple[str, ...],
    verification_scope: str,
) -> None:
    """Write a case directory for DECISION_ID, anchored by a signed checkpoint.

    With --proofs the case holds the decision's own entries (entries/, proofs/, checkpoint.note)
    and stays small at any ledger size; verify then checks the inclusion proofs instead of the
    chain, but cannot show that no entry of the decision was left out.

    The anchor is the newest --checkpoint of this ledger (it must verify and sign the ledger's
    entry at its seq), or else a checkpoint of the head signed now by --keyring's signing key.
    A signed bundle needs --verification-key; the case then carries that public key, so its
    README's commands run as written.
    """
    receipt = Receipt.from_dict(json.loads(receipt_path.read_text(encoding="utf-8"))) if receipt_path else None
    document = build_case(
        ledger,
        decision_id,
        output,
        bundles=bundles_dir,
        trust=trust,
        keyring=load_keyring(keyring_path) if keyring_path is not None else None,
        checkpoints=checkpoints,
        receipt=receipt,
        receipt_keyring=load_keyring(receipt_keyring) if receipt_keyring is not None else None,
        verification=verification_of(verification_keys, verification_scope),
        proofs=proofs,
        tree_checkpoint=tree_checkpoint,
        log_key=log_key,
    )
    at = document["checkpoint_seq"]
    anchored = f"proven in a tree of {at}" if proofs else f"anchored at seq {at}"
    click.echo(f"wrote {output}: {len(document['seqs'])} entries of {decision_id}, {anchored}")


@audit_case.command(name="verify")
@click.argument("directory", type=DIR)
@click.option("--trust", type=FILE, help="Pin: the registry you hold.")
@click.option("--keyring", type=FILE, help="Pin: the checkpoint keys you hold.")
@click.option("--receipt-keyring", type=FILE, help="Pin: the receipt keys you hold.")
@click.option("--checkpoint", type=FILE, help="A newer signed checkpoint you hold: a case cut before it fails.")
@click.option("--expect-head", type=click.IntRange(min=1), help="The head seq you know the ledger reached.")
@click.option("--log-key", metavar="VKEY", help="Pin (a --proofs case): the log's verifier key, or a file holding it.")
@click.option(
    "--witness-key", "witness_keys", multiple=True, metavar="VKEY", help="A witness's verifier key; repeatable."
)
@click.option(
    "--witnesses",
    type=click.IntRange(min=0),
    default=0,
    help="How many --witness-key witnesses must have cosigned a --proofs case's checkpoint.",
)
@click.option("--no-opa", is_flag=True, help="Skip the OPA replay (regopy only); the case is then not fully proved.")
@verification_options
@FORMAT
def audit_case_verify(
    directory: Path,
    trust: Path | None,
    keyring: Path | None,
    receipt_keyring: Path | None,
    checkpoint: Path | None,
    expect_head: int | None,
    log_key: str | None,
    witness_keys: tuple[str, ...],
    witnesses: int,
    no_opa: bool,
    verification_keys: tuple[str, ...],
    verification_scope: str,
    fmt: str | None,
) -> None:
    """Prove a case offline: one line per check; exit 1 on any failure.

    A check that ran only against what the case itself supplies (an unpinned receipt key, no
    newer anchor) prints as `warn`: not a failure, and not a proof. A --proofs case is checked
    against its tree checkpoint's inclusion proofs (lines marked "on entries proven by inclusion").
    """
    checks = verify_case(
        directory,
        trust=trust,
        keyring=keyring,
        with_opa=not no_opa,
        receipt_keyring=receipt_keyring,
        checkpoint=checkpoint,
        expect_head=expect_head,
        verification=verification_of(verification_keys, verification_scope),
        tree_pins=TreePins(log_key, witness_keys, witnesses),
    )
    ok = all(check.ok is not False for check in checks)
    if as_json(fmt):
        render.print_json({"ok": ok, "case": str(directory), "checks": [c.to_dict() for c in checks]})
    else:
        for check in checks:
            mark = "warn" if check.warning else {True: "ok  ", False: "FAIL", None: "n/a "}[check.ok]
            click.echo(f"{mark} {check.name:<21} {check.detail}")
        click.echo(f"{'ok' if ok else 'FAILED'}: case {directory}")
    if not ok:
        sys.exit(EXIT_INVALID)


_FILTERS = [
    ("--since", "From this date (YYYY-MM-DD, included) or RFC 3339 time."),
    ("--until", "Until this date (included) or RFC 3339 time (excluded)."),
    ("--outcome", f"Decisions whose final state or status is this ({', '.join(OUTCOMES)})."),
    ("--agent", "Decisions of this agent."),
    ("--model", "Decisions of this model (the registry's, else the action's)."),
    ("--task-type", "Decisions of this action_type."),
    ("--tenant", "Decisions of this tenant."),
    ("--decision-id", "This decision (or the decision a re-decision id names)."),
    ("--page", "With --html: this page of every list (newest first) instead of every row."),
    ("--per-page", f"With --page: rows per list (1 to {MAX_PAGE_SIZE}) [default: {DEFAULT_PAGE_SIZE}]."),
]


_filter_options = stacked(*(click.option(flag, metavar="VALUE", help=text) for flag, text in _FILTERS))


@click.command(name="report")
@click.argument("ledger", type=LEDGER)
@click.option("--html", "html_path", type=FILE, help="Write the HTML report here.")
@click.option("--trust", type=FILE, help="Trust registry: each approver's roles.")
@_filter_options
@FORMAT
def audit_report(
    ledger: Path, html_path: Path | None, trust: Path | None, fmt: str | None, **given: str | None
) -> None:
    """Decisions by state, reason, agent, model, unit and tenant; approvals; refusals; chain status.

    --html writes one self-contained page (charts inlined as SVG, no network, no scripts);
    without it the counts are printed (json when piped). The filters count one period or the
    decisions of one outcome, agent, model, task type, tenant or id, with every entry that
    belongs to them (the chain is verified whole); the service's /ui/report takes the same
    filters as query parameters.
    """
    from kcp_opa.declare.trust import load_trust

    names = {"task_type": "task_type", "decision_id": "decision", "per_page": "per_page"}
    selection, window = parse_selection((names.get(k, k), v) for k, v in given.items() if v is not None)
    read = ledger_snapshot(ledger)
    registry = load_trust(trust) if trust is not None else None
    summary = summarize(ledger, registry=registry, position=read.position, selection=selection)
    summary.ledger = read.shown
    if html_path is not None:
        paged = window if given.get("page") is not None else WHOLE
        window.check(pages_of(summary, window))
        grouped = entries_by_decision(ledger, only=page_decisions(summary, paged))
        page = render_html(summary, entries_by_decision=grouped, window=paged)
        write_atomically(html_path, page.encode("utf-8"))
        click.echo(f"wrote {html_path}: {summary.decisions} decisions, {summary.entries} entries", err=True)
        return
    if as_json(fmt):
        render.print_json(summary.to_dict())
        return
    chain = "chain intact" if summary.chain_ok else "CHAIN BROKEN"
    scope = f" (filtered: {', '.join(f'{k} {v}' for k, v in selection.given)})" if selection.active else ""
    click.echo(f"{read.shown}: {summary.entries} entries{scope}, {summary.decisions} decisions, {chain}")
    for title, counts in (
        ("state", summary.by_state),
        ("reason", summary.by_reason),
        ("agent", summary.by_agent),
        ("model", summary.by_model),
        ("refusal", summary.refusals),
        ("re-decision step", summary.redecisions_by_step),
    ):
        shown = ", ".join(f"{name} {count}" for name, count in counts.most_common())
        click.echo(f"  by {title}: {shown or 'none'}")
    for seen in summary.policy_timeline:  # the policy versions, in the order the ledger first named them
        first, last = seen["first_seen"], seen["last_seen"]
        click.echo(f"  bundle {seen['revision']}: seq {first['seq']} ({first['timestamp']}) to {last['seq']}")
    for intent in summary.unresolved_intents:
        click.echo(
            f"  intent without an outcome: seq {intent['seq']} key {intent['idempotency_key']} receipt "
            f"{intent['receipt_id']} (the side effect may have run: check it, then `kcp-opa executions reconcile`)"
        )
