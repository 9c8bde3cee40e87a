"""Attacks on the executor: a crash (kill -9) between the claim and the outcome, a handler
whose result cannot be recorded, and an audit ledger that fails (a full disk) around the
handler. Before leases, the first left the key ``running`` forever (every retry: in_progress);
the second ran the side effect and escaped with a TypeError; before intents, the third ran the
side effect and left the store ``succeeded`` with nothing in the ledger.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, receipt_for, run_cli

from kcp_opa.audit.summary import summarize
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ExecutionError, ReceiptVerificationError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger, read_entries, verify_ledger

SECRET = b"adversarial-executor-secret-0123456789"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


def _receipt(action: Any = ACTION) -> dict[str, Any]:
    """A genuine receipt for ``action`` (the decision document is what an approving gate returns)."""
    decision = {
        "decision_id": "dec_adv_1",
        "action_hash": action_hash(action),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    return receipt_for(decision, action, hmac_key("kya-1", SECRET))


def _executor(db: Path, lease: float = 300.0) -> Executor:
    key = hmac_key("kya-1", SECRET)
    return Executor(
        keyring=Keyring({"kya-1": key}, "kya-1"), policy_versions={"0.1.0"}, store=SQLiteStore(db), lease_seconds=lease
    )


_CRASHING_CHILD = """
import json, sys, time
sys.path[:0] = [sys.argv[4], sys.argv[5]]
from test_executor_attacks import _executor, ACTION
executor = _executor(__import__("pathlib").Path(sys.argv[1]), lease=float(sys.argv[3]))
def handler(action):
    print("SIDE-EFFECT-STARTED", flush=True)
    time.sleep(120)
    return "paid"
executor.execute_authorized_action(ACTION, json.loads(sys.argv[2]), handler)
"""


@pytest.fixture(scope="module")
def finance(tmp_path_factory: pytest.TempPathFactory) -> LoadedBundle:
    out = tmp_path_factory.mktemp("adv-exec") / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return read_bundle(out)


def test_executor_kill_9_after_the_claim_becomes_ambiguous_until_reconciled(
    tmp_path: Path, finance: LoadedBundle
) -> None:
    db, ledger_path = tmp_path / "exec.db", tmp_path / "audit.jsonl"
    lease = 2.0
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CRASHING_CHILD,
            str(db),
            json.dumps(_receipt()),
            str(lease),
            str(Path(__file__).parent),
            str(Path(__file__).parent.parent),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "SIDE-EFFECT-STARTED"
    os.kill(child.pid, signal.SIGKILL)  # the claim is in the store, the outcome never will be
    child.wait()
    executor = _executor(db, lease)
    executor.audit = AuditTrail(AuditLedger(ledger_path), finance)
    with pytest.raises(ExecutionError) as within:  # inside the lease: the claim may still be running
        executor.execute_authorized_action(ACTION, _receipt(), lambda a: "paid again")
    assert within.value.code == "in_progress"
    time.sleep(lease + 0.5)
    ran: list[str] = []
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, _receipt(), lambda a: ran.append("twice") or "paid again")
    assert caught.value.code == "ambiguous" and ran == []  # never run twice, never silently stuck
    listed = run_cli("executions", "list", "--store", str(db), "--format", "json")
    assert listed.returncode == 1 and json.loads(listed.stdout)[0]["idempotency_key"] == ACTION["idempotency_key"]
    key = ACTION["idempotency_key"]
    proc = run_cli(
        "executions",
        "reconcile",
        key,
        "--outcome",
        "succeeded",
        "--evidence",
        "bank:stmt-7781",
        "--store",
        str(db),
        "--ledger",
        str(ledger_path),
    )
    assert proc.returncode == 0, proc.stderr
    again = executor.execute_authorized_action(ACTION, _receipt(), lambda a: ran.append("twice") or "x")
    assert again.replayed and again.outcome == {"reconciled": "succeeded", "evidence": "bank:stmt-7781"} and ran == []
    reported = [e for _, e in read_entries(ledger_path) if e.get("code") == "execution_ambiguous"]
    assert reported and reported[0]["idempotency_key"] == key
    reconciled = [e for _, e in read_entries(ledger_path) if e.get("reconciled")]
    assert reconciled and reconciled[0]["evidence"] == "bank:stmt-7781"
    refused = run_cli("executions", "reconcile", key, "--outcome", "failed", "--evidence", "x", "--store", str(db))
    assert refused.returncode == 1 and "not ambiguous" in refused.stderr
    assert SQLiteStore(db).count("reconciliations") == 1


def test_executor_lease_is_per_claim(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    key = ACTION["idempotency_key"]
    assert store.claim_execution(key, action_hash(ACTION), "rcpt_dead", lease_seconds=0.05) is None
    assert store.ambiguous_executions() == []
    time.sleep(0.1)
    (record,) = store.ambiguous_executions()
    assert record.state == "ambiguous" and record.receipt_id == "rcpt_dead"
    assert not store.finish_execution(key, outcome="late") or store.execution(key).state == "succeeded"  # type: ignore[union-attr]


def test_executor_non_json_result_is_a_recorded_failure_not_stuck(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "exec.db")
    effects: list[str] = []

    def handler(action: Any) -> Any:
        effects.append("paid")
        return {"at": object(), "amount": float("nan")}

    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, _receipt(), handler)
    assert caught.value.code == "result_not_json" and effects == ["paid"]
    record = executor.store.execution(ACTION["idempotency_key"])
    assert record is not None and record.state == "failed" and "object object at" in (record.error or "")
    with pytest.raises(ExecutionError) as again:
        executor.execute_authorized_action(ACTION, _receipt(), handler)
    assert again.value.code == "already_failed" and effects == ["paid"]


_LEDGER_FAILS = """
import json, resource, signal, sys
from pathlib import Path
sys.path[:0] = [sys.argv[6], sys.argv[7]]
from test_executor_attacks import _executor, ACTION
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger
db, ledger, bundle, effects, when = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), sys.argv[5]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, like a full disk

