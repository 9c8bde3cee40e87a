"""``kcp-opa serve --workers N``: N real worker processes on one port, supervised.

The kernel spreads the connections over the workers (each decides with its own gate and
appends to the one file ledger under its lock: the chain verifies); ``/metrics`` answers every
worker's counters, labelled ``worker``; a worker killed with -9 is restarted and said on stderr;
SIGTERM drains every worker and leaves none behind; the options it cannot serve are refused in
one line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import REPO
from servicekit import SERVICE_ISSUER, compile_finance, stop_server, write_registry, write_tokens
from workerkit import ready_workers, start_fleet, wait_for, worker_pids

from kcp_opa.trail.ledger import read_entries, verify_ledger

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
AGENT = "t-agent-" + "a" * 32


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    work = tmp_path_factory.mktemp("workers")
    registry, keys = write_registry(work)
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {AGENT: "local-agent"})
    ledger = work / "l.jsonl"
    args = ["--bundle", str(bundle), "--store", str(work / "s.db"), "--ledger", str(ledger), "--tokens", str(tokens)]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-keyring", str(keys)]
    process, url = start_fleet(args, 2)
    yield process, url, ledger
    stop_server(process)


def _decide(url: str) -> httpx2.Response:
    body = {"input": KYA}
    return httpx2.post(
        f"{url}/v1/data/kcp/gate/decision", json=body, headers={"Authorization": f"Bearer {AGENT}"}, timeout=120
    )


def test_two_workers_share_the_port_and_the_ledger_chain(fleet: Any) -> None:
    process, url, ledger = fleet
    assert len(worker_pids(process.pid)) == 2
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _decide(url), range(48)))
    assert [a.status_code for a in answers] == [200] * 48
    assert {a.json()["result"]["decision"] for a in answers} == {"HUMAN_APPROVAL"}
    metrics = httpx2.get(f"{url}/metrics", timeout=30).text
    served = {
        w: float(n)
        for w, n in re.findall(r'kcp_opa_tool_calls_total\{tool="opa_decision",worker="(\d)"\} (\S+)', metrics)
    }
    assert set(served) == {"0", "1"} and all(n > 0 for n in served.values())  # both workers decided
    assert sum(served.values()) >= 48
    ids = {a.json()["decision_id"] for a in answers}
    recorded = {e.get("decision_id") for _, e in read_entries(ledger) if e.get("type") == "decision"}
    assert ids <= recorded  # every decision of both workers is in the one chain
    assert verify_ledger(ledger).ok


def test_a_worker_killed_is_restarted_and_said(fleet: Any) -> None:
    process, url, ledger = fleet
    before = worker_pids(process.pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(now := worker_pids(process.pid)) == 2 and victim not in now, "the worker was not restarted")
    wait_for(lambda: len(ready_workers(url)) == 2, "the restarted worker never became ready")
    assert all(_decide(url).status_code == 200 for _ in range(8))
    assert verify_ledger(ledger).ok


def test_sigterm_drains_every_worker_and_leaves_none(tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    tokens = write_tokens(tmp_path, {AGENT: "local-agent"})
    ledger = tmp_path / "l.jsonl"
    args = [
        "--bundle",
        str(bundle),
        "--store",
        str(tmp_path / "s.db"),
        "--ledger",
        str(ledger),
        "--tokens",
        str(tokens),
    ]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-keyring", str(keys)]
    process, url = start_fleet(args, 2)
    workers = worker_pids(process.pid)
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(now := worker_pids(process.pid)) == 2 and victim not in now, "the worker was not restarted")

    def decide_or_refused(_: int) -> httpx2.Response | None:
        try:
            return _decide(url)
        except httpx2.TransportError:  # sent after the workers stopped accepting: never answered
            return None

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(decide_or_refused, n) for n in range(16)]
        time.sleep(1.0)  # some are answered, some in flight
        process.send_signal(signal.SIGTERM)
        finished = [a for f in running if (a := f.result()) is not None]
    assert finished and all(a.status_code == 200 for a in finished)  # whatever was answered, was decided
    assert process.wait(timeout=60) == 0
    left = [
        pid
        for pid in workers
        if Path(f"/proc/{pid}").exists() and b"kcp_opa" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert left == []
    said = process.stderr.read() if process.stderr else ""
    assert f"worker 0 (pid {victim}) died (signal SIGKILL)" in said or f"(pid {victim}) died (signal SIGKILL)" in said
    assert "restarted (pid" in said and "draining the workers" in said
    accepted = {a.json()["decision_id"] for a in finished if a.status_code == 200}
    recorded = {e.get("decision_id") for _, e in read_entries(ledger) if e.get("type") == "decision"}
    assert accepted <= recorded  # nothing a drained worker answered is missing from the chain
    assert verify_ledger(ledger).ok


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--transport", "stdio"], "--workers needs --transport http"),
        (["--transport", "http", "--bundle-source", "x.tar.gz"], "--workers with --bundle-source"),
    ],
)
def test_workers_refuses_what_it_cannot_serve_in_one_line(tmp_path: Path, extra: list[str], said: str) -> None:
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(b"")
    command = [sys.executable, "-m", "kcp_opa", "serve", "--bundle", str(bundle), "--workers", "2", *extra]
    env = {**os.environ, "KCP_OPA_SERVE_TOKEN": "t" * 40}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


def test_an_mcp_client_is_served_by_whichever_worker_takes_its_connection(fleet: Any) -> None:
    """Each call on a new connection (the kernel picks the worker): none is refused for a session
    another worker opened, and each decides."""
    _, url, _ = fleet
    accept = {"Authorization": f"Bearer {AGENT}", "Accept": "application/json, text/event-stream"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    opened = httpx2.post(
        f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, headers=accept
    )
    assert opened.status_code == 200, opened.text
    session = {**accept, "mcp-protocol-version": "2025-11-25"}
    if "mcp-session-id" in opened.headers:
        session["mcp-session-id"] = opened.headers["mcp-session-id"]
    httpx2.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    before = _served_tools(url)
    call = {"name": "evaluate_action", "arguments": {"action": KYA}}
    for number in range(16):
        with httpx2.Client(timeout=120) as fresh:  # a new connection each time
            message = {"jsonrpc": "2.0", "id": 10 + number, "method": "tools/call", "params": call}
            answer = fresh.post(f"{url}/mcp", json=message, headers=session)
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["structuredContent"]["decision"] == "HUMAN_APPROVAL"
    after = _served_tools(url)
    assert all(after.get(w, 0) > before.get(w, 0) for w in ("0", "1"))  # both workers answered the client


def _served_tools(url: str) -> dict[str, float]:
    text = httpx2.get(f"{url}/metrics", timeout=30).text
    return {
        w: float(n)
        for w, n in re.findall(r'kcp_opa_tool_calls_total\{tool="evaluate_action",worker="(\d)"\} (\S+)', text)
    }


def test_a_ui_session_opened_on_one_worker_is_honoured_by_every_worker(tmp_path: Path) -> None:
    """The UI's sessions live in the store, not in a worker's memory: a sign-in answered by one
    worker holds on whichever worker takes the next request (fails with per-process sessions)."""
    from uikit import _http_session, ui_servers

    with ui_servers(tmp_path, extra=["--workers", "2"]) as (server,):
        wait_for(lambda: len(ready_workers(server["url"])) == 2, "both workers ready")
        client, _ = _http_session(server, "approver")
        answers = set()
        for _ in range(40):  # new connections: the kernel spreads them over the workers
            fresh = httpx2.get(f"{server['url']}/ui/inbox", cookies=dict(client.cookies), timeout=60)
            answers.add(fresh.status_code)
        assert answers == {200}, answers
