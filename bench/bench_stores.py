"""Benchmark: receipts verified and consumed per second, SQLite beside PostgreSQL.

Not a test (and not part of ``make test``). Each consume is durable when it returns on both
(SQLite: WAL, ``synchronous=FULL``; PostgreSQL: a committed transaction, ``fsync`` on).
Measures one thread and eight threads, the plain consume and the executor's consume-and-claim
(one transaction). PostgreSQL is the throwaway server of the tests (``tests/pgcluster.py``) or
``KCP_OPA_TEST_POSTGRES``. Writes bench/results-stores.json.

    .venv/bin/python bench/bench_stores.py [--count 2000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kcp_opa.authorize.receipts import issue_for_checked_decision, verify_receipt
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.decide.action import action_hash
from kcp_opa.stores.opening import open_executor_store
from kcp_opa.stores.protocols import ExecutorStore


def issue_receipt(document: Any, action: Any, key: Any, *, now: Any) -> dict[str, Any]:
    """A receipt for the bench's own gate's decision document (the library's entry point takes a
    sealed record; the bench times the signing and checks, not the desk)."""
    return issue_for_checked_decision(document, action, key, now=now).to_dict()


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


def _receipts(count: int) -> tuple[Keyring, list[dict[str, Any]]]:
    key = generate_ed25519("bench-stores")
    decision = {
        "decision_id": "dec_bench",
        "action_hash": action_hash(ACTION),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    return Keyring({key.kid: key}, key.kid), [issue_receipt(decision, ACTION, key, now=ISSUED) for _ in range(count)]


class _Claiming:
    """The executor's consume step: consume and claim a fresh key in one transaction."""

    def __init__(self, store: ExecutorStore) -> None:
        self.store = store

    def consume(self, nonce: str, receipt_id: str, expires_at: str) -> bool:
        consumed, _ = self.store.consume_and_claim(
            nonce, receipt_id, expires_at, idempotency_key=f"k-{nonce}", action_hash="h"
        )
        return consumed


def _rate(work: Callable[[int], None], count: int, threads: int) -> float:
    started = time.perf_counter()
    if threads == 1:
        for i in range(count):
            work(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(count)))
    return count / (time.perf_counter() - started)


def measure(fresh: Callable[[str], str], count: int) -> dict[str, float]:
    """Rates per mode and thread count, each on a fresh store from ``fresh(name)``."""
    out: dict[str, float] = {}
    for mode in ("consume", "consume_and_claim"):
        for threads in (1, 8):
            store = open_executor_store(fresh(f"bench_{mode}_{threads}"))
            for n in range(16):  # warm up: connections made, tables and caches hot
                store.consume(f"warm-{n}", f"warm-r-{n}", "x")
            keyring, receipts = _receipts(count)
            nonces: Any = store if mode == "consume" else _Claiming(store)

            def run(
                i: int, receipts: list[dict[str, Any]] = receipts, keyring: Keyring = keyring, nonces: Any = nonces
            ) -> None:
                verify_receipt(
                    receipts[i],
                    ACTION,
                    keyring=keyring,
                    policy_versions={"0.1.0"},
                    nonce_store=nonces,
                    now=ISSUED + dt.timedelta(seconds=5),
                )

            out[f"{mode}/{threads}"] = round(_rate(run, count, threads), 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    from pgcluster import postgres_server

    results: dict[str, Any] = {"python": platform.python_version(), "count": args.count}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = measure(lambda name: str(Path(tmp) / f"{name}.db"), args.count)
    with postgres_server() as server:
        results["postgresql"] = measure(server.database, args.count)
    table = Table(title=f"verify + consume per second ({args.count} Ed25519 receipts)")
    for column in ("backend", "consume, 1 thread", "consume, 8 threads", "consume+claim, 1", "consume+claim, 8"):
        table.add_column(column)
    for backend in ("sqlite", "postgresql"):
        row = results[backend]
        table.add_row(
            backend, *(str(row[k]) for k in ("consume/1", "consume/8", "consume_and_claim/1", "consume_and_claim/8"))
        )
    Console().print(table)
    (REPO / "bench" / "results-stores.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
