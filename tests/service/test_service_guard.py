"""The tool-call guard: `@guard` on in-process functions, and the proxy in front of a real MCP server.

The upstream is tests/fixtures/tiny_mcp_server.py, a real MCP server (the SDK's MCPServer) run as
a child process over stdio; each tool that actually runs appends a line to a file, so the tests
see what the gate let through.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from servicekit import SUBJECT_FACTS, local_context, open_local

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.service.config import HostParts
from kcp_opa.service.desk import GateService
from kcp_opa.service.guard import Held, build_guard_proxy, guard
from kcp_opa.trail.ledger import read_entries

BASE = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]


def action_for(tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """How this deployment describes each tool call as an action intent."""
    action = copy.deepcopy(BASE)
    action["created_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    action["action_id"] = f"act_{tool}_{arguments.get('customer', 'x')}"
    # Who acts, and the units' authenticated principal: through the service only the caller.
    action["agent_id"] = action["authorization_context"]["authenticated_principal"] = "local-agent"
    if tool == "create_refund":
        action.update(
            action_type="refund",
            requested_action="refunds.create",
            idempotency_key="idem_refund_0001_cust",
            target={"type": "refund", "reference": "order_78", "tenant_id": BASE["target"]["tenant_id"]},
            amount={"value_minor": arguments["amount_minor"], "currency": arguments["currency"]},
            knowledge={"project": "support-desk", "unit": "refunds", "fields_read": ["order_id", "amount"]},
        )
    return action


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("guard") / "support-desk.tar.gz"
    base = DEPLOYMENTS / "support-desk"
    compile_bundle(sorted(base.glob("knowledge*.yaml")), base / "matrix.yaml", POLICIES, out)
    return out


@pytest.fixture
def service(bundle: Path, tmp_path: Path) -> GateService:
    # what the gate knows about the local agent and the subject (a support customer: no payee)
    context = local_context("user_1", {**SUBJECT_FACTS, "new_beneficiary": False})
    return open_local(bundle, tmp_path, HostParts(context=context))


def test_guard_runs_an_allowed_call_and_holds_the_rest_with_its_challenges(service: GateService) -> None:
    ran: list[str] = []

    @guard(service, lambda customer: action_for("get_customer", {"customer": customer}))
    def get_customer(customer: str) -> dict[str, str]:
        ran.append(customer)
        return {"name": "Ada"}

    @guard(
        service,
        lambda customer, amount_minor: action_for("create_refund", {"amount_minor": amount_minor, "currency": "EUR"}),
    )
    def create_refund(customer: str, amount_minor: int) -> str:
        ran.append(f"refund {customer}")
        return "refunded"

    assert get_customer("cust_9") == {"name": "Ada"}
    held = create_refund("cust_9", 1500)
    assert isinstance(held, Held)
    assert held.decision["decision"] == "HUMAN_APPROVAL" and held.decision["execution_allowed"] is False
    assert {c["control"] for c in held.challenges} == set(held.decision["missing_controls"])
    assert ran == ["cust_9"]


def test_guard_fails_closed_on_an_action_it_cannot_evaluate(service: GateService) -> None:
    @guard(service, lambda: {**action_for("get_customer", {}), "password": "hunter2"})
    def leak() -> str:
        raise AssertionError("must not run")

    with pytest.raises(ActionRejectedError):
        leak()


def test_guard_wraps_async_functions(service: GateService) -> None:
    @guard(service, lambda customer: action_for("get_customer", {"customer": customer}))
    async def get_customer(customer: str) -> str:
        return f"hello {customer}"

    assert anyio.run(get_customer, "cust_9") == "hello cust_9"


def test_the_proxy_forwards_allowed_calls_to_a_real_mcp_server_and_holds_the_rest(
    service: GateService, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.jsonl"
    calls.touch()
    upstream = StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "tests" / "fixtures" / "tiny_mcp_server.py")],
        env={**os.environ, "TINY_MCP_CALLS": str(calls)},
    )

    async def main() -> tuple[Any, Any, list[str]]:
        async with Client(upstream) as backend:
            proxy = build_guard_proxy(service, backend, action_for)
            async with Client(proxy) as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                read = await client.call_tool("get_customer", {"customer": "cust_9"})
                refund = await client.call_tool(
                    "create_refund", {"customer": "cust_9", "amount_minor": 1500, "currency": "EUR"}
                )
        return read, refund, names

    read, refund, names = anyio.run(main)
    assert names == ["create_refund", "get_customer"]
    assert not read.is_error and read.structured_content == {
        "customer": "cust_9",
        "name": "Ada",
        "email": "ada@example.com",
    }
    assert refund.is_error and refund.structured_content["code"] == "held_by_gate"
    assert refund.structured_content["decision"]["decision"] == "HUMAN_APPROVAL"
    assert refund.structured_content["challenges"]
    ran = [json.loads(line)["tool"] for line in calls.read_text().splitlines()]
    assert ran == ["get_customer"]  # the refund never reached the server
    assert service.ledger_path is not None
    decided = [e["decision"] for _, e in read_entries(service.ledger_path) if e["type"] == "decision"]
    assert decided == ["ALLOW", "HUMAN_APPROVAL"]


def test_the_proxy_refuses_an_unauthenticated_caller(service: GateService, tmp_path: Path) -> None:
    async def main() -> Any:
        async with Client(build_guard_proxy(service, None, action_for, resolve=lambda ctx: None)) as client:  # type: ignore[arg-type]
            return await client.call_tool("get_customer", {"customer": "cust_9"})

    result = anyio.run(main)
    assert result.is_error and result.structured_content["code"] == "unauthenticated"
