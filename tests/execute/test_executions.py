"""The executor (kcp_opa/execute/executor.py): claims, leases, replays, failures and their events.

No bundle is compiled and no process started: a receipt is issued from the decision document an
approving gate returns, and the audit trail is a real AuditTrail over a real AuditLedger whose
bundle carries no units. Fast enough for mutmut to rerun per mutant (docs/testing.md).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, receipt_for
from storekit import raw_rows

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.errors import ExecutionError, ReceiptVerificationError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import ExecutionResult, Executor, _loggable
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger, read_entries

SECRET = b"mutant-executor-secret-0123456789abcdef"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
KEY = ACTION["idempotency_key"]
DIGEST = action_hash(ACTION)
BUNDLE = LoadedBundle("none", {"metadata": {"kcp_opa": {"policy_version": "0.1.0"}}}, {}, {}, "0" * 64)


def _receipt(action: dict[str, Any] = ACTION, **overrides: Any) -> dict[str, Any]:
    decision = {
        "decision_id": "dec_mut_1",
        "action_hash": action_hash(action),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
        **overrides,
    }
    return receipt_for(decision, action, hmac_key("kya-1", SECRET))


def _executor(tmp_path: Path, *, lease: float = 300.0, audit: bool = True) -> Executor:
    key = hmac_key("kya-1", SECRET)
    trail = AuditTrail(AuditLedger(tmp_path / "audit.jsonl"), BUNDLE) if audit else None
    return Executor(
        keyring=Keyring({"kya-1": key}, "kya-1"),
        policy_versions=["0.1.0"],
        store=SQLiteStore(tmp_path / "exec.db"),
        audit=trail,
        lease_seconds=lease,
    )


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    """The ledger's events; each carries the KCP fields of the action it is about."""
    path = tmp_path / "audit.jsonl"
    events = [entry for _, entry in read_entries(path)] if path.exists() else []
    for event in events:
        assert (event["action_id"], event["agent_id"]) == (ACTION["action_id"], ACTION["agent_id"]), event
    return events


# ---------------------------------------------------------------- executor


def test_loggable_receipt_ids() -> None:
    assert _loggable("r" * 200) and not _loggable("r" * 201)
    assert not _loggable(5) and not _loggable(None)
    assert not _loggable("bad\ud800surrogate")
    assert _loggable("")


def test_executor_settings(tmp_path: Path) -> None:
    for lease in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"^lease_seconds must be positive$"):
            _executor(tmp_path, lease=lease)
    executor = _executor(tmp_path, lease=0.5)
    assert executor.lease_seconds == 0.5 and executor.policy_versions == frozenset({"0.1.0"})
    assert _executor(tmp_path, audit=False).audit is None
    assert Executor(keyring=Keyring({}), policy_versions=(), store=executor.store).lease_seconds == 300.0


def test_execute_then_replay_with_audit_events(tmp_path: Path) -> None:
    executor = _executor(tmp_path, lease=123.0)
    calls: list[Any] = []
    receipt = _receipt()

    def handler(action: Any) -> Any:
        calls.append(action)
        return {"paid": True}

    first = executor.execute_authorized_action(ACTION, receipt, handler)
    assert first == ExecutionResult(KEY, receipt["receipt_id"], {"paid": True}, replayed=False)
    assert calls == [ACTION]
    record = executor.store.execution(KEY)
    assert record is not None and record.receipt_id == receipt["receipt_id"] and record.action_hash == DIGEST
    started = dt.datetime.strptime(record.started_at, "%Y-%m-%dT%H:%M:%S.%fZ")
    lease = dt.datetime.strptime(record.lease_expires_at or "", "%Y-%m-%dT%H:%M:%S.%fZ")
    assert lease - started == dt.timedelta(seconds=123)
    second = _receipt(decision_id="dec_mut_2")
    again = executor.execute_authorized_action(ACTION, second, handler)
    assert again == ExecutionResult(KEY, receipt["receipt_id"], {"paid": True}, replayed=True)
    assert len(calls) == 1
    events = [e for e in _events(tmp_path) if e.get("type") == "execution"]
    assert len(events) == 2
    for event, replayed, rid in ((events[0], False, receipt["receipt_id"]), (events[1], True, second["receipt_id"])):
        assert event["replayed"] is replayed and event["idempotency_key"] == KEY
        assert event["receipt_id"] == rid and event["action_hash"] == DIGEST
    # the same receipt again is a replay of the receipt: refused, recorded, never run
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(ACTION, receipt, handler)
    assert caught.value.code == "replay"
    ((code, rid, digest, message),) = raw_rows(
        executor.store, "SELECT code, receipt_id, action_hash, message FROM refusals"
    )
    assert (code, rid, digest, message) == ("replay", receipt["receipt_id"], DIGEST, str(caught.value))
    (failure,) = [e for e in _events(tmp_path) if e.get("type") == "failure"]
    assert failure["code"] == "replay" and failure["message"] == str(caught.value)
    assert failure["receipt_id"] == receipt["receipt_id"] and failure["action_hash"] == DIGEST


