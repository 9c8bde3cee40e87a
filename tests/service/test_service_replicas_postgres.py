"""Three real `kcp-opa serve` replicas on one PostgreSQL database (``KCP_OPA_STORE``).

Sixteen executors race on the same receipts and idempotency keys through all three: each
receipt is consumed once, each handler runs once, and the database proves it (every run is a
row in ``handler_runs``). A database outage mid-run: every replica refuses (503
``store_unavailable``), then serves again by itself, with nothing acknowledged lost. A replica
killed (-9) while its handler runs: the execution is never run again by another replica.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
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
    start_server,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

from kcp_opa.trail.ledger import verify_ledger

pytestmark = pytest.mark.postgres
#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
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
class Cluster:
    urls: list[str]
    processes: list[Any]
    ledgers: list[Path]
    dsn: str
    server: Any

    def runs(self) -> Counter[str]:
        import psycopg

        with psycopg.connect(self.dsn) as connection:
            rows = connection.execute("SELECT idempotency_key FROM handler_runs").fetchall()
        return Counter(row[0] for row in rows)

    def executions(self) -> dict[str, str]:
        import psycopg

        with psycopg.connect(self.dsn) as connection:
            return dict(connection.execute("SELECT idempotency_key, state FROM executions").fetchall())


@pytest.fixture(scope="module")
def cluster(postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import psycopg

    work = tmp_path_factory.mktemp("replicas")
    dsn = postgres.database("kcp_replicas")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE handler_runs (idempotency_key TEXT NOT NULL, pid INTEGER NOT NULL)")
    registry, issuer_keys = write_registry(work)
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {token: principal for principal, token in WHO.items()})
    handlers = work / "handlers.json"
    pay = {"target": "replica_handlers:pay", "actions": ["execute_payment"]}  # bound to the action it serves
    hang = {"target": "replica_handlers:hang", "actions": ["execute_payment"]}
    handlers.write_text(json.dumps({"handlers": {"pay": pay, "hang": hang}}))
    common = ["--bundle", str(bundle), "--trust", str(registry), "--handlers", str(handlers)]
    common += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    common += ["--tokens", str(tokens), "--keyring", str(write_receipt_keyring(work))]
    tests = str(Path(__file__).resolve().parents[1])
    env = {
        "KCP_OPA_STORE": dsn,  # the one setting: no --store on the command line
        "KCP_OPA_TEST_HANDLER_DSN": dsn,
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    }
    processes, urls, ledgers = [], [], []
    try:
        for name in "abc":
            ledgers.append(work / f"{name}.jsonl")
            process, url = start_server([*common, "--ledger", str(ledgers[-1])], env=env)
            processes.append(process)
            urls.append(url)
        yield Cluster(urls, processes, ledgers, dsn, postgres)
    finally:
        for process in processes:
            stop_server(process)


def post(url: str, path: str, who: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {WHO[who]}"}, timeout=120)


def approved(cluster: Cluster, key: str, receipts: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The KYA action under ``key``, decided, answered and receipted across the replicas."""
    action = {**KYA, "idempotency_key": key}
    urls = cluster.urls
    decided = post(urls[0], "/v1/decisions", "local-agent", {"action": action})
    assert decided.status_code == 200, decided.text
    decision_id = decided.json()["decision_id"]
    opened = post(urls[1], f"/v1/decisions/{decision_id}/challenges", "local-agent", {})
    assert opened.status_code == 200, opened.text
    ids = {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}
    for index, (who, control) in enumerate(ANSWERS):
        body = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
        answered = post(urls[index % 3], f"/v1/challenges/{ids[control]}/result", who, body)
        assert answered.status_code == 200, answered.text
    issued = [post(urls[i % 3], "/v1/receipts", "approval-desk", {"decision_id": decision_id}) for i in range(receipts)]
    assert all(r.status_code == 200 for r in issued), [r.text for r in issued]
    return action, [r.json()["receipt"] for r in issued]


def test_sixteen_executors_on_three_replicas_run_each_handler_once(cluster: Cluster) -> None:
    work = [approved(cluster, f"idem_replica_race_{n:04d}", receipts=3) for n in range(4)]
    pairs = [(action, receipt) for action, receipts in work for receipt in receipts]

    def executor(index: int) -> list[tuple[str, str, int, dict[str, Any]]]:
        order = random.Random(index).sample(pairs, len(pairs))
        out = []
        for turn, (action, receipt) in enumerate(order):
            url = cluster.urls[(index + turn) % 3]
            body = {"action": action, "receipt": receipt, "handler": "pay"}
            response = post(url, "/v1/executions", "payments-executor", body)
            out.append((action["idempotency_key"], receipt["receipt_id"], response.status_code, response.json()))
        return out

    with ThreadPoolExecutor(EXECUTORS) as pool:
        results = [row for rows in pool.map(executor, range(EXECUTORS)) for row in rows]
    assert len(results) == EXECUTORS * len(pairs)
    unexpected = [r for r in results if r[2] != 200 and r[3].get("code") not in {"replay", "in_progress"}]
    assert unexpected == []
    first_uses = Counter(receipt for _, receipt, status, body in results if body.get("code") != "replay")
    assert sorted(first_uses.values()) == [1] * len(pairs)  # each receipt consumed exactly once
    ran = Counter(key for key, _, status, body in results if status == 200 and body["replayed"] is False)
    keys = {action["idempotency_key"] for action, _ in work}
    assert ran == Counter(dict.fromkeys(keys, 1))
    assert cluster.runs() == Counter(dict.fromkeys(keys, 1))  # the database: one side effect per key
    assert {k: v for k, v in cluster.executions().items() if k in keys} == dict.fromkeys(keys, "succeeded")
    for ledger in cluster.ledgers:
        assert verify_ledger(ledger).ok


