"""Behaviour tests that kill the Python mutants that survived the suite (issue 18, "Why").

Durability is observed, not assumed: the store's pragmas are read back from the connection it
uses, and the ledger's fsync is seen on the ledger file's own descriptor. Executions crash in
a real child process. Each test names the mutant it kills.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import trustkit
from conftest import receipt_for

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.store import SQLiteStore
from kcp_opa.core.errors import ExecutionError, ReceiptIssueError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.execute.executor import Executor
from kcp_opa.trail.ledger import AuditLedger, read_entries

KYA = trustkit.KYA
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
LATER = ISSUED + dt.timedelta(seconds=30)
SECRET = b"kya-receipt-secret-0123456789abcdef"


def _approve(desk: ControlDesk, action: dict[str, Any]) -> GateDecision:
    record = trustkit.approve_all(desk, action)
    assert record.decision.authorization_status.value == "APPROVED"
    return record


def _executor(path: Path) -> Executor:
    key = hmac_key("kya-1", SECRET)
    return Executor(keyring=Keyring({key.kid: key}, key.kid), policy_versions={"0.1.0"}, store=SQLiteStore(path))


# --- receipts and execution ------------------------------------------------------------------------


def test_no_receipt_while_an_action_is_blocked(desk: ControlDesk) -> None:
    """Kills: issuing a receipt although the decision document lists blocked actions."""
    document = _approve(desk, KYA).to_dict()
    receipt_for(document, KYA, hmac_key("k", SECRET), now=ISSUED)  # the unblocked document is fine
    with pytest.raises(ReceiptIssueError) as caught:
        receipt_for(document | {"blocked_actions": ["execute_payment"]}, KYA, hmac_key("k", SECRET), now=ISSUED)
    assert caught.value.code == "blocked"


def test_an_idempotency_key_reused_for_another_action_is_refused(desk: ControlDesk, tmp_path: Path) -> None:
    """Kills: the executor replaying (or running) a second, different action that reuses a key."""
    other = KYA | {"action_id": "act_supplier_9000_002", "amount": {"value_minor": 900000, "currency": "USD"}}
    assert other["idempotency_key"] == KYA["idempotency_key"]
    key = hmac_key("kya-1", SECRET)
    first = receipt_for(_approve(desk, KYA).to_dict(), KYA, key, now=ISSUED)
    second = receipt_for(_approve(desk, other).to_dict(), other, key, now=ISSUED)
    executor = _executor(tmp_path / "exec.db")
    calls: list[str] = []
    executor.execute_authorized_action(KYA, first, lambda a: calls.append(a["action_id"]) or "paid", now=LATER)
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(other, second, lambda a: calls.append(a["action_id"]) or "paid", now=LATER)
    assert caught.value.code == "idempotency_key_reused"
    assert calls == ["act_supplier_8000_001"]


def _crash_while_executing(db: str, receipt: dict[str, Any], action: dict[str, Any]) -> None:
    executor = _executor(Path(db))

    def handler(_: Any) -> Any:
        os._exit(9)  # the process dies mid-execution: the key stays `running`

    executor.execute_authorized_action(action, receipt, handler, now=LATER)


def test_a_crashed_running_key_is_not_reported_as_replayed(desk: ControlDesk, tmp_path: Path) -> None:
    """Kills: treating a ``running`` key (its executor crashed) as a finished one to replay. The
    side effect may or may not have happened, so nobody may be told it did."""
    key = hmac_key("kya-1", SECRET)
    document = _approve(desk, KYA).to_dict()
    db = tmp_path / "exec.db"
    SQLiteStore(db)
    child = multiprocessing.get_context("spawn").Process(
        target=_crash_while_executing, args=(str(db), receipt_for(document, KYA, key, now=ISSUED), KYA)
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 9
    executor = _executor(db)
    record = executor.store.execution(KYA["idempotency_key"])
    assert record is not None and record.state == "running"
    calls: list[str] = []
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(
            KYA, receipt_for(document, KYA, key, now=ISSUED), lambda a: calls.append("again"), now=LATER
        )
    assert caught.value.code == "in_progress" and calls == []


# --- durability, observed --------------------------------------------------------------------------


def test_the_store_runs_wal_with_synchronous_full(tmp_path: Path) -> None:
    """Kills: the store at ``synchronous=OFF`` (or NORMAL). Read back from the very connection
    the store consumes receipts on: synchronous is per connection, so a fresh one would not see
    it. FULL (2) makes a WAL commit durable before ``consume`` returns, as store.py promises."""
    store = SQLiteStore(tmp_path / "store.db")
    assert store.consume("nonce-1", "rcpt_1", "2026-11-29T10:10:00Z") is True
    connection = store._connection()
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.consume("nonce-1", "rcpt_2", "2026-11-29T10:10:00Z") is False


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_the_ledger_fsyncs_its_own_file_before_append_returns(
    durability: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills: the ledger's ``os.fsync`` removed. Durability against power loss cannot be
    observed without cutting the power, so the syscall itself is observed: ``os.fsync`` is
    wrapped (the real fsync still runs; nothing is faked) to record which file each call
    synced and how large it was, and the record must show the ledger file, with the new
    entry already in it, synced before ``append`` returned."""
    path = tmp_path / "audit.jsonl"
    synced: list[tuple[int, int, int]] = []
    real_fsync = os.fsync

    def observed_fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_dev, info.st_ino, info.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed_fsync)
    ledger = AuditLedger(path, durability=durability)
    for n in range(3):
        before = len(synced)
        ledger.append({"type": "probe", "n": n})
        info = path.stat()
        after_append = [s for s in synced[before:] if (s[0], s[1]) == (info.st_dev, info.st_ino)]
        assert after_append, f"append {n} returned without an fsync of {path}"
        assert after_append[-1][2] == info.st_size  # synced after the entry was written
    assert [entry["n"] for _, entry in read_entries(path)] == [0, 1, 2]
