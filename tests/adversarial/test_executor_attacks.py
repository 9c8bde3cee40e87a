"""Attacks on the executor: a crash (kill -9) between the claim and the outcome, and a handler
whose result cannot be recorded. Before leases, the first left the key ``running`` forever
(every retry: in_progress); the second ran the side effect and escaped with a TypeError.
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

from kcp_opa.authorize.store import SQLiteStore
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ExecutionError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import Executor
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger, read_entries

SECRET = b"adversarial-executor-secret-0123456789"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


def _receipt() -> dict[str, Any]:
    """A genuine receipt for ACTION (the decision document is what an approving gate returns)."""
    decision = {
        "decision_id": "dec_adv_1",
        "action_hash": action_hash(ACTION),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    return receipt_for(decision, ACTION, hmac_key("kya-1", SECRET))


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
