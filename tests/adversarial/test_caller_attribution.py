"""Attack class: an agent names someone else as the one acting (issue 49, item 7).

Against a real ``kcp-opa serve`` (a process on a socket, with a trust registry and bearer
tokens): the agent ``agent_payments_001`` posts the KYA payment stating ``agent_id``
``treasury_approver_anna``, a human approver. Who acted is the authenticated caller, so on the
JSON API, the OPA-compatible ``/v1/data`` route and MCP ``tools/call`` (streamable HTTP and
stdio) the action is refused with ``403 principal_mismatch`` naming both canonical ids; the
refusal is in the ledger attributed to the caller; no decision, report row or metric names
anna. The caller's own id in another case is refused too (per-agent budgets count the id as
written); its exact id is decided and recorded as the caller.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from authzenkit import as_authzen
from conftest import REPO, run_cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    start_server,
    stop_server,
    write_registry,
    write_tokens,
)

from kcp_opa.audit.summary import summarize
from kcp_opa.trail.ledger import read_entries, verify_ledger

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
AGENT, ANNA = "agent_payments_001", "treasury_approver_anna"
TOKENS = {AGENT: "t-agent-" + "a" * 32, ANNA: "t-anna-" + "n" * 32}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    work = tmp_path_factory.mktemp("attribution")
    registry, issuer_keys = write_registry(work)
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {token: principal for principal, token in TOKENS.items()})
    ledger = work / "ledger.jsonl"
    args = ["--bundle", str(bundle), "--store", str(work / "service.db"), "--trust", str(registry)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    args += ["--tokens", str(tokens), "--ledger", str(ledger)]
    process, url = start_server(args)
    try:
        yield url, ledger, work
    finally:
        stop_server(process)


def _action(agent_id: str, tag: str, **changes: Any) -> dict[str, Any]:
    action = copy.deepcopy(KYA) | {"action_id": f"act_{tag}", "idempotency_key": f"idem_attribution_{tag}"}
    return action | {"agent_id": agent_id, **changes}


def _post(url: str, path: str, body: dict[str, Any], who: str = AGENT) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {TOKENS[who]}"}, timeout=120)


def _mcp_call(url: str, tool: str, action: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[AGENT]}"}, timeout=120) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            return await client.call_tool(tool, {"action": action})

    return anyio.run(main)


def _entries(ledger: Path) -> list[dict[str, Any]]:
    return [e for _, e in read_entries(ledger)] if ledger.exists() else []


def _mismatches(ledger: Path) -> list[dict[str, Any]]:
    return [e for e in _entries(ledger) if e["type"] == "failure" and e.get("code") == "principal_mismatch"]


def _decisions(ledger: Path) -> list[dict[str, Any]]:
    return [e for e in _entries(ledger) if e["type"] == "decision"]


def test_an_agent_stating_an_approver_as_agent_id_is_refused_on_every_http_route(
    served: tuple[str, Path, Path],
) -> None:
    url, ledger, _ = served
    before, decided_before = len(_mismatches(ledger)), len(_decisions(ledger))
    json_api = _post(url, "/v1/decisions", {"action": _action(ANNA, "json_api")})
    opa = _post(url, "/v1/data/kcp/gate/decision", {"input": _action(ANNA, "opa")})
    for answer in (json_api, opa):
        assert answer.status_code == 403, answer.text
        body = answer.json()
        assert body["code"] == "principal_mismatch", body
        assert f"agent_id names {ANNA} but the authenticated caller is {AGENT}" in body["error"], body
    for tool in ("evaluate_action", "evaluate_financial_action"):
        refused = _mcp_call(url, tool, _action(ANNA, tool))
        assert refused.is_error and isinstance(refused.structured_content, dict), refused
        assert refused.structured_content["code"] == "principal_mismatch", refused.structured_content
        assert ANNA in refused.structured_content["error"] and AGENT in refused.structured_content["error"]
    # AuthZEN: the subject is the caller (a single evaluation is refused; a batch item is false with it).
    claimed = as_authzen(_action(ANNA, "authzen"))
    authzen = _post(url, "/access/v1/evaluation", claimed)
    assert authzen.status_code == 403 and authzen.json()["code"] == "principal_mismatch", authzen.text
    assert f"is not the authenticated caller (agent {AGENT})" in authzen.json()["error"]
    batch = _post(url, "/access/v1/evaluations", {"evaluations": [claimed]})
    assert batch.status_code == 200 and batch.json()["evaluations"][0]["decision"] is False, batch.text
    assert batch.json()["evaluations"][0]["context"]["error"]["code"] == "principal_mismatch"

    # Each refusal is in the ledger, attributed to the caller that authenticated; nothing was decided.
    audited = _mismatches(ledger)[before:]
    assert len(audited) == 6, audited
    assert all(e["principal"]["id"] == AGENT and e["principal"]["kind"] == "agent" for e in audited)
    assert len(_decisions(ledger)) == decided_before
    assert verify_ledger(ledger).ok

    # The report's "by agent" view, its refusals and /metrics never name anna for it.
    summary = summarize(ledger)
    assert not [agent for agent in summary.by_agent if ANNA in agent], summary.by_agent
    seqs = {e["seq"] for e in audited}
    assert {r["principal"] for r in summary.refusal_rows if r["seq"] in seqs} == {AGENT}
    report = run_cli("audit", "report", str(ledger), "--format", "json")
    assert report.returncode == 0, report.stderr
    reported = json.loads(report.stdout)
    assert not [agent for agent in reported["by_agent"] if ANNA in agent], reported["by_agent"]
    total = len(_mismatches(ledger))
    assert reported["refusals"]["principal_mismatch"] == total
    metrics = httpx2.get(f"{url}/metrics", timeout=30).text
    assert ANNA not in metrics and "anna" not in metrics
    assert f'kcp_opa_refusals_total{{code="principal_mismatch"}} {float(total)}' in metrics, metrics


def test_look_alikes_and_a_stated_delegation_do_not_make_another_agent(served: tuple[str, Path, Path]) -> None:
    """A Cyrillic look-alike of the caller's id or of anna's is refused by the action contract; an
    id the contract admits but that has no canonical form is not the caller; a delegation chain
    the caller states (anna first, the caller last) is its own word and lets it act for no one."""
    url, ledger, _ = served
    before = len(_mismatches(ledger))
    for look_alike in ("\u0430gent_payments_001", "treasury_approver_\u0430nna"):
        refused = _post(url, "/v1/decisions", {"action": _action(look_alike, "cyrillic")})
        assert refused.status_code == 400 and refused.json()["code"] == "action_rejected", refused.text
    uncanonical = _post(url, "/v1/decisions", {"action": _action("+agent_payments_001", "uncanonical")})
    chain = [{"agent_id": ANNA, "capabilities": ["execute_payment"]}, {"agent_id": AGENT, "capabilities": []}]
    delegated = _post(url, "/v1/decisions", {"action": _action(ANNA, "chain", delegation_chain=chain)})
    for answer in (uncanonical, delegated):
        assert answer.status_code == 403 and answer.json()["code"] == "principal_mismatch", answer.text
    assert "'+agent_payments_001' has no canonical form" in uncanonical.json()["error"]
    assert [e["principal"]["id"] for e in _mismatches(ledger)[before:]] == [AGENT] * 2


def test_the_callers_own_id_in_another_spelling_is_refused_and_its_exact_id_recorded(
    served: tuple[str, Path, Path],
) -> None:
    """Budgets and rate limits count per agent by the id as written: the caller's id in another
    case would count apart, so only the exact canonical id is the caller. The decision it makes
    names it, and the subject it acts for."""
    url, ledger, _ = served
    spelled = _post(url, "/v1/decisions", {"action": _action("Agent_PAYMENTS_001", "spelled")})
    assert spelled.status_code == 403 and spelled.json()["code"] == "principal_mismatch", spelled.text
    assert "'Agent_PAYMENTS_001' spells the caller's id agent_payments_001 another way" in spelled.json()["error"]
    stating = _action(AGENT, "stating", authorization_context={**KYA["authorization_context"]})
    stating["authorization_context"]["authenticated_principal"] = "AGENT_payments_001"
    restated = _post(url, "/v1/decisions", {"action": stating})
    assert restated.status_code == 403 and restated.json()["code"] == "principal_mismatch", restated.text
    own = _post(url, "/v1/decisions", {"action": _action(AGENT, "own")})
    assert own.status_code == 200, own.text
    entry = {e["decision_id"]: e for e in _decisions(ledger)}[own.json()["decision_id"]]
    assert entry["agent_id"] == AGENT and "stated_agent_id" not in entry and "unauthenticated" not in entry
    assert entry["input"]["context"]["facts_principal"] == AGENT
    assert entry["input"]["action"]["subject_id"] == "user_001"  # whom the agent acts for
    assert summarize(ledger).by_agent.get(AGENT, 0) >= 1


def test_an_approvers_token_is_attributed_to_the_approver(served: tuple[str, Path, Path]) -> None:
    """The other way round: anna (who may evaluate) stating the agent as agent_id is refused too."""
    url, ledger, _ = served
    refused = _post(url, "/v1/decisions", {"action": _action(AGENT, "anna_as_agent")}, who=ANNA)
    assert refused.status_code == 403 and refused.json()["code"] == "principal_mismatch", refused.text
    assert _mismatches(ledger)[-1]["principal"]["id"] == ANNA


def test_mcp_over_stdio_refuses_an_action_for_another_agent(tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    compile_finance(tmp_path / "finance.tar.gz", registry)
    args = ["-m", "kcp_opa", "serve", "--bundle", "finance.tar.gz", "--trust", "trust.yaml"]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--principal", AGENT]
    args += ["--ledger", "ledger.jsonl", "--store", "service.db"]
    env = {**os.environ, "KCP_OPA_ISSUER_KEYRING": str(keys)}
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path), env=env)

    async def main() -> Any:
        async with Client(params) as client:
            return await client.call_tool("evaluate_financial_action", {"action": _action(ANNA, "stdio")})

    refused = anyio.run(main)
    assert refused.is_error and isinstance(refused.structured_content, dict), refused
    assert refused.structured_content["code"] == "principal_mismatch", refused.structured_content
    ledger = tmp_path / "ledger.jsonl"
    (audited,) = _mismatches(ledger)
    assert audited["principal"]["id"] == AGENT and not _decisions(ledger)
