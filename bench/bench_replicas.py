"""Benchmark: decisions/s with 1, 2 and 3 `kcp-opa serve` replicas on one PostgreSQL ledger.

Not a test: it measures, prints a table and writes bench/results-replicas.json.

Each replica is a real process (``--transport http``, group commit) with ``--ledger`` and
``KCP_OPA_STORE`` on the same database, so every decision of every replica lands in one hash
chain. Clients POST the KYA supplier payment to ``/v1/data/kcp/gate/decision`` round-robin over
the replicas. The baseline row is one replica on the embedded default (a JSONL ledger, a SQLite
store). After each row the chain is dumped and verified: it must hold every decision, one chain.

The database is a throwaway PostgreSQL 15 cluster (initdb + pg_ctl on a loopback port, as in the
tests), or ``--dsn`` / ``KCP_OPA_BENCH_POSTGRES`` (its password in PGPASSWORD, never in the DSN);
each row gets a fresh database on it.

    .venv/bin/python bench/bench_replicas.py [--calls 600] [--clients 8]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
from rich.console import Console
from rich.table import Table

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.trail.ledger import read_entries, verify_ledger
from kcp_opa.trail.locations import readable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
TOKEN = "bench-token-" + "r" * 32


def start_replica(bundle: Path, ledger: str, store: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--bundle", str(bundle)]
    command += ["--port", str(port), "--ledger", ledger]
    env = {**os.environ, "KCP_OPA_SERVE_TOKEN": TOKEN, "KCP_OPA_STORE": store}
    process = subprocess.Popen(command, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx2.TransportError:
            time.sleep(0.1)
        if process.poll() is not None:
            break
    process.terminate()
    raise SystemExit("a replica did not start")


def drive(urls: list[str], calls: int, clients: int) -> dict[str, float]:
    """``calls`` decisions from ``clients`` concurrent clients, client i on replica i mod N."""
    latencies: list[float] = []

    async def one(index: int, count: int) -> None:
        url = urls[index % len(urls)]
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
            for _ in range(count):
                started = time.perf_counter()
                answer = await http.post(f"{url}/v1/data/kcp/gate/decision", json={"input": ACTION})
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text

    async def run() -> None:
        async with anyio.create_task_group() as group:
            for index in range(clients):
                group.start_soon(one, index, calls // clients)

    started = time.perf_counter()
    anyio.run(run)
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "calls": len(ordered),
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "per_s": len(ordered) / elapsed,
    }


def checked_chain(ledger: str) -> int:
    """The ledger verifies as one chain; its decision entries."""
    with readable(ledger) as path:
        report = verify_ledger(path)
        if not report.ok:
            raise SystemExit(f"the chain does not verify: {report.problems[0]}")
        return sum(1 for _, entry in read_entries(path) if entry.get("type") == "decision")


def measure(bundle: Path, ledger: str, store: str, replicas: int, calls: int, clients: int) -> dict[str, Any]:
    started = [start_replica(bundle, ledger, store) for _ in range(replicas)]
    try:
        urls = [url for _, url in started]
        drive(urls, clients * 5, clients)  # warm every replica (plans, pools)
        numbers = drive(urls, calls, clients)
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait(timeout=60)
    decisions = checked_chain(ledger)
    expected = numbers["calls"] + clients * 5
    if decisions != expected:
        raise SystemExit(f"the chain holds {decisions} decisions, {expected} were answered")
    return {**numbers, "replicas": replicas, "chain_decisions": decisions}


@contextlib.contextmanager
def database_server(dsn: str | None) -> Iterator[Any]:
    from pgcluster import PostgresServer, postgres_server

    if dsn:
        yield PostgresServer(dsn)
        return
    with postgres_server() as server:
        yield server


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=600, help="decisions per row")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients per row")
    parser.add_argument("--dsn", default=os.environ.get("KCP_OPA_BENCH_POSTGRES"), help="an existing server")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, database_server(args.dsn) as server:
        work = Path(tmp)
        base = REPO / "fixtures" / "deployments" / "finance"
        bundle = work / "finance.tar.gz"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle)
        embedded = measure(bundle, str(work / "ledger.jsonl"), str(work / "store.db"), 1, args.calls, args.clients)
        rows.append({"ledger": "JSONL file + SQLite store", **embedded})
        for replicas in (1, 2, 3):
            dsn = server.database(f"kcp_bench_replicas_{replicas}")
            row = measure(bundle, dsn, dsn, replicas, args.calls, args.clients)
            rows.append({"ledger": "PostgreSQL (ledger + store)", **row})
    table = Table(title=f"decisions/s, {args.calls} per row, {args.clients} clients ({os.cpu_count()} CPUs)")
    for column in ("ledger", "replicas", "p50 ms", "p99 ms", "decisions/s", "chain"):
        table.add_column(column, justify="left" if column == "ledger" else "right", no_wrap=True)
    for row in rows:
        table.add_row(
            row["ledger"],
            str(row["replicas"]),
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            f"{row['per_s']:.0f}",
            f"{row['chain_decisions']} ok",
        )
    Console(width=140).print(table)
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "calls": args.calls, "clients": args.clients}
    (REPO / "bench" / "results-replicas.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
