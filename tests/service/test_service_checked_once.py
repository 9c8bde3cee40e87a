"""A served request walks the caller's action once: the check that binds it to the caller
(callers.py) makes the :class:`~kcp_opa.decide.checked.CheckedAction` the gate decides, records
and keeps, never re-checked after (a second walk costs ~0.4 ms of a decision's Python).

Counted on a real HTTP server in this process, for the JSON API's two decision routes and MCP's
``tools/call evaluate_action``: one walk of the action per request, and the decision is the
policy's.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import uvicorn
from conftest import DEPLOYMENTS, POLICIES, REPO
from netkit import free_port
from servicekit import local_context, open_local

import kcp_opa.decide.action as action_module
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.service.callers import LOCAL_AGENT, StaticAuthenticator
from kcp_opa.service.config import HostParts
from kcp_opa.service.http import build_app

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
TOKEN = "c" * 40
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("checked-once")
    base = DEPLOYMENTS / "finance"
    bundle = work / "finance.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle)
    service = open_local(bundle, work, HostParts(context=local_context("user_001")))
    app = build_app(service, StaticAuthenticator({TOKEN: LOCAL_AGENT}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the walks of an action (``check_action``'s one copy-and-check of a mapping)."""
    counted: list[int] = []
    walk = action_module._checked_copy

    def counting(value: Any) -> Any:
        counted.append(1)
        return walk(value)

    monkeypatch.setattr(action_module, "_checked_copy", counting)
    return counted


@pytest.mark.parametrize(
    ("route", "body"),
    [("/v1/data/kcp/gate/decision", {"input": KYA}), ("/v1/decisions", {"action": KYA})],
)
def test_a_json_api_decision_walks_the_action_once(url: str, walks: list[int], route: str, body: Any) -> None:
    for _ in range(3):
        answer = httpx2.post(f"{url}{route}", json=body, headers=HEADERS, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json().get("result", answer.json())["decision"] == "HUMAN_APPROVAL"
    assert len(walks) == 3


def test_an_mcp_evaluate_action_walks_the_action_once(url: str, walks: list[int]) -> None:
    accept = {**HEADERS, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    opened = httpx2.post(
        f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, headers=accept
    )
    assert opened.status_code == 200, opened.text
    session = {**accept, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    httpx2.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    call = {"name": "evaluate_action", "arguments": {"action": KYA}}
    for number in range(3):
        message = {"jsonrpc": "2.0", "id": 10 + number, "method": "tools/call", "params": call}
        answer = httpx2.post(f"{url}/mcp", json=message, headers=session, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["structuredContent"]["decision"] == "HUMAN_APPROVAL"
    assert len(walks) == 3


def test_a_caller_stating_another_agent_is_still_refused(url: str, walks: list[int]) -> None:
    """Walking once weakens nothing: the caller binding refuses before anything is decided."""
    answer = httpx2.post(
        f"{url}/v1/decisions", json={"action": {**KYA, "agent_id": "someone-else"}}, headers=HEADERS, timeout=60
    )
    assert answer.status_code == 403 and answer.json()["code"] == "principal_mismatch"
    assert len(walks) == 1
