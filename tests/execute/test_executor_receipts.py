"""The executor consumes a receipt once (contract section 5), with both signers: one execution
then a refused replay, a handler failure recorded and final, and 8 real processes racing to
consume the same receipts while the store proves each nonce and each idempotency key was used
once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import multiprocessing
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, receipt_for
from trustkit import approve_all

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.core.errors import (
    ExecutionError,
    ReceiptVerificationError,
)
from kcp_opa.core.signing import Key, Keyring, hmac_key
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore

KYA_PATH = REPO / "fixtures" / "kya-supplier-payment-action.json"
KYA = json.loads(KYA_PATH.read_text())
DECIDED = "2026-11-29T10:00:00Z"
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
LATER = ISSUED + dt.timedelta(seconds=30)
SECRET = b"kya-receipt-secret-0123456789abcdef"


def _ring(receipt_key: Key) -> Keyring:
    return Keyring({receipt_key.kid: receipt_key}, receipt_key.kid)


def _receipt(approved: GateDecision, receipt_key: Key, **kwargs: Any) -> dict[str, Any]:
    return receipt_for(approved.to_dict(), KYA, receipt_key, now=ISSUED, **kwargs)


# --- the executor --------------------------------------------------------------------------------


def _executor(receipt_key: Key, path: Path) -> Executor:
    return Executor(keyring=_ring(receipt_key), policy_versions={"0.1.0"}, store=SQLiteStore(path))


def test_execute_once_then_replay_refused(approved: GateDecision, receipt_key: Key, tmp_path: Path) -> None:
    executor = _executor(receipt_key, tmp_path / "exec.db")
    calls: list[str] = []
    receipt = _receipt(approved, receipt_key)
    result = executor.execute_authorized_action(
        KYA, receipt, lambda a: calls.append(a["action_id"]) or "paid", now=LATER
    )
    assert result.outcome == "paid" and not result.replayed and calls == ["act_supplier_8000_001"]
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(KYA, receipt, lambda a: calls.append("again"), now=LATER)
    assert caught.value.code == "replay" and calls == ["act_supplier_8000_001"]
    second = _receipt(approved, receipt_key)  # a second, valid receipt for the same action
    again = executor.execute_authorized_action(KYA, second, lambda a: calls.append("again"), now=LATER)
    assert again.replayed and again.outcome == "paid" and calls == ["act_supplier_8000_001"]
    assert executor.store.count("refusals") == 1


def test_executor_accepts_nothing_but_a_receipt(approved: GateDecision, tmp_path: Path) -> None:
    executor = _executor(hmac_key("kya-1", SECRET), tmp_path / "exec.db")
    for authority in ({"decision_id": approved.decision.decision_id}, {"approval_id": "ap_1"}, "yes, go ahead"):
        with pytest.raises(ReceiptVerificationError):
            executor.execute_authorized_action(KYA, authority, lambda a: "paid", now=LATER)  # type: ignore[arg-type]
    assert executor.store.count("executions") == 0


def test_handler_failure_is_recorded_and_final(approved: GateDecision, tmp_path: Path) -> None:
    receipt_key = hmac_key("kya-1", SECRET)
    executor = _executor(receipt_key, tmp_path / "exec.db")

    def broken(action: Any) -> Any:
        raise RuntimeError("bank timeout")

    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(KYA, _receipt(approved, receipt_key), broken, now=LATER)
    assert caught.value.code == "handler_failed"
    record = executor.store.execution(KYA["idempotency_key"])
    assert record is not None and record.state == "failed" and "bank timeout" in (record.error or "")
    with pytest.raises(ExecutionError) as again:
        executor.execute_authorized_action(KYA, _receipt(approved, receipt_key), lambda a: "paid", now=LATER)
    assert again.value.code == "already_failed"


# --- concurrency: 8 processes x 200 attempts ------------------------------------------------------


def _race_worker(
    db: str, receipts: list[dict[str, Any]], actions: dict[str, dict[str, Any]], effects: str, seed: int
) -> None:
    import random

    receipt_key = hmac_key("kya-1", SECRET)
    executor = Executor(
        keyring=Keyring({"kya-1": receipt_key}, "kya-1"), policy_versions={"0.1.0"}, store=SQLiteStore(db)
    )
    side = sqlite3.connect(effects, timeout=60, isolation_level=None)

    def handler(action: Any) -> str:
        side.execute(
            "INSERT INTO effects (idempotency_key, pid) VALUES (?, ?)", (action["idempotency_key"], os.getpid())
        )
        return "done"

    order = list(range(len(receipts))) * 2
    random.Random(seed).shuffle(order)
    for index in order[:200]:
        receipt = receipts[index]
        with contextlib.suppress(ReceiptVerificationError, ExecutionError):
            executor.execute_authorized_action(actions[receipt["action_id"]], receipt, handler, now=LATER)


def test_eight_processes_consume_each_nonce_once_and_execute_each_key_once(desk: ControlDesk, tmp_path: Path) -> None:
    receipt_key = hmac_key("kya-1", SECRET)
    actions: dict[str, dict[str, Any]] = {}
    receipts = []
    for n in range(25):
        action = {**KYA, "action_id": f"act_race_{n}", "idempotency_key": f"idem_race_key_{n:04d}"}
        actions[action["action_id"]] = action
        document = approve_all(desk, action).to_dict()
        receipts += [receipt_for(document, action, receipt_key, now=ISSUED) for _ in range(4)]  # 4 receipts per action
    db, effects = tmp_path / "race.db", tmp_path / "effects.db"
    SQLiteStore(db)
    with sqlite3.connect(effects) as connection:
        connection.execute("CREATE TABLE effects (idempotency_key TEXT, pid INTEGER)")
        connection.execute("PRAGMA journal_mode=WAL")
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_race_worker, args=(str(db), receipts, actions, str(effects), seed)) for seed in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
        assert worker.exitcode == 0
    with sqlite3.connect(db) as connection:
        consumed = connection.execute("SELECT count(*), count(DISTINCT nonce) FROM consumed_receipts").fetchone()
        executions = connection.execute("SELECT count(*), count(DISTINCT idempotency_key) FROM executions").fetchone()
        states = {row[0] for row in connection.execute("SELECT state FROM executions")}
    with sqlite3.connect(effects) as connection:
        per_key = connection.execute(
            "SELECT idempotency_key, count(*) FROM effects GROUP BY idempotency_key"
        ).fetchall()
    assert consumed == (100, 100)  # every receipt consumed, each exactly once
    assert executions == (25, 25) and states == {"succeeded"}
    assert len(per_key) == 25 and all(count == 1 for _, count in per_key)