def test_refusal_with_an_unloggable_receipt_id(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    receipt = {**_receipt(), "receipt_id": "x" * 300}
    with pytest.raises(ReceiptVerificationError):
        executor.execute_authorized_action(ACTION, receipt, lambda a: pytest.fail("ran"))
    ((rid, digest),) = raw_rows(executor.store, "SELECT receipt_id, action_hash FROM refusals")
    assert rid is None and digest == DIGEST
    (failure,) = [e for e in _events(tmp_path) if e.get("type") == "failure"]
    assert failure["receipt_id"] is None
    with pytest.raises(ReceiptVerificationError):
        executor.execute_authorized_action(ACTION, ["not", "a", "mapping"], lambda a: pytest.fail("ran"))  # type: ignore[arg-type]
    assert executor.store.count("refusals") == 2 and executor.store.count("executions") == 0


def test_key_reused_for_another_action(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    executor.execute_authorized_action(ACTION, _receipt(), lambda a: "ok")
    other = json.loads(json.dumps(ACTION))
    other["amount"]["value_minor"] += 1 if isinstance(other.get("amount"), dict) else 0
    other.setdefault("metadata", {})
    other["trace_id"] = "trace-other-action"
    assert action_hash(other) != DIGEST
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(other, _receipt(other), lambda a: pytest.fail("ran"))
    assert caught.value.code == "idempotency_key_reused"
    assert str(caught.value) == f"idempotency key {KEY} was used for a different action"


def test_running_ambiguous_and_failed_keys(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    executor.store.claim_execution(KEY, DIGEST, "rcpt_other", lease_seconds=60)
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, _receipt(), lambda a: pytest.fail("ran"))
    assert caught.value.code == "in_progress"
    assert str(caught.value) == f"{KEY} is being executed under receipt rcpt_other"
    executor.store._connection().execute("UPDATE executions SET lease_expires_at = '2000-01-01T00:00:00.000000Z'")
    receipt = _receipt(decision_id="dec_amb")
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, receipt, lambda a: pytest.fail("ran"))
    assert caught.value.code == "ambiguous"
    started = (executor.store.execution(KEY) or pytest.fail("no record")).started_at
    assert str(caught.value) == (
        f"{KEY} was claimed under receipt rcpt_other at {started} and its lease expired without an outcome: it may"
        " or may not have run; check the target system, then "
        f"`kcp-opa executions reconcile {KEY} --outcome succeeded|failed --evidence REF`"
    )
    (event,) = [e for e in _events(tmp_path) if e.get("type") == "failure"]
    assert event["code"] == "execution_ambiguous" and event["message"] == str(caught.value)
    assert event["receipt_id"] == receipt["receipt_id"] and event["action_hash"] == DIGEST
    assert event["idempotency_key"] == KEY
    executor.store.reconcile(KEY, "failed", "bank:none")
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, _receipt(decision_id="dec_f"), lambda a: pytest.fail("ran"))
    assert caught.value.code == "already_failed"
    assert str(caught.value) == f"{KEY} already failed: reconciled as failed (evidence: bank:none)"


def test_handler_failure_is_recorded(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    receipt = _receipt()

    def handler(action: Any) -> Any:
        raise RuntimeError("bank down")

    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, receipt, handler)
    assert caught.value.code == "handler_failed" and str(caught.value) == f"the handler failed for {KEY}: bank down"
    assert isinstance(caught.value.__cause__, RuntimeError)
    record = executor.store.execution(KEY)
    assert record is not None and record.state == "failed" and record.error == "RuntimeError: bank down"
    (event,) = [e for e in _events(tmp_path) if e.get("type") == "failure"]
    assert (event["code"], event["message"], event["receipt_id"], event["action_hash"]) == (
        "handler_failed",
        "bank down",
        receipt["receipt_id"],
        DIGEST,
    )


