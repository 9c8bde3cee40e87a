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
with 1, 8 and 32 concurrent clients: p50 / p99 latency per decision and decisions/s. The server
has a trust registry, fact attestations and a region (bench/servicectx.py), the in-process
gates the same sources, and every path must decide the payment as HUMAN_APPROVAL (never a hold
for missing context). ``decide()`` in-process is also timed through the worker pool the service
evaluates in (crash isolation).

The server runs with ``--workers 1`` and ``--workers 2`` (``--workers``): MCP and the
OPA-compatible JSON API are timed on each, the other paths on one worker. ``--repeat 3`` times
each row three times and keeps the run with the median decisions/s (a shared box is noisy). The
scaling targets (issue 44: the JSON API at 8 clients, MCP at 8 clients, the one-client overhead)
are written beside the rows, with the ceiling one box can reach: its cores divided by the
decision's own time in the evaluator pool.

    .venv/bin/python bench/bench_service.py [--calls 400] [--repeat 3] [--workers 1 --workers 2]
        [--only "JSON API" --only AuthZEN]

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

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
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


def start_server(bundle: Path, work: Path, context: list[str], workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--bundle", str(bundle)]
    command += ["--port", str(port), "--store", str(work / "service.db"), "--ledger", str(work / "service.jsonl")]
    process = subprocess.Popen([*command, *context, "--workers", str(workers)], env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    for _ in range(1800):
        try:  # every worker ready: the merged /metrics names each (kcp_opa.service.fleet)
            text = httpx2.get(f"{url}/metrics", timeout=5).text
            if workers == 1 or all(f'worker="{n}"' in text for n in range(workers)):
                return process, url
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    process.terminate()
    raise SystemExit("the server did not start")


def median_of(repeat: int, timed: Callable[[], dict[str, float]]) -> dict[str, Any]:
    """The run with the median decisions/s of ``repeat`` runs (its p50 and p99 with it)."""
    runs = sorted((timed() for _ in range(repeat)), key=lambda r: r["per_s"])
    return {**runs[len(runs) // 2], "runs_per_s": [round(r["per_s"], 1) for r in runs]}


SCALED = ("MCP tools/call over streamable HTTP", "HTTP JSON API (OPA-compatible)")


def scaling_targets(rows: list[dict[str, Any]], cpus: int) -> list[dict[str, Any]]:
    """Issue 44's service rows: the best of the worker counts measured, and the box's ceiling."""

    def best(path: str, clients: int) -> dict[str, Any]:
        found = [r for r in rows if r["path"] == path and r["clients"] == clients]
        return max(found, key=lambda r: r["per_s"])

    pooled = next(r for r in rows if r["path"].startswith("decide() through the worker pool") and r["clients"] == 1)
    ceiling = cpus / (pooled["p50_ms"] / 1000)
    http8, mcp8 = best(SCALED[1], 8), best(SCALED[0], 8)
    one = {r["path"]: r for r in rows if r["clients"] == 1 and r["workers"] in (0, 1)}  # in-process: 0
    overhead = one[SCALED[1]]["p50_ms"] / one["decide() in-process, ledger (group commit)"]["p50_ms"]
    note = f"ceiling {ceiling:,.0f}/s = {cpus} cores / {pooled['p50_ms']:.1f} ms per decision in the evaluator pool"
    return [
        {"row": "service: HTTP JSON API, 8 clients", "target": ">= 1,000 decisions/s",
         "measured": f"{http8['per_s']:,.0f}/s with {http8['workers']} worker(s); {note}",
         "values": {"per_s": http8["per_s"], "workers": http8["workers"], "ceiling_per_s": ceiling},
         "met": http8["per_s"] >= 1000},
        {"row": "service: MCP tools/call, 8 clients", "target": ">= 500 decisions/s",
         "measured": f"{mcp8['per_s']:,.0f}/s with {mcp8['workers']} worker(s); {note}",
         "values": {"per_s": mcp8["per_s"], "workers": mcp8["workers"], "ceiling_per_s": ceiling},
         "met": mcp8["per_s"] >= 500},
        {"row": "service: HTTP p50 over in-process decide(), 1 client", "target": "<= 1.2x",
         "measured": f"{overhead:.2f}x", "values": {"ratio": overhead}, "met": overhead <= 1.2},
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400, help="decisions per measurement")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; the median decisions/s is kept")
    parser.add_argument("--workers", type=int, action="append", help="serve --workers to time (repeatable; 1 and 2)")
    parser.add_argument("--only", action="append", default=[], help="measure only paths naming this (repeatable)")
    args = parser.parse_args()
    fleet = args.workers or [1, 2]
    rows: list[dict[str, Any]] = []

    def measure(path: str, clients: int, workers: int, timed: Callable[[], dict[str, float]]) -> None:
        if not args.only or any(word in path for word in args.only):
            rows.append({"path": path, "clients": clients, "workers": workers, **median_of(args.repeat, timed)})
            print(f"{path}, {clients} clients, {workers} worker(s): {rows[-1]['per_s']:.0f}/s", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = REPO / "fixtures" / "deployments" / "finance"
        bundle = work / "finance.tar.gz"
        paths = write_context(work, TOKEN)
        registry = paths["trust.yaml"]
        compile_bundle(
            [base / "knowledge.yaml"],
            base / "matrix.yaml",
            REPO / "policies",
            bundle,
            options=CompileOptions(trust_path=registry),
        )
        bare = in_process_gate(bundle, paths)
        ledger = AuditLedger(work / "inproc.jsonl", durability="group")
        ledgered = in_process_gate(bundle, paths, ledger=ledger)
        pooled = in_process_gate(bundle, paths, ledger=ledger, isolation="process")
        try:
            local: dict[str, Gate] = {
                "decide() in-process, no ledger": bare,
                "decide() in-process, ledger (group commit)": ledgered,
                "decide() through the worker pool, ledger": pooled,
            }
            for clients in (1, 8):
                for path, gate in local.items():
                    measure(path, clients, 0, lambda g=gate, n=clients: in_process(g, args.calls, n))
        finally:
            pooled.engine.close()
        for workers in fleet:
            process, url = start_server(bundle, work, serve_args(paths), workers)
            try:
                served: dict[str, Callable[[str, int], dict[str, float]]] = {
                    SCALED[0]: lambda u, n: over_mcp(u, args.calls, n),
                    SCALED[1]: lambda u, n: over_json_api(u, args.calls, n),
                }
                if workers == fleet[0]:  # the routes that keep the decision: on the first fleet only
                    served["HTTP JSON API /v1/decisions (kept)"] = lambda u, n: over_json_api(
                        u, args.calls, n, "/v1/decisions"
                    )
                    served["AuthZEN /access/v1/evaluation"] = lambda u, n: over_authzen(u, args.calls, n)
                for clients in (1, 8, 32):
                    for path, timed in served.items():
                        if clients == 32 and path not in SCALED:
                            continue
                        measure(path, clients, workers, lambda t=timed, n=clients, u=url: t(u, n))
            finally:
                process.terminate()
                process.wait(timeout=60)
    table = Table(title=f"one supplier-payment decision, {args.calls} per row ({platform.processor() or 'cpu'})")
    for column in ("path", "workers", "clients", "p50 ms", "p99 ms", "decisions/s"):
        table.add_column(column, justify="left" if column == "path" else "right", no_wrap=True)
    for row in rows:
        served_by = str(row["workers"]) if row["workers"] else "-"
        p50, p99, per_s = f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}", f"{row['per_s']:.0f}"
        table.add_row(row["path"], served_by, str(row["clients"]), p50, p99, per_s)
    Console(width=140).print(table)
    if args.only:
        return 0
    cpus = os.cpu_count() or 1
    meta = {"python": platform.python_version(), "cpus": cpus, "calls": args.calls, "repeat": args.repeat}
    meta["load_average_at_end"] = list(os.getloadavg())
    scaling = scaling_targets(rows, cpus)
    single = [r for r in rows if r["workers"] in (0, 1)]  # the one-process overhead row: one worker
    document = {"meta": meta, "rows": rows, "targets": scaling}
    (REPO / "bench" / "results-service.json").write_text(json.dumps(document, indent=2) + "\n")
    suite = REPO / "bench" / "results.json"  # make bench: the suite ran first; its targets gain the service's
    if suite.exists():
        results = json.loads(suite.read_text())
        kept = [t for t in results.get("targets", []) if not t["row"].startswith("service:")]
        results["targets"] = kept + service_targets(single) + scaling
        suite.write_text(json.dumps(results, indent=2) + "\n")
    for item in [*service_targets(single), *scaling]:
        print(f"{item['row']}: {item['measured']} (target {item['target']}, met: {item['met']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