def test_a_database_outage_is_refused_by_every_replica_and_recovered_from(cluster: Cluster) -> None:
    if not cluster.server.port:
        pytest.skip("an external server (KCP_OPA_TEST_POSTGRES) is not stopped by the tests")
    action, receipts = approved(cluster, "idem_replica_outage_01", receipts=2)
    done = post(cluster.urls[0], "/v1/executions", "payments-executor", {**_run(action, receipts[0])})
    assert done.status_code == 200 and done.json()["replayed"] is False
    cluster.server.stop()
    try:
        for url in cluster.urls:
            refused = post(url, "/v1/executions", "payments-executor", _run(action, receipts[1]))
            assert refused.status_code == 503 and refused.json()["code"] == "store_unavailable", refused.text
            decided = post(
                url, "/v1/decisions", "local-agent", {"action": {**KYA, "idempotency_key": "idem_replica_down_0001"}}
            )
            assert decided.status_code == 503 and decided.json()["code"] == "store_unavailable", decided.text
            status = httpx2.get(
                f"{url}/v1/status", headers={"Authorization": f"Bearer {WHO['local-agent']}"}, timeout=60
            )
            assert status.json()["store"]["ok"] is False and status.json()["ok"] is False
    finally:
        cluster.server.start()
    deadline = time.monotonic() + 60
    for url in cluster.urls:  # each replica recovers on its own: no restart
        while True:
            status = httpx2.get(
                f"{url}/v1/status", headers={"Authorization": f"Bearer {WHO['local-agent']}"}, timeout=60
            )
            if status.json()["store"]["ok"]:
                break
            assert time.monotonic() < deadline, status.text
            time.sleep(0.3)
        assert "path" not in status.json()["store"]  # an agent is never shown where the store is
    again = post(cluster.urls[1], "/v1/executions", "payments-executor", _run(action, receipts[0]))
    assert again.status_code == 409 and again.json()["code"] == "replay"  # consumed before the outage: kept
    after = post(cluster.urls[2], "/v1/executions", "payments-executor", _run(action, receipts[1]))
    assert after.status_code == 200 and after.json()["replayed"] is True  # refused during it, usable after
    assert cluster.runs()["idem_replica_outage_01"] == 1


def _run(action: dict[str, Any], receipt: dict[str, Any], handler: str = "pay") -> dict[str, Any]:
    return {"action": action, "receipt": receipt, "handler": handler}


def test_a_replica_killed_mid_execution_is_never_run_again(cluster: Cluster) -> None:
    action, receipts = approved(cluster, "idem_replica_killed_01", receipts=2)
    victim = cluster.processes[2]
    thread = threading.Thread(
        target=lambda: _swallow(
            lambda: post(cluster.urls[2], "/v1/executions", "payments-executor", _run(action, receipts[0], "hang"))
        )
    )
    thread.start()
    deadline = time.monotonic() + 60
    while cluster.runs()["idem_replica_killed_01"] == 0:
        assert time.monotonic() < deadline, "the handler never started"
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    thread.join(timeout=60)
    for url in cluster.urls[:2]:
        retried = post(url, "/v1/executions", "payments-executor", _run(action, receipts[1]))
        assert retried.status_code != 200 and retried.json()["code"] in {"in_progress", "replay"}, retried.text
    assert cluster.runs()["idem_replica_killed_01"] == 1  # never run a second time
    assert cluster.executions()["idem_replica_killed_01"] == "running"  # ambiguous once its lease expires
    for ledger in cluster.ledgers:
        assert verify_ledger(ledger).ok


def _swallow(call: Any) -> None:
    with contextlib.suppress(httpx2.TransportError):  # the replica was killed under the request
        call()


def test_the_serve_demo_runs_on_postgres(postgres: Any, tmp_path: Path) -> None:
    """`make serve-demo` with KCP_OPA_STORE=postgresql://...: the payment executed once, in the database."""
    import subprocess
    import sys

    import psycopg

    from kcp_opa.compile.compiler import CompileOptions, compile_bundle

    dsn = postgres.database("kcp_serve_demo")
    base, bundles = REPO / "fixtures" / "deployments" / "finance", tmp_path / "bundles"
    registry = REPO / "fixtures" / "trust" / "registry.yaml"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        REPO / "policies",
        bundles / "finance.tar.gz",
        options=CompileOptions(trust_path=registry),
    )
    env = {
        **os.environ,
        "KCP_OPA_STORE": dsn,
        "KCP_OPA_LEDGER": str(tmp_path / "demo.jsonl"),
        "KCP_OPA_BUNDLES": str(bundles),
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "serve_demo.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "executed idem_supplier_8000_001: PAY-0001" in proc.stdout
    assert "refused the same receipt again: replay" in proc.stdout
    with psycopg.connect(dsn) as connection:
        rows = connection.execute("SELECT idempotency_key, state FROM executions").fetchall()
    assert rows == [("idem_supplier_8000_001", "succeeded")]
    assert verify_ledger(tmp_path / "demo.jsonl").ok
