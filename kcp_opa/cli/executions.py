"""The executions group: run an action under its receipt; list claims whose lease expired (ambiguous)
and reconcile them.

An ambiguous execution is one whose process died between claiming the idempotency key and
recording the outcome (the side effect may or may not have happened), or whose handler ran but
whose outcome the audit ledger could not record: the executor will not guess (it never runs the
handler twice). An operator checks the target system and records what
happened, with a reference to the evidence; the store keeps the reconciliation, and the audit
ledger gets an entry when ``--ledger`` is given.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
from rich.markup import escape

from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.options import (
    FORMAT,
    action_option,
    file_option,
    keyring_option,
    now_option,
    receipt_option,
    store_option,
)
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, as_json, console, fail, read_text, refusal_line
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.core import strictjson
from kcp_opa.core.errors import ExecutionError, ReceiptVerificationError, StoreError, StoreUnavailableError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import load_keyring
from kcp_opa.decide.action import parse_action
from kcp_opa.decide.gate import decision_time
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.opening import is_database, open_executor_store, shown
from kcp_opa.stores.protocols import ExecutorStore
from kcp_opa.stores.storedtypes import AMBIGUOUS
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger

STORE = store_option("The executor's store: a SQLite file or a postgresql:// database (password in PGPASSWORD).")


def _open(store_path: str) -> ExecutorStore:
    if not is_database(store_path) and not Path(store_path).is_file():
        fail(f"{store_path}: no such executor store", EXIT_USAGE)
    try:
        return open_executor_store(store_path)
    except StoreUnavailableError:
        raise  # an outage: the CLI's one line and exit 5, never a usage error
    except StoreError as exc:
        fail(f"{shown(store_path)}: not an executor store ({exc})", EXIT_USAGE)
        raise  # unreachable: fail exits


@click.group()
def executions() -> None:
    """The executor: run an action under its receipt; list ambiguous claims, reconcile one."""


@executions.command(name="list")
@STORE
@FORMAT
def executions_list(store_path: str, fmt: str | None) -> None:
    """Claims whose lease expired without an outcome, or whose outcome the ledger could not record
    (the note says which; exit 1 when there is any)."""
    try:
        records = _open(store_path).ambiguous_executions()
    except StoreUnavailableError:
        raise  # an outage: the CLI's one line and exit 5, never a usage error
    except StoreError as exc:
        fail(f"{shown(store_path)}: cannot read the executor store ({exc})", EXIT_USAGE)
        raise
    rows = [
        {
            "idempotency_key": r.idempotency_key,
            "receipt_id": r.receipt_id,
            "claimed_at": r.started_at,
            "state": r.state,
            "note": r.error or "lease expired without an outcome",
        }
        for r in records
    ]
    if as_json(fmt):
        render.print_json(rows)
    else:
        out = console()
        out.print(f"{len(rows)} ambiguous execution(s) in {shown(store_path)}")
        for row in rows:
            out.print(
                f"[yellow]{AMBIGUOUS}[/] {row['idempotency_key']} receipt {row['receipt_id']} {row['claimed_at']}: "
                f"{escape(row['note'])}"
            )
    if rows:
        sys.exit(EXIT_INVALID)


@executions.command(name="reconcile")
@click.argument("key")
@click.option("--outcome", required=True, type=click.Choice(["succeeded", "failed"]), help="What really happened.")
@click.option("--evidence", required=True, help="Reference to what shows it (bank statement id, ticket...).")
@STORE
@file_option("--ledger", help="Audit ledger that records the reconciliation (recommended).")
def executions_reconcile(key: str, outcome: str, evidence: str, store_path: str, ledger: Path | None) -> None:
    """Resolve an AMBIGUOUS execution; refused (exit 1) for a key that is not ambiguous."""
    store = _open(store_path)
    try:
        record = store.reconcile(key, outcome, evidence)
    except StoreUnavailableError:
        raise  # an outage: the CLI's one line and exit 5, never a usage error
    except StoreError as exc:
        if exc.code == StoreError.code:  # the store itself failed, not a refused reconciliation
            fail(f"{shown(store_path)}: cannot update the executor store ({exc})", EXIT_USAGE)
        fail(f"{exc} ({exc.code})", EXIT_INVALID)
        raise
    if ledger is not None:
        AuditLedger(ledger).append(
            {
                "type": "execution",
                "timestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "idempotency_key": key,
                "receipt_id": record.receipt_id,
                "action_hash": record.action_hash,
                "reconciled": outcome,
                "evidence": evidence,
                "claimed_at": record.started_at,
            }
        )
    render.print_json({"ok": True, "idempotency_key": key, "state": record.state, "evidence": evidence})


@executions.command(name="run", context_settings={"ignore_unknown_options": True})
@action_option("The action the receipt covers.")
@receipt_option("The signed receipt.")
@keyring_option("Keys that verify receipts (an Ed25519 public keyring is enough).", required=True)
@click.option("--policy-version", "policy_versions", required=True, multiple=True, help="An active policy version.")
@store_option(
    "The executor's store (a SQLite file, created if missing, or a postgresql:// database):"
    " nonces and idempotency keys."
)
@file_option("--bundle", help="With --ledger: the gate's bundle.")
@file_option("--ledger", help="Record the execution in this ledger.")
@now_option("Verification time [default: now].")
@verification_options
@click.argument("handler", nargs=-1, required=True, type=click.UNPROCESSED)
def executions_run(
    action_path: str,
    receipt_path: str,
    keyring_path: Path,
    policy_versions: tuple[str, ...],
    store_path: str,
    bundle: Path | None,
    ledger: Path | None,
    now: str | None,
    verification_keys: tuple[str, ...],
    verification_scope: str,
    handler: tuple[str, ...],
) -> None:
    """Execute an action under its receipt, at most once: verify, consume, then run HANDLER.

    HANDLER is a command (after `--`) that performs the side effect: it gets the action as JSON
    on stdin and prints its outcome as JSON on stdout; a non-zero exit is a failed execution.
    A receipt is consumed once (a second use is refused: `replay`); another valid receipt for the
    same idempotency key returns the recorded outcome without running HANDLER again. Refusals
    and failures print a JSON error on stderr and exit 1.

      kcp-opa executions run --action a.json --receipt r.json --keyring pub.json \\
        --policy-version 1.0.0 --store exec.db -- ./pay.sh
    """
    if (ledger is None) != (bundle is None):
        fail("--ledger and --bundle go together (the ledger's entries name the bundle)", EXIT_USAGE)
    action = parse_action(read_text(action_path, "action"))
    try:
        receipt = strictjson.loads(read_text(receipt_path, "receipt"))
    except (ValueError, RecursionError) as exc:
        fail(f"receipt {receipt_path} is not valid JSON: {exc}", EXIT_INVALID)
    audit = None
    if ledger is not None and bundle is not None:
        verification = verification_of(verification_keys, verification_scope)
        audit = AuditTrail(AuditLedger(ledger), read_bundle(bundle, verification=verification))
    executor = Executor(
        keyring=load_keyring(keyring_path),
        policy_versions=set(policy_versions),
        store=open_executor_store(store_path),
        audit=audit,
    )
    try:
        result = executor.execute_authorized_action(
            action, receipt, _command_handler(handler), now=decision_time(now) if now else None
        )
    except (ReceiptVerificationError, ExecutionError) as exc:
        refusal_line(str(exc), exc.code)
        sys.exit(EXIT_INVALID)
    render.print_json(
        {
            "ok": True,
            "idempotency_key": result.idempotency_key,
            "receipt_id": result.receipt_id,
            "replayed": result.replayed,
            "outcome": result.outcome,
        }
    )


def _command_handler(command: tuple[str, ...]) -> Callable[[JsonObject], object]:
    """The side effect as a process: the action on stdin, its JSON outcome on stdout."""

    def run(action: JsonObject) -> object:
        try:
            proc = subprocess.run(  # the operator's own handler command, no shell
                list(command), input=json.dumps(dict(action)), capture_output=True, text=True, check=False
            )
        except OSError as exc:
            raise RuntimeError(f"cannot run {command[0]}: {exc}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"{command[0]} exited {proc.returncode}: {proc.stderr.strip()[:300]}")
        try:
            return json.loads(proc.stdout)
        except ValueError:
            raise RuntimeError(f"{command[0]} did not print JSON: {proc.stdout.strip()[:300]}") from None

    return run