def test_result_not_json_is_recorded(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    receipt = _receipt()
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, receipt, lambda a: {"x": float("inf")})
    assert caught.value.code == "result_not_json" and caught.value.__cause__ is None
    reason = "Out of range float values are not JSON compliant"
    try:
        json.dumps(float("inf"), allow_nan=False)
    except ValueError as exc:
        reason = str(exc)  # the wording differs between Python versions
    detail = f"the handler's result is not JSON ({reason}): {{'x': inf}}"
    assert str(caught.value) == f"{KEY}: {detail}; recorded as failed (the side effect ran)"
    record = executor.store.execution(KEY)
    assert record is not None and record.error == detail
    (event,) = [e for e in _events(tmp_path) if e.get("type") == "failure"]
    assert (event["code"], event["message"], event["receipt_id"], event["action_hash"]) == (
        "result_not_json",
        detail,
        receipt["receipt_id"],
        DIGEST,
    )
    # the repr in the record is cut at 500 characters
    other = _executor(tmp_path / "long")
    with pytest.raises(ExecutionError):
        other.execute_authorized_action(ACTION, _receipt(), lambda a: {"x": object(), "pad": "p" * 2000})
    error = (other.store.execution(KEY) or pytest.fail("no record")).error or ""
    assert len(error.split("): ", 1)[1]) == 500


def test_a_result_the_store_cannot_write_sorted_is_not_json(tmp_path: Path) -> None:
    """Mixed str/int keys serialise unsorted but not sorted, and the store writes sorted: checked
    exactly as it writes, the execution fails cleanly instead of being left running."""
    executor = _executor(tmp_path)
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, _receipt(), lambda a: {1: "one", "two": 2})
    assert caught.value.code == "result_not_json"
    record = executor.store.execution(KEY)
    assert record is not None and record.state == "failed" and "not supported" in (record.error or "")


def test_late_outcome_after_reconcile(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    receipt = _receipt()

    def handler(action: Any) -> Any:
        executor.store._connection().execute("UPDATE executions SET lease_expires_at = '2000-01-01T00:00:00.000000Z'")
        executor.store.reconcile(KEY, "failed", "ops:ticket-9")
        return "paid"

    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, receipt, handler)
    assert caught.value.code == "late_outcome"
    message = f"{KEY} finished after its lease expired and was reconciled meanwhile; outcome 'paid'"
    assert str(caught.value) == message
    (event,) = [e for e in _events(tmp_path) if e.get("type") == "failure"]
    assert (event["code"], event["message"], event["receipt_id"], event["action_hash"]) == (
        "late_outcome",
        message,
        receipt["receipt_id"],
        DIGEST,
    )
    # The ledger holds what really happened: the intent, the handler's outcome, then the conflict.
    intent, outcome, late = [e for e in _events(tmp_path) if e.get("type") in {"intent", "execution", "failure"}]
    assert (intent["type"], outcome["type"]) == ("intent", "execution")
    assert outcome["intent_seq"] == late["intent_seq"] == intent["seq"] and late["code"] == "late_outcome"


def test_no_audit_still_executes(tmp_path: Path) -> None:
    executor = _executor(tmp_path, audit=False)
    assert executor.execute_authorized_action(ACTION, _receipt(), lambda a: 1).outcome == 1
    assert not (tmp_path / "audit.jsonl").exists()


def test_stamps_are_utc_whatever_the_local_zone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        store = SQLiteStore(tmp_path / "exec.db")
        before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        store.record_refusal("c", "m", receipt_id=None, action_hash=None)
        store.claim_execution("k", "h", "r")
        after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        ((at,),) = raw_rows(store, "SELECT at FROM refusals")
        record = store.execution("k") or pytest.fail("no record")
        for stamp in (at, record.started_at):
            moment = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
            assert before <= moment <= after, stamp
        tokyo = dt.datetime(2026, 1, 1, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=9)))
        from kcp_opa.stores.sqlite.base import utc_stamp

        assert utc_stamp(tokyo) == "2026-01-01T00:00:00.000000Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    import os

    store = SQLiteStore(tmp_path / "exec.db")
    parent = store._connection()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer whether it reused the parent's connection, then leave at once
        try:
            os.write(write, b"reused" if store._connection() is parent else b"own")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"own"
    assert store._connection() is parent


def test_default_lease_and_reconciled_note_bytes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    store.claim_execution("k", "h", "r")
    record = store.execution("k") or pytest.fail("no record")
    started = dt.datetime.strptime(record.started_at, "%Y-%m-%dT%H:%M:%S.%fZ")
    lease = dt.datetime.strptime(record.lease_expires_at or "", "%Y-%m-%dT%H:%M:%S.%fZ")
    assert lease - started == dt.timedelta(seconds=300)
    store._connection().execute("UPDATE executions SET lease_expires_at = '2000-01-01T00:00:00.000000Z'")
    store.reconcile("k", "succeeded", "bank:9")
    ((outcome,),) = raw_rows(store, "SELECT outcome FROM executions")
    assert outcome == '{"evidence": "bank:9", "reconciled": "succeeded"}'  # canonical: sorted keys


def test_the_callers_clock_decides_expiry(tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    receipt = _receipt()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(ACTION, receipt, lambda a: pytest.fail("ran"), now=later)
    assert caught.value.code == "expired"
    assert executor.execute_authorized_action(ACTION, receipt, lambda a: "ok").outcome == "ok"
