"""`kcp-opa serve --transport http` as a real process on a free loopback port, with concurrent clients.

MCP over streamable HTTP (the SDK's client) and the JSON API on the same port; bearer tokens;
unauthenticated calls refused with 401 and audited; the OPA-compatible endpoint; status, health
and Prometheus metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from netkit import free_port
from servicekit import local_context, open_local

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.trail.ledger import read_entries, verify_ledger

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
TOKEN = "kcp-opa-test-token-" + "x" * 24
CLIENTS = 8
#: Without --trust the server knows none of the agent's facts (its scope, the beneficiary's
#: status): the KYA payment is held, ESCALATE context_missing, whatever the action states.
HELD = "ESCALATE"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("http")
    bundle = work / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle)
    port = free_port()
    ledger = work / "ledger.jsonl"
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--bundle", str(bundle)]
    command += ["--port", str(port), "--store", str(work / "service.db"), "--ledger", str(ledger)]
    env = {**os.environ, "KCP_OPA_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"server did not start: {process.stderr.read() if process.stderr else ''}")
            time.sleep(0.1)
        yield url, ledger
    finally:
        process.terminate()
        process.wait(timeout=30)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_unauthenticated_calls_are_refused_with_401_and_audited(server: tuple[str, Path]) -> None:
    url, ledger = server
    before = sum(1 for _, e in read_entries(ledger) if e.get("code") == "unauthenticated") if ledger.exists() else 0
    mcp_call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answers = [
        httpx2.post(f"{url}/mcp", json=mcp_call, headers={"Accept": "application/json, text/event-stream"}),
        httpx2.post(f"{url}/mcp", json=mcp_call, headers={**auth("wrong-token"), "Accept": "application/json"}),
        httpx2.post(f"{url}/v1/decisions", json={"action": KYA}),
        httpx2.post(f"{url}/v1/data/kcp/gate/decision", json={"input": KYA}, headers=auth(TOKEN.upper())),
        httpx2.get(f"{url}/v1/status"),
    ]
    assert [a.status_code for a in answers] == [401] * 5
    assert all(a.json()["code"] == "unauthenticated" for a in answers)
    audited = [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("code") == "unauthenticated"]
    assert len(audited) - before == 5
    assert all(e["principal"] is None for e in audited)


def test_concurrent_mcp_clients_over_streamable_http(server: tuple[str, Path]) -> None:
    url, _ = server
    answers: list[tuple[list[str], str, bool, str]] = []

    async def one_client() -> None:
        async with (
            httpx2.AsyncClient(headers=auth(), timeout=60) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            names = [t.name for t in (await client.list_tools()).tools]
            decided = await client.call_tool("evaluate_financial_action", {"action": KYA})
            refused = await client.call_tool("issue_delegation_receipt", {"decision_id": "dec_x"})
            assert isinstance(decided.structured_content, dict)
            assert isinstance(refused.structured_content, dict)
            content = refused.structured_content
            answers.append((names, decided.structured_content["decision"], refused.is_error, content["code"]))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(CLIENTS):
                group.start_soon(one_client)

    anyio.run(main)
    assert len(answers) == CLIENTS
    for names, decision, refused, code in answers:
        assert names[:7] == [
            "evaluate_financial_action",
            "create_control_challenge",
            "record_control_result",
            "issue_delegation_receipt",
            "verify_and_consume_receipt",
            "execute_authorized_action",
            "write_audit_event",
        ]
        assert decision == HELD and refused and code == "not_authorized"


def test_an_action_cannot_state_another_authenticated_principal(server: tuple[str, Path]) -> None:
    """KCP access reads authorization_context.authenticated_principal: over the service it must be the caller."""
    url, ledger = server

    def stating(principal: str) -> dict[str, Any]:
        action = json.loads(json.dumps(KYA))
        action["authorization_context"]["authenticated_principal"] = principal
        return action

    before = sum(1 for _, e in read_entries(ledger) if e.get("code") == "principal_mismatch")
    forged = [
        httpx2.post(f"{url}/v1/decisions", json={"action": stating("cfo@example.com")}, headers=auth()),
        httpx2.post(f"{url}/v1/data/kcp/gate/decision", json={"input": stating("cfo@example.com")}, headers=auth()),
        # A Cyrillic small o (U+043E) that looks like the caller's own id is not the caller.
        httpx2.post(f"{url}/v1/decisions", json={"action": stating("l\u043ecal-agent")}, headers=auth()),
    ]
    assert [a.status_code for a in forged] == [403] * 3
    assert all(a.json()["code"] == "principal_mismatch" for a in forged)
    audited = [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("code") == "principal_mismatch"]
    assert len(audited) - before == 3
    # The caller's id in another case is refused too (rate limits count per principal as written):
    # only its exact canonical id is the caller, decided as usual.
    spelled = httpx2.post(f"{url}/v1/decisions", json={"action": stating("LOCAL-AGENT")}, headers=auth())
    assert spelled.status_code == 403 and spelled.json()["code"] == "principal_mismatch"
    own = httpx2.post(f"{url}/v1/decisions", json={"action": stating("local-agent")}, headers=auth())
    assert own.status_code == 200 and own.json()["decision"] == HELD


def test_an_action_cannot_state_a_scope_its_caller_was_not_granted(server: tuple[str, Path]) -> None:
    """KCP access: restricted reads principal_scopes; a server without a registry grants none."""
    url, ledger = server

    def stating(scopes: list[str]) -> dict[str, Any]:
        action = json.loads(json.dumps(KYA))
        action["authorization_context"]["principal_scopes"] = scopes
        return action

    before = sum(1 for _, e in read_entries(ledger) if e.get("code") == "scope_not_granted")
    forged = [
        httpx2.post(f"{url}/v1/decisions", json={"action": stating(["executive-team"])}, headers=auth()),
        httpx2.post(f"{url}/v1/data/kcp/gate/decision", json={"input": stating(["executive-team"])}, headers=auth()),
    ]
    assert [a.status_code for a in forged] == [403, 403]
    assert all(a.json()["code"] == "scope_not_granted" for a in forged)
    audited = [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("code") == "scope_not_granted"]
    assert len(audited) - before == 2
    none_stated = httpx2.post(f"{url}/v1/decisions", json={"action": stating([])}, headers=auth())
    assert none_stated.status_code == 200 and none_stated.json()["decision"] == HELD


def test_json_api_opa_compatible_status_and_metrics(server: tuple[str, Path]) -> None:
    url, ledger = server

    async def main() -> list[Any]:
        async with httpx2.AsyncClient(headers=auth(), timeout=60) as http:
            results: list[Any] = [None] * CLIENTS

            async def decide(index: int) -> None:
                results[index] = await http.post(f"{url}/v1/data/kcp/gate/decision", json={"input": KYA})

            async with anyio.create_task_group() as group:
                for index in range(CLIENTS):
                    group.start_soon(decide, index)
            return results

    for answer in anyio.run(main):
        assert answer.status_code == 200
        body = answer.json()
        assert body["result"]["decision"] == HELD and body["decision_id"].startswith("dec_")
    decided = httpx2.post(f"{url}/v1/decisions", json={"action": KYA}, headers=auth()).json()
    opened = httpx2.post(f"{url}/v1/decisions/{decided['decision_id']}/challenges", json={}, headers=auth())
    assert opened.status_code == 200 and len(opened.json()["challenges"]) == 5
    # The agent cannot read a challenge addressed to an approver (nor answer it).
    challenge_id = opened.json()["challenges"][0]["challenge_id"]
    peek = httpx2.get(f"{url}/v1/challenges/{challenge_id}", headers=auth())
    assert peek.status_code == 403 and peek.json()["code"] == "not_authorized"
    refused = httpx2.post(f"{url}/v1/receipts", json={"decision_id": decided["decision_id"]}, headers=auth())
    assert refused.status_code == 403 and refused.json()["code"] == "not_authorized"
    bad = httpx2.post(f"{url}/v1/decisions", json={"action": {**KYA, "password": "x"}}, headers=auth())
    assert bad.status_code == 400 and bad.json()["code"] == "action_rejected"
    status = httpx2.get(f"{url}/v1/status", headers=auth()).json()
    assert status["ok"] and status["store"]["ok"] and status["ledger"]["ok"] and status["bundle_revision"]
    assert httpx2.get(f"{url}/health").json() == {"ok": True}
    metrics = httpx2.get(f"{url}/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'kcp_opa_decisions_total{state="ESCALATE"}' in text
    assert 'kcp_opa_refusals_total{code="not_authorized"}' in text
    assert "kcp_opa_decision_seconds_bucket" in text and "kcp_opa_ledger_write_seconds_count" in text
    assert verify_ledger(ledger).ok


def test_the_serve_demo_runs_the_trust_sequence_with_six_authenticated_clients(tmp_path: Path) -> None:
    """`make serve-demo`: real HTTP, one bearer token per principal, the payment executed once."""
    bundles = tmp_path / "bundles"
    base = DEPLOYMENTS / "finance"
    registry = REPO / "fixtures" / "trust" / "registry.yaml"  # the demo's registry: the bundle is compiled with it
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        POLICIES,
        bundles / "finance.tar.gz",
        options=CompileOptions(trust_path=registry),
    )
    ledger = tmp_path / "demo.jsonl"
    env = {**os.environ, "KCP_OPA_LEDGER": str(ledger), "KCP_OPA_BUNDLES": str(bundles)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "serve_demo.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused the agent approving: not_authorized" in proc.stdout
    assert "executed idem_supplier_8000_001: PAY-0001" in proc.stdout
    assert "refused the same receipt again: replay" in proc.stdout
    assert "HTTP 401 unauthenticated" in proc.stdout
    entries = [e for _, e in read_entries(ledger)]
    controls = {e["evidence"]["actor_id"] for e in entries if e["type"] == "control"}
    assert controls == {"kcp-opa-ledger", "user_001", "kyc-provider", "treasury_approver_anna"}
    issuers = {e["evidence"]["control"]: e["evidence"]["issuer"] for e in entries if e["type"] == "control"}
    assert issuers == {
        "standard_audit_logging": "kcp-opa-gate",
        "user_confirmation": "bank-idp",
        "identity_verification": "bank-idp",
        "authority_verification": "kcp-opa-gate",
        "beneficiary_verification": "bank-registry",
        "independent_human_approval": "approval-app",
    }
    assert [e["replayed"] for e in entries if e["type"] == "execution"] == [False]
    assert verify_ledger(ledger).ok


def test_a_session_opened_with_one_token_is_not_usable_with_another(tmp_path: Path) -> None:
    """Per-principal bearer tokens in-process (the authenticator seam), and the SDK's session binding."""
    import threading

    import uvicorn

    from kcp_opa.service.callers import LOCAL_AGENT, Principal, StaticAuthenticator
    from kcp_opa.service.config import HostParts
    from kcp_opa.service.http import build_app

    base = DEPLOYMENTS / "finance"
    bundle = tmp_path / "finance.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle)
    service = open_local(bundle, tmp_path, HostParts(context=local_context("user_001")))
    approver = Principal.of("anna", "human", {"approver"})
    agent_token, approver_token = "a" * 40, "b" * 40
    app = build_app(service, StaticAuthenticator({agent_token: LOCAL_AGENT, approver_token: approver}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/mcp"
        accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        opened = httpx2.post(url, json=init, headers={**accept, **auth(agent_token)})
        assert opened.status_code == 200
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        stolen = httpx2.post(url, json=listing, headers={**accept, **session, **auth(approver_token)})
        assert stolen.status_code == 404
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        httpx2.post(url, json=initialized, headers={**accept, **session, **auth(agent_token)})
        own = httpx2.post(url, json=listing, headers={**accept, **session, **auth(agent_token)})
        assert own.status_code == 200 and len(own.json()["result"]["tools"]) == 9
        status = httpx2.get(f"http://127.0.0.1:{port}/v1/status", headers=auth(approver_token))
        assert status.status_code == 200  # the approver's own token works; only the session is bound
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_without_trust_http_knows_only_the_local_agent_and_every_refusal_says_add_trust(
    server: tuple[str, Path],
) -> None:
    """What a caller of a server without --trust can do (evaluate, hash, challenges, notes) and the hint."""
    url, ledger = server
    status = httpx2.get(f"{url}/v1/status", headers=auth()).json()
    assert status["trust"] is None and status["callers"].startswith("local-agent only")
    decided = httpx2.post(f"{url}/v1/decisions", json={"action": KYA}, headers=auth()).json()
    allowed = [
        ("/v1/decisions", {"action": KYA}),
        (f"/v1/decisions/{decided['decision_id']}/challenges", {}),
        ("/v1/audit-events", {"event": "checked", "detail": {"n": 1}}),
    ]
    for path, body in allowed:
        assert httpx2.post(f"{url}{path}", json=body, headers=auth()).status_code == 200, path
    opened = httpx2.post(f"{url}/v1/decisions/{decided['decision_id']}/challenges", json={}, headers=auth()).json()
    challenge_id = opened["challenges"][0]["challenge_id"]
    refused = [
        ("/v1/receipts", {"decision_id": decided["decision_id"]}),
        ("/v1/receipts/verify", {"receipt": {}, "action": KYA}),
        ("/v1/executions", {"receipt": {}, "action": KYA, "handler": "pay"}),
        (f"/v1/challenges/{challenge_id}/result", {"status": "PASSED", "evidence_reference": "x"}),
        ("/v1/admin/reload", {}),
    ]
    for path, body in refused:
        answer = httpx2.post(f"{url}{path}", json=body, headers=auth())
        assert answer.status_code == 403 and answer.json()["code"] == "not_authorized", (path, answer.text)
        assert (
            "start it with --trust REGISTRY" in answer.json()["error"] or "--trust REGISTRY" in answer.json()["error"]
        )
    peek = httpx2.get(f"{url}/v1/challenges/{challenge_id}", headers=auth())
    assert peek.status_code == 403 and "--trust" in peek.json()["error"]
    # No other caller exists: any other token is unauthenticated, not a second principal.
    stranger = httpx2.post(f"{url}/v1/decisions", json={"action": KYA}, headers=auth("another-token-" + "z" * 30))
    assert stranger.status_code == 401 and stranger.json()["code"] == "unauthenticated"
    hinted = [e for _, e in read_entries(ledger) if e["type"] == "failure" and "--trust" in str(e.get("message"))]
    assert {e["tool"] for e in hinted} >= {"issue_delegation_receipt", "record_control_result", "reload"}
