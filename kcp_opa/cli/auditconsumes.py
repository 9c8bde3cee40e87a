"""``audit prove-consumed``, ``verify-consumed`` and ``verify-consumes``: one-time use, checked without the log.

A tree checkpoint (``audit tree-checkpoint``) commits to the index of consumed receipts
(``kcp_opa.trail.consumes``). ``prove-consumed`` writes what shows how often one receipt was
consumed up to that checkpoint, with its consume and outcome entries; ``verify-consumed`` checks
it with only the proof, the checkpoint and the keys (exit 1 when the receipt was consumed more
than once, or anything fails); ``verify-consumes`` is the monitor's check, with the ledger: the
index the checkpoint signs is the one its entries give.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from kcp_opa.cli import render
from kcp_opa.cli.auditproofs import checkpoint_options, opened, read_proof, refusals, unsigned, write_output
from kcp_opa.cli.ledgerarg import LEDGER
from kcp_opa.cli.options import FILE, keyring_option
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import load_keyring
from kcp_opa.trail.consumeproofs import index_problem, prove_consumed, verify_consumed
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.proofs import matching


@click.command(name="prove-consumed")
@click.argument("ledger", type=LEDGER)
@click.argument("receipt_id")
@click.option("--checkpoint", "checkpoint_path", type=FILE, required=True, help="The tree checkpoint to prove against.")
@click.option("--origin", help="The tree's name, when the checkpoint was made with --origin.")
@click.option("-o", "--output", type=FILE, help="Write the proof here, not stdout.")
@refusals
def prove_consumed_command(
    ledger: Path, receipt_id: str, checkpoint_path: Path, origin: str | None, output: Path | None
) -> None:
    """Write the proof (JSON) of how often RECEIPT_ID was consumed up to the checkpoint, and how it ended.

    It holds the receipt's leaf of the consume index the checkpoint signs, the leaves beside it,
    and its intent (the consume), execution and failure entries, each with an inclusion proof.
    Refused when the ledger no longer gives the checkpoint's root or its consume index. Check it
    with `audit verify-consumed`, without the ledger.
    """
    tree = LedgerTree.read(ledger, origin, receipt=receipt_id)
    document = prove_consumed(tree, receipt_id, unsigned(checkpoint_path))
    write_output(output, (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


@click.command(name="verify-consumed")
@click.argument("proof", type=FILE)
@click.argument("receipt_id")
@click.option("--checkpoint", "checkpoint_path", type=FILE, required=True, help="The checkpoint the proof is for.")
@checkpoint_options
@keyring_option("The writer's public keys: with --writer, every entry's writer signature must verify.")
@click.option("--writer", help="The writer kid whose signature the entries must carry. Needs --keyring.")
@refusals
def verify_consumed_command(
    proof: Path,
    receipt_id: str,
    checkpoint_path: Path,
    log_key: str,
    witness_keys: tuple[str, ...],
    witnesses: int,
    keyring_path: Path | None,
    writer: str | None,
) -> None:
    """Check offline that RECEIPT_ID was consumed at most once up to the checkpoint (exit 1 otherwise).

    Shows the consume's seq (none: never consumed) and the outcomes proven. What it rests on:
    the log key (and --witnesses K cosigners) signed the checkpoint and its consume index; that
    the index was built from the whole log is the log's claim, which `audit verify-consumes`
    checks with the ledger.
    """
    if (writer is None) != (keyring_path is None):
        raise click.UsageError("--writer and --keyring go together (the writer's kid and its public key)")
    keyring = load_keyring(keyring_path) if keyring_path is not None else None
    verified = opened(checkpoint_path, log_key, witness_keys, witnesses)
    shown = verify_consumed(read_proof(proof), verified.checkpoint, receipt_id, keyring, writer)
    render.print_json({"ok": True, **shown, "cosigned_by": sorted(verified.cosigned), "writer": writer})


@click.command(name="verify-consumes")
@click.argument("ledger", type=LEDGER)
@click.option("--checkpoint", "checkpoint_path", type=FILE, required=True, help="The tree checkpoint to check.")
@checkpoint_options
@click.option("--origin", help="The tree's name, when the checkpoint was made with --origin.")
@refusals
def verify_consumes_command(
    ledger: Path, checkpoint_path: Path, log_key: str, witness_keys: tuple[str, ...], witnesses: int, origin: str | None
) -> None:
    """The monitor's check: the checkpoint's root and consume index are the ledger's, no receipt consumed twice.

    Exit 1 when the index the checkpoint signs hides, adds or changes a consume, or when a
    receipt was consumed more than once up to it.
    """
    verified = opened(checkpoint_path, log_key, witness_keys, witnesses)
    tree = LedgerTree.read(ledger, origin)
    matching(tree, verified.checkpoint)
    problem = index_problem(tree, verified.checkpoint)
    if problem is not None:
        raise LedgerError(problem)
    size = verified.checkpoint.size
    consumed = {r: [q for q in s if q <= size] for r, s in tree.consumes.items()}
    consumed = {r: s for r, s in consumed.items() if s}
    twice = sorted(r for r, s in consumed.items() if len(s) > 1)
    if twice:
        shown = ", ".join(f"{r} (seqs {', '.join(map(str, consumed[r]))})" for r in twice)
        raise LedgerError(f"receipts consumed more than once up to seq {size}: {shown}")
    render.print_json({"ok": True, "tree_size": size, "receipts_consumed": len(consumed)})


COMMANDS = (prove_consumed_command, verify_consumed_command, verify_consumes_command)
