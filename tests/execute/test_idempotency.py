"""An idempotency key runs one action once: reused for another action it is refused, and a key
whose executor crashed mid-execution is never reported as replayed (the child process really
dies). Each test names the mutant it killed (issue 18, "Why").
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
from kcp_opa.core.errors import ExecutionError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore

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