def disk_full():
    # no file may grow past the ledger's size now: the ledger's next append fails, the
    # (smaller) SQLite store and the side-effect file still write
    size = ledger.stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

def handler(action):
    with effects.open("a") as out:
        out.write("paid\\n")
    if when == "after":
        disk_full()
    return {"paid": action["idempotency_key"]}

executor = _executor(db)
executor.audit = AuditTrail(AuditLedger(ledger), read_bundle(bundle))
if when == "before":
    disk_full()
try:
    executor.execute_authorized_action(ACTION, json.loads(sys.stdin.read()), handler)
    print(json.dumps({"ok": True}))
except KcpOpaError as exc:
    print(json.dumps({"error": type(exc).__name__, "code": getattr(exc, "code", None), "message": str(exc)}))
"""


def _executing_with_a_failing_ledger(tmp_path: Path, finance: LoadedBundle, when: str) -> dict[str, Any]:
    """Run ACTION under a fresh receipt in a child process whose ledger's disk fills ``when``
    (before the execution or inside its handler); returns the child's report and the receipt."""
    db, ledger, effects = tmp_path / "exec.db", tmp_path / "audit.jsonl", tmp_path / "side-effects.txt"
    SQLiteStore(db).count("executions")  # the store's tables exist before the disk fills
    # the ledger is the largest file, so a size limit at its size stops it alone
    AuditLedger(ledger).append({"type": "note", "note": "padding", "detail": {"pad": "x" * 2_000_000}})
    receipt = _receipt()
    tests = Path(__file__).parent
    child = [sys.executable, "-c", _LEDGER_FAILS, str(db), str(ledger), finance.source, str(effects), when]
    proc = subprocess.run(
        [*child, str(tests), str(tests.parent)],
        input=json.dumps(receipt),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return {"report": json.loads(proc.stdout.strip().splitlines()[-1]), "receipt": receipt}


def _paying(effects: Path) -> Any:
    def handler(action: Any) -> Any:
        with effects.open("a") as out:
            out.write("paid\n")
        return {"paid": action["idempotency_key"]}

    return handler


def test_executor_ledger_full_before_the_handler_runs_nothing_and_the_receipt_executes_once_later(
    tmp_path: Path, finance: LoadedBundle
) -> None:
    """The intent cannot be written: no side effect, no receipt consumed, one execution after recovery."""
    ran = _executing_with_a_failing_ledger(tmp_path, finance, "before")
    report, receipt = ran["report"], ran["receipt"]
    db, ledger, effects = tmp_path / "exec.db", tmp_path / "audit.jsonl", tmp_path / "side-effects.txt"
    assert report["code"] == "audit_unavailable", report
    assert "did not run" in report["message"] and "is not consumed" in report["message"]
    assert not effects.exists()  # the handler never ran
    store = SQLiteStore(db)
    assert store.execution(ACTION["idempotency_key"]) is None and store.count("consumed_receipts") == 0
    assert store.count("refusals") == 1  # the store's trace of the attempt
    assert verify_ledger(ledger).ok
    assert not [e for _, e in read_entries(ledger) if e.get("type") in {"intent", "execution", "failure"}]

    executor = _executor(db)  # the disk has room again: the same receipt executes, exactly once
    executor.audit = AuditTrail(AuditLedger(ledger), finance)
    result = executor.execute_authorized_action(ACTION, receipt, _paying(effects))
    assert not result.replayed and result.outcome == {"paid": ACTION["idempotency_key"]}
    with pytest.raises(ReceiptVerificationError) as again:
        executor.execute_authorized_action(ACTION, receipt, _paying(effects))
    assert again.value.code == "replay"
    assert effects.read_text() == "paid\n"
    intent, outcome = [e for _, e in read_entries(ledger) if e.get("type") in {"intent", "execution"}]
    assert (intent["type"], outcome["type"], outcome["intent_seq"]) == ("intent", "execution", intent["seq"])
    summary = summarize(ledger)
    assert summary.executions == 1 and summary.unresolved_intents == []


def test_executor_ledger_full_after_the_handler_is_unrecorded_not_succeeded(
    tmp_path: Path, finance: LoadedBundle
) -> None:
    """The outcome cannot be written: the ledger holds the intent, the store no clean success, audit reports it."""
    report = _executing_with_a_failing_ledger(tmp_path, finance, "after")["report"]
    db, ledger, effects = tmp_path / "exec.db", tmp_path / "audit.jsonl", tmp_path / "side-effects.txt"
    key = ACTION["idempotency_key"]
    assert report["code"] == "outcome_unrecorded", report
    assert "side effect RAN" in report["message"] and "executions reconcile" in report["message"]
    assert effects.read_text() == "paid\n"
    record = SQLiteStore(db).execution(key)
    assert record is not None and record.state == "ambiguous"  # never `succeeded` behind the ledger's back
    assert record.outcome == {"paid": key} and "outcome_unrecorded" in (record.error or "")
    assert verify_ledger(ledger).ok
    (intent,) = [e for _, e in read_entries(ledger) if e.get("type") == "intent"]
    assert intent["idempotency_key"] == key and intent["receipt_id"] == record.receipt_id
    assert not [e for _, e in read_entries(ledger) if e.get("intent_seq") is not None]
    (unresolved,) = summarize(ledger).unresolved_intents
    assert (unresolved["seq"], unresolved["idempotency_key"]) == (intent["seq"], key)
    reported = run_cli("audit", "report", str(ledger), "--format", "text")
    assert reported.returncode == 0 and f"intent without an outcome: seq {intent['seq']} key {key}" in reported.stdout
    as_json = json.loads(run_cli("audit", "report", str(ledger), "--format", "json").stdout)
    assert [i["seq"] for i in as_json["unresolved_intents"]] == [intent["seq"]] and as_json["executions"] == 0
    queried = run_cli("audit", "query", str(ledger), "--type", "intent", "--format", "json")
    assert [e["seq"] for e in json.loads(queried.stdout)] == [intent["seq"]]
    listed = run_cli("executions", "list", "--store", str(db), "--format", "json")
    assert listed.returncode == 1 and "outcome_unrecorded" in json.loads(listed.stdout)[0]["note"]

    executor = _executor(db)  # a retry never runs it again
    executor.audit = AuditTrail(AuditLedger(ledger), finance)
    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(ACTION, _receipt(), _paying(effects))
    assert caught.value.code == "ambiguous" and "not in the audit ledger" in str(caught.value)
    assert effects.read_text() == "paid\n"
    evidence = ["--evidence", "bank:stmt-9", "--store", str(db), "--ledger", str(ledger)]
    resolved = run_cli("executions", "reconcile", key, "--outcome", "succeeded", *evidence)
    assert resolved.returncode == 0, resolved.stderr
    assert summarize(ledger).unresolved_intents == []


def _executed_after_recovery(executor: Executor, action: Any, receipt: Any, handler: Any) -> Any:
    """Execute once the ledger's database answers again (its pool reconnects by itself)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return executor.execute_authorized_action(action, receipt, handler)
        except ExecutionError as exc:
            assert exc.code == "audit_unavailable" and time.monotonic() < deadline, exc
            time.sleep(0.5)


@pytest.mark.postgres
def test_executor_postgres_ledger_stopped_before_and_inside_the_handler(
    tmp_path: Path, finance: LoadedBundle, postgres: Any
) -> None:
    """The same two failures with the ledger in PostgreSQL, the server really stopped."""
    from kcp_opa.trail.locations import readable
    from kcp_opa.trail.pgledger import PostgresLedger

    if not postgres.port:
        pytest.skip("an external server (KCP_OPA_TEST_POSTGRES) is not stopped by the tests")
    location, db, effects = postgres.database("kcp_exec_intent"), tmp_path / "exec.db", tmp_path / "effects.txt"
    executor = _executor(db)
    executor.audit = AuditTrail(PostgresLedger(location), finance)
    receipt, key = _receipt(), ACTION["idempotency_key"]
    postgres.stop()
    try:
        with pytest.raises(ExecutionError) as down:
            executor.execute_authorized_action(ACTION, receipt, _paying(effects))
    finally:
        postgres.start()
    assert down.value.code == "audit_unavailable" and not effects.exists()
    assert executor.store.execution(key) is None and SQLiteStore(db).count("consumed_receipts") == 0
    assert not _executed_after_recovery(executor, ACTION, receipt, _paying(effects)).replayed
    assert effects.read_text() == "paid\n"

    second = {**ACTION, "action_id": "act_adv_intent_2", "idempotency_key": "idem_adv_intent_2"}

    def stopping(action: Any) -> Any:
        result = _paying(effects)(action)
        postgres.stop("immediate")  # the ledger's database goes down while the side effect runs
        return result

    try:
        with pytest.raises(ExecutionError) as unrecorded:
            executor.execute_authorized_action(second, _receipt(second), stopping)
    finally:
        postgres.start()
    assert unrecorded.value.code == "outcome_unrecorded" and effects.read_text() == "paid\npaid\n"
    record = executor.store.execution(second["idempotency_key"])
    assert record is not None and record.state == "ambiguous"
    with readable(location) as path:
        assert verify_ledger(path).ok
        entries = [e for _, e in read_entries(path)]
        summary = summarize(path)
    intents = [e for e in entries if e.get("type") == "intent"]
    assert [e["idempotency_key"] for e in intents] == [key, second["idempotency_key"]]
    assert [e["intent_seq"] for e in entries if e.get("intent_seq")] == [intents[0]["seq"]]
    assert summary.executions == 1 and [i["seq"] for i in summary.unresolved_intents] == [intents[1]["seq"]]


def test_executor_ledger_unwritable_gives_a_hand_off_back(tmp_path: Path, finance: LoadedBundle) -> None:
    """A receipt verified and consumed before (the KYA hand-off) is not spent by a ledger outage at
    its execution: the hand-off is given back, and its principal executes it once afterwards."""
    from kcp_opa.stores.sqlite.handoffs import SQLiteHandoffStore

    db, ledger, effects = tmp_path / "exec.db", tmp_path / "audit.jsonl", tmp_path / "side-effects.txt"
    executor = _executor(db)
    executor.handoffs = SQLiteHandoffStore(db)
    executor.audit = AuditTrail(AuditLedger(ledger), finance)
    receipt = _receipt()
    assert executor.store.consume(receipt["nonce"], receipt["receipt_id"], receipt["expires_at"])  # verified before
    executor.handoffs.hand_off(receipt["nonce"], receipt["receipt_id"], "payments-executor")
    AuditLedger(ledger).append({"type": "note", "note": "opened"})
    aside = tmp_path / "audit.aside"
    ledger.rename(aside)
    ledger.mkdir()  # the ledger's path is no longer a writable file (root cannot write it either)
    try:
        with pytest.raises(ExecutionError) as caught:
            executor.execute_authorized_action(ACTION, receipt, _paying(effects), consumer="payments-executor")
    finally:
        ledger.rmdir()
        aside.rename(ledger)
    assert caught.value.code == "audit_unavailable" and not effects.exists()
    assert executor.store.execution(ACTION["idempotency_key"]) is None
    result = executor.execute_authorized_action(ACTION, receipt, _paying(effects), consumer="payments-executor")
    assert not result.replayed and effects.read_text() == "paid\n"
    with pytest.raises(ReceiptVerificationError) as again:
        executor.execute_authorized_action(ACTION, receipt, _paying(effects), consumer="payments-executor")
    assert again.value.code == "replay" and effects.read_text() == "paid\n"
