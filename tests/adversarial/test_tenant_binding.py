"""Attack: an agent states another tenant as its own and reads that tenant's customer.

The policy's tenant boundary compares the target's tenant with the ``tenant_id`` the action
states, so an agent that states ``tenant_b`` for itself and for the record passes it: nothing in
the action ties the agent to ``tenant_a``. A trust registry that binds the agent to its tenants
(``tenants: [tenant_a]``) is what the gate can know; through ``kcp-opa serve`` an action stating
any other tenant is refused with ``403 tenant_not_granted`` before the gate decides, on the JSON
API, the OPA-compatible route and AuthZEN alike (MCP runs the JSON API's tool, through the same
check), audited under the caller. A real
server process, the support-desk bundle, the support agent ``sd-agent`` bound to tenant_a.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from authzenkit import AGENT, TOKENS, Served, ask, read_customer, serve

from kcp_opa.service.authzen import map_evaluation
from kcp_opa.service.callers import Principal, PrincipalKind
from kcp_opa.trail.ledger import read_entries

EVALUATION = "/access/v1/evaluation"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve(tmp_path_factory.mktemp("tenant-binding"), agent_tenants=["tenant_a"])


def _entries(ledger: Path) -> list[dict[str, Any]]:
    return [entry for _, entry in read_entries(ledger)] if ledger.exists() else []


def _refused(ledger: Path) -> list[dict[str, Any]]:
    return [e for e in _entries(ledger) if e.get("type") == "failure" and e.get("code") == "tenant_not_granted"]


def _in_tenant(tenant: str) -> dict[str, Any]:
    """An AuthZEN read of customer cust_9 of ``tenant``, the agent stating ``tenant`` as its own."""
    request = read_customer(tenant)
    request["context"]["tenant_id"] = tenant
    return request


def _action(tenant: str) -> dict[str, Any]:
    """The same read as the JSON API's action intent."""
    caller = Principal.of(AGENT, PrincipalKind.AGENT, {"agent"})
    return dict(map_evaluation(caller, _in_tenant(tenant)).action)


def _post(served: Served, path: str, body: Any) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {TOKENS[AGENT]}"}
    return httpx2.post(f"{served.url}{path}", json=body, headers=headers, timeout=120)


def test_an_agent_bound_to_its_tenant_cannot_state_another_on_any_route(served: Served) -> None:
    before = len(_refused(served.ledger))
    decided = len([e for e in _entries(served.ledger) if e.get("type") == "decision"])
    answers = [
        _post(served, "/v1/decisions", {"action": _action("tenant_b")}),
        _post(served, "/v1/data/kcp/gate/decision", {"input": _action("tenant_b")}),
        ask(served.url, EVALUATION, _in_tenant("tenant_b")),
    ]
    for answer in answers:
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "tenant_not_granted"
        assert "tenant_b" in answer.json()["error"] and "tenants: tenant_a" in answer.json()["error"]
    assert len(_refused(served.ledger)) - before == 3  # each refusal audited, under the caller
    assert all(e["principal"]["id"] == AGENT for e in _refused(served.ledger)[before:])
    assert len([e for e in _entries(served.ledger) if e.get("type") == "decision"]) == decided  # nothing decided


def test_its_own_tenant_is_decided_as_before(served: Served) -> None:
    own = _post(served, "/v1/decisions", {"action": _action("tenant_a")})
    assert own.status_code == 200, own.text
    assert own.json()["decision"] == "ALLOW"
    assert ask(served.url, EVALUATION, _in_tenant("tenant_a")).json()["decision"] is True


def test_a_registry_tenant_is_an_identifier_compared_exactly(served: Served) -> None:
    for spelling in ("Tenant_A", "tenant_a ", "tenant_a\u200b"):
        action = json.loads(json.dumps(_action("tenant_a")))
        action["tenant_id"] = spelling
        answer = _post(served, "/v1/decisions", {"action": action})
        assert answer.status_code in (400, 403), answer.text  # the contract or the binding refuses it
        assert answer.json()["code"] in ("tenant_not_granted", "action_rejected")
