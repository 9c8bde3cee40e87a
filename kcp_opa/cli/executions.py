"""The executions group: list claims whose lease expired (ambiguous) and reconcile them.

An ambiguous execution is one whose process died between claiming the idempotency key and
recording the outcome: the side effect may or may not have happened, and the executor will not
guess (it never runs the handler twice). An operator checks the target system and records what
happened, with a reference to the evidence; the store keeps the reconciliation, and the audit
ledger gets an entry when ``--ledger`` is given.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import sys
from pathlib import Path

import click

from kcp_opa.authorize.store import AMBIGUOUS, SQLiteStore
from kcp_opa.cli import render
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, FORMAT, as_json, console, fail
from kcp_opa.core.errors import StoreError
from kcp_opa.trail.ledger import AuditLedger

STORE = click.option(
    "--store",
    "store_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The executor's SQLite store.",
)


def _open(store_path: Path) -> SQLiteStore:
    if not store_path.is_file():
        fail(f"{store_path}: no such executor store", EXIT_USAGE)
    try:
        return SQLiteStore(store_path)
    except sqlite3.Error as exc:
        fail(f"{store_path}: not an executor store ({exc})", EXIT_USAGE)
        raise  # unreachable: fail exits


@click.group()
def executions() -> None:
    """The executor's claims: list the ambiguous ones, reconcile one with evidence."""


@executions.command(name="list")
@STORE
@FORMAT
def executions_list(store_path: Path, fmt: str | None) -> None:
    """Claims whose lease expired without an outcome (exit 1 when there is any)."""
    try:
        records = _open(store_path).ambiguous_executions()
    except sqlite3.Error as exc:
        fail(f"{store_path}: cannot read the executor store ({exc})", EXIT_USAGE)
        raise
    rows = [
        {"idempotency_key": r.idempotency_key, "receipt_id": r.receipt_id, "claimed_at": r.started_at, "state": r.state}
        for r in records
    ]
    if as_json(fmt):
        render.print_json(rows)
    else:
        out = console()
        out.print(f"{len(rows)} ambiguous execution(s) in {store_path}")
        for row in rows:
            out.print(
                f"[yellow]{AMBIGUOUS}[/] {row['idempotency_key']} receipt {row['receipt_id']} {row['claimed_at']}"
            )
    if rows:
        sys.exit(EXIT_INVALID)


@executions.command(name="reconcile")
@click.argument("key")
@click.option("--outcome", required=True, type=click.Choice(["succeeded", "failed"]), help="What really happened.")
@click.option("--evidence", required=True, help="Reference to what shows it (bank statement id, ticket...).")
@STORE
@click.option(
    "--ledger",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Audit ledger that records the reconciliation (recommended).",
)
def executions_reconcile(key: str, outcome: str, evidence: str, store_path: Path, ledger: Path | None) -> None:
    """Resolve an AMBIGUOUS execution; refused (exit 1) for a key that is not ambiguous."""
    store = _open(store_path)
    try:
        record = store.reconcile(key, outcome, evidence)
    except StoreError as exc:
        fail(f"{exc} ({exc.code})", EXIT_INVALID)
        raise
    except sqlite3.Error as exc:
        fail(f"{store_path}: cannot update the executor store ({exc})", EXIT_USAGE)
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
