"""Exactly once under ``serve --workers 2``: two worker processes behind one port, on SQLite with
the file ledger and on PostgreSQL (the store and the ledger).

Sixteen executors race on the same receipts and idempotency keys: each receipt is consumed once,
each handler runs once (the runs file proves it: one line per run, with the worker's pid), and
both workers served the race (their execution counters, labelled ``worker``). A worker killed
(-9) while its handler runs: the supervisor restarts it, and the execution is never run again by
either worker. The ledger verifies after both.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import REPO
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)
from workerkit import ready_workers, start_fleet, wait_for, worker_pids

from kcp_opa.trail.ledger import verify_ledger

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
WHO = {
    "local-agent": "t-agent-" + "a" * 32,
    "user_001": "t-subject-" + "s" * 32,
    "treasury_approver_anna": "t-approver-" + "p" * 32,
    "kyc-provider": "t-kyc-" + "k" * 32,
    "approval-desk": "t-issuer-" + "i" * 32,
    "payments-executor": "t-exec-" + "e" * 32,
}
ANSWERS = [
    ("user_001", "user_confirmation"),
    ("kyc-provider", "identity_verification"),
    ("kyc-provider", "authority_verification"),
    ("kyc-provider", "beneficiary_verification"),
    ("treasury_approver_anna", "independent_human_approval"),
]
EXECUTORS = 16


@dataclass
class Fleet:
    url: str
    process: Any
    runs_file: Path
    ledger: Path | None  # the file ledger; None: the ledger is in PostgreSQL
    dsn: str | None

    def runs(self) -> list[tuple[str, int]]:
        if not self.runs_file.exists():
            return []
        return [(k, int(p)) for k, p in (line.split() for line in self.runs_file.read_text().splitlines())]

    def ran(self, key: str) -> int:
        return sum(1 for k, _ in self.runs() if k == key)

    def ledger_ok(self) -> bool:
        if self.ledger is not None:
            return verify_ledger(self.ledger).ok
        from kcp_opa.trail.locations import readable

        with readable(str(self.dsn)) as path:
            return verify_ledger(path).ok


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp(f"workers-{request.param}")
    registry, issuer_keys = write_registry(work)
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {token: principal for principal, token in WHO.items()})
    handlers = work / "handlers.json"
    pay = {"target": "worker_handlers:pay", "actions": ["execute_payment"]}
    hang = {"target": "worker_handlers:hang", "actions": ["execute_payment"]}
    handlers.write_text(json.dumps({"handlers": {"pay": pay, "hang": hang}}))
    args = ["--bundle", str(bundle), "--trust", str(registry), "--handlers", str(handlers)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    args += ["--tokens", str(tokens), "--keyring", str(write_receipt_keyring(work))]
    ledger: Path | None = work / "l.jsonl"
    dsn = None
    if request.param == "postgresql":
        dsn = request.getfixturevalue("postgres").database("kcp_workers")
        args += ["--store", dsn, "--ledger", dsn]
        ledger = None
    else:
        args += ["--store", str(work / "s.db"), "--ledger", str(ledger)]
    tests = str(Path(__file__).resolve().parents[1])
    runs = work / "runs.txt"
    env = {
        "KCP_OPA_TEST_HANDLER_RUNS": str(runs),
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    }
    process, url = start_fleet(args, 2, env=env)
    try:
        yield Fleet(url, process, runs, ledger, dsn)
    finally:
        stop_server(process)


def post(url: str, path: str, who: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {WHO[who]}"}, timeout=120)


def approved(url: str, key: str, receipts: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The KYA action under ``key``, decided, answered and receipted (each call to either worker)."""
    action = {**KYA, "idempotency_key": key}
    decided = post(url, "/v1/decisions", "local-agent", {"action": action})
    assert decided.status_code == 200, decided.text
    decision_id = decided.json()["decision_id"]
    opened = post(url, f"/v1/decisions/{decision_id}/challenges", "local-agent", {})
    assert opened.status_code == 200, opened.text
    ids = {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}
    for who, control in ANSWERS:
        body = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
        answered = post(url, f"/v1/challenges/{ids[control]}/result", who, body)
        assert answered.status_code == 200, answered.text
    issued = [post(url, "/v1/receipts", "approval-desk", {"decision_id": decision_id}) for _ in range(receipts)]
    assert all(r.status_code == 200 for r in issued), [r.text for r in issued]
    return action, [r.json()["receipt"] for r in issued]


