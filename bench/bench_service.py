"""Benchmark: one gate decision over MCP (streamable HTTP) and over the HTTP JSON API, beside decide().

Not a test: it measures, prints a table and writes bench/results-service.json.

The server is `kcp-opa serve --transport http` as a real process on a loopback port (ledger on,
group commit, as served). For each path it times the KYA supplier payment:
- ``decide()``: in-process ``Gate.decide()``, without a ledger and with the served ledger setting;
- ``MCP``: ``tools/call evaluate_action`` through the SDK's streamable HTTP client, one session per client;
- ``JSON API``: ``POST /v1/data/kcp/gate/decision`` (the OPA-compatible endpoint), one HTTP client each;
- ``JSON API, kept``: ``POST /v1/decisions`` (``evaluate_action``: the decision record is kept in the store);
- ``AuthZEN``: ``POST /access/v1/evaluation`` with the payment as an AuthZEN request (decided by
  ``evaluate_action``, so the decision is also kept in the store, as ``/v1/decisions`` keeps it);
with 1 and 8 concurrent clients: p50 / p99 latency per decision and decisions/s. The server
has a trust registry, fact attestations and a region (bench/servicectx.py), the in-process
gates the same sources, and every path must decide the payment as HUMAN_APPROVAL (never a hold
for missing context). ``decide()`` in-process is also timed through the worker pool the service
evaluates in (crash isolation).

    .venv/bin/python bench/bench_service.py [--calls 400] [--only "JSON API" --only AuthZEN]

``--only`` measures the paths whose name contains one of the words and prints them, writing no
results file (a quick look at one row).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servicectx import AGENT, in_process_gate, serve_args, write_context
from targets import service_targets
from vouched import expect

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.trail.ledger import AuditLedger

REPO = Path(__file__).resolve().parent.parent
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
TOKEN = "bench-token-" + "b" * 32


def summary(latencies: list[float], elapsed: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "calls": len(ordered),
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "per_s": len(ordered) / elapsed,
    }


def in_process(gate: Gate, calls: int, clients: int) -> dict[str, float]:
    expect(gate.decide(ACTION, principal=AGENT), ["HUMAN_APPROVAL"], "the payment, in-process")
    for _ in range(20):
        gate.decide(ACTION, principal=AGENT)

    def worker(count: int) -> list[float]:
        out = []
        for _ in range(count):
            started = time.perf_counter()
            gate.decide(ACTION, principal=AGENT)
            out.append(time.perf_counter() - started)
        return out

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = [t for part in pool.map(worker, [calls // clients] * clients) for t in part]
    return summary(latencies, time.perf_counter() - started)


async def concurrent(clients: int, calls: int, one: Callable[[int, list[float]], Awaitable[None]]) -> dict[str, float]:
    latencies: list[float] = []
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(clients):
            group.start_soon(one, calls // clients, latencies)
    return summary(latencies, time.perf_counter() - started)


def over_mcp(url: str, calls: int, clients: int) -> dict[str, float]:
    async def one(count: int, latencies: list[float]) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            warm = await client.call_tool("evaluate_action", {"action": ACTION})  # warm the session
            content = getattr(warm, "structured_content", None) or getattr(warm, "structuredContent", None)
            expect(content or {}, ["HUMAN_APPROVAL"], "the payment over MCP")
            for _ in range(count):
                started = time.perf_counter()
                result = await client.call_tool("evaluate_action", {"action": ACTION})
                latencies.append(time.perf_counter() - started)
                assert not result.is_error

    return anyio.run(concurrent, clients, calls, one)


def over_json_api(url: str, calls: int, clients: int, route: str = "/v1/data/kcp/gate/decision") -> dict[str, float]:
    """The OPA-compatible route (decided, not kept), or ``/v1/decisions`` (kept, as AuthZEN's are)."""
    body = {"input": ACTION} if route.startswith("/v1/data") else {"action": ACTION}

    async def one(count: int, latencies: list[float]) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            warm = (await http.post(f"{url}{route}", json=body)).json()
            expect(warm.get("result", warm), ["HUMAN_APPROVAL"], f"the payment over {route}")
            for _ in range(count):
                started = time.perf_counter()
                answer = await http.post(f"{url}{route}", json=body)
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200

    return anyio.run(concurrent, clients, calls, one)


def authzen_request(action: dict[str, Any]) -> dict[str, Any]:
    """The action as a gateway asks AuthZEN (docs/service.md, "AuthZEN": the mapping table)."""
    rest = ("tenant_id", "subject_id", "scenario", "action_id", "idempotency_key", "created_at")
    rest += ("evidence_references", "attributes")
    target = dict(action["target"])
    return {
        "subject": {"type": "agent", "id": action["agent_id"], "properties": dict(action["authorization_context"])},
        "resource": {"type": target.pop("type"), "id": target.pop("reference"), "properties": target},
        "action": {
            "name": action["requested_action"],
            "properties": {"action_type": action["action_type"], "amount": action["amount"]},
        },
        "context": {key: action[key] for key in rest if key in action},
    }


def over_authzen(url: str, calls: int, clients: int) -> dict[str, float]:
    request = authzen_request(ACTION)

    async def one(count: int, latencies: list[float]) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            warm = (await http.post(f"{url}/access/v1/evaluation", json=request)).json()
            seen = {"decision": warm["context"]["routing_state"], "reason_codes": warm["context"]["reason_codes"]}
            expect(seen, ["HUMAN_APPROVAL"], "the payment over AuthZEN")
            for _ in range(count):
                started = time.perf_counter()
                answer = await http.post(f"{url}/access/v1/evaluation", json=request)
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200 and answer.json()["decision"] is False

    return anyio.run(concurrent, clients, calls, one)


def start_server(bundle: Path, work: Path, context: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--bundle", str(bundle)]
    command += ["--port", str(port), "--store", str(work / "service.db"), "--ledger", str(work / "service.jsonl")]
    process = subprocess.Popen([*command, *context], env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx2.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise SystemExit("the server did not start")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400, help="decisions per measurement")
    parser.add_argument("--only", action="append", default=[], help="measure only paths naming this (repeatable)")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = REPO / "fixtures" / "deployments" / "finance"
        bundle = work / "finance.tar.gz"
        paths = write_context(work, TOKEN)
        registry = paths["trust.yaml"]
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle, trust_path=registry)
        bare = in_process_gate(bundle, paths)
        ledger = AuditLedger(work / "inproc.jsonl", durability="group")
        ledgered = in_process_gate(bundle, paths, ledger=ledger)
        pooled = in_process_gate(bundle, paths, ledger=ledger, isolation="process")
        process, url = start_server(bundle, work, serve_args(paths))
        try:
            paths_timed: dict[str, Callable[[int], dict[str, float]]] = {  # clients -> numbers
                "decide() in-process, no ledger": lambda n: in_process(bare, args.calls, n),
                "decide() in-process, ledger (group commit)": lambda n: in_process(ledgered, args.calls, n),
                "decide() through the worker pool, ledger": lambda n: in_process(pooled, args.calls, n),
                "MCP tools/call over streamable HTTP": lambda n: over_mcp(url, args.calls, n),
                "HTTP JSON API (OPA-compatible)": lambda n: over_json_api(url, args.calls, n),
                "HTTP JSON API /v1/decisions (kept)": lambda n: over_json_api(url, args.calls, n, "/v1/decisions"),
                "AuthZEN /access/v1/evaluation": lambda n: over_authzen(url, args.calls, n),
            }
            for clients in (1, 8):
                for path, timed in paths_timed.items():
                    if not args.only or any(word in path for word in args.only):
                        rows.append({"path": path, "clients": clients, **timed(clients)})
        finally:
            pooled.engine.close()
            process.terminate()
            process.wait(timeout=30)
    table = Table(title=f"one supplier-payment decision, {args.calls} per row ({platform.processor() or 'cpu'})")
    for column in ("path", "clients", "p50 ms", "p99 ms", "decisions/s"):
        table.add_column(column, justify="left" if column == "path" else "right", no_wrap=True)
    for row in rows:
        table.add_row(
            row["path"], str(row["clients"]), f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}", f"{row['per_s']:.0f}"
        )
    Console(width=140).print(table)
    if args.only:
        return 0
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "calls": args.calls}
    (REPO / "bench" / "results-service.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    suite = REPO / "bench" / "results.json"  # make bench: the suite ran first; its targets gain the service's
    if suite.exists():
        results = json.loads(suite.read_text())
        kept = [t for t in results.get("targets", []) if not t["row"].startswith("service:")]
        results["targets"] = kept + service_targets(rows)
        suite.write_text(json.dumps(results, indent=2) + "\n")
    for item in service_targets(rows):
        print(f"{item['row']}: {item['measured']} (target {item['target']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