def test_sixteen_executors_on_two_workers_consume_each_receipt_once(fleet: Fleet) -> None:
    work = [approved(fleet.url, f"idem_worker_race_{n:04d}", receipts=3) for n in range(4)]
    pairs = [(action, receipt) for action, receipts in work for receipt in receipts]

    def executor(index: int) -> list[tuple[str, str, int, dict[str, Any]]]:
        out = []
        for action, receipt in random.Random(index).sample(pairs, len(pairs)):
            body = {"action": action, "receipt": receipt, "handler": "pay"}
            response = post(fleet.url, "/v1/executions", "payments-executor", body)
            out.append((action["idempotency_key"], receipt["receipt_id"], response.status_code, response.json()))
        return out

    with ThreadPoolExecutor(EXECUTORS) as pool:
        results = [row for rows in pool.map(executor, range(EXECUTORS)) for row in rows]
    assert len(results) == EXECUTORS * len(pairs)
    unexpected = [r for r in results if r[2] != 200 and r[3].get("code") not in {"replay", "in_progress"}]
    assert unexpected == []
    first_uses = Counter(receipt for _, receipt, status, body in results if body.get("code") != "replay")
    assert sorted(first_uses.values()) == [1] * len(pairs)  # each receipt consumed exactly once
    keys = {action["idempotency_key"] for action, _ in work}
    ran = Counter(key for key, _, status, body in results if status == 200 and body["replayed"] is False)
    assert ran == Counter(dict.fromkeys(keys, 1))
    runs = [(k, pid) for k, pid in fleet.runs() if k in keys]
    assert Counter(k for k, _ in runs) == Counter(dict.fromkeys(keys, 1))  # one side effect per key
    metrics = httpx2.get(f"{fleet.url}/metrics", timeout=30).text
    assert set(re.findall(r'kcp_opa_executions_total\{outcome="\w+",worker="(\d)"\}', metrics)) == {"0", "1"}
    assert fleet.ledger_ok()


def test_a_worker_killed_mid_execution_is_restarted_and_never_runs_it_again(fleet: Fleet) -> None:
    action, receipts = approved(fleet.url, "idem_worker_killed_01", receipts=2)
    run = {"action": action, "receipt": receipts[0], "handler": "hang"}
    thread = threading.Thread(
        target=_swallow, args=(lambda: post(fleet.url, "/v1/executions", "payments-executor", run),)
    )
    thread.start()
    victim = wait_for(lambda: dict(fleet.runs()).get("idem_worker_killed_01"), "the handler never started")
    assert victim in worker_pids(fleet.process.pid)  # the handler runs in a worker process
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=60)
    wait_for(lambda: len(now := worker_pids(fleet.process.pid)) == 2 and victim not in now, "no restart")
    wait_for(lambda: len(ready_workers(fleet.url)) == 2, "the restarted worker never became ready")
    for _ in range(4):  # to either worker, the restarted one included
        again = {"action": action, "receipt": receipts[1], "handler": "pay"}
        retried = post(fleet.url, "/v1/executions", "payments-executor", again)
        assert retried.status_code != 200 and retried.json()["code"] in {"in_progress", "replay"}, retried.text
    assert fleet.ran("idem_worker_killed_01") == 1  # never run a second time
    assert fleet.ledger_ok()


def _swallow(call: Any) -> None:
    with contextlib.suppress(httpx2.TransportError):  # the worker was killed under the request
        call()
