"""A new tool is one catalog entry: a real ``kcp-opa serve`` with one entry added lists it in MCP
``tools/list``, serves it over MCP and on its JSON API route, describes it in the OpenAPI
document and names it in ``/v1/status``; its schema and its scope hold like every other tool's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from servicekit import free_port, start_process, stop_server

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import CodedError
from kcp_opa.service.catalog import Catalog
from kcp_opa.service.tools import CATALOG, TOOL_NAMES
from kcp_opa.trail.ledger import read_entries

TOKEN = "kcp-opa-catalog-token-" + "y" * 24
#: The whole change a new tool needs: one entry, added to the catalog before the CLI runs.
LAUNCHER = """
import sys

from kcp_opa.cli import main
from kcp_opa.service import tools
from kcp_opa.service.catalog import Route, Tool
from kcp_opa.service.callers import Scope


def echo(service, principal, args):
    return {"echo": args["text"], "caller": principal.id, "bundle_revision": service.gate.bundle_revision}


text = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 64}}, "required": ["text"],
        "additionalProperties": False}
echoed = {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}
tools.CATALOG = tools.CATALOG.with_tool(
    Tool("echo_text", "Echo a short text back.", text, echoed, Scope.%(scope)s, "echo texts", echo,
         Route("/v1/echo", "Echo a short text back"))
)
main(sys.argv[1:])
"""


def _start(tmp_path: Path, scope: str) -> tuple[subprocess.Popen[str], str]:
    bundle = tmp_path / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle)
    launcher = tmp_path / "serve_with_echo.py"
    launcher.write_text(LAUNCHER % {"scope": scope})
    port = free_port()
    args = ["serve", "--transport", "http", "--port", str(port), "--bundle", str(bundle)]
    args += ["--store", str(tmp_path / "s.db"), "--ledger", str(tmp_path / "l.jsonl")]
    env = {"KCP_OPA_SERVE_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}
    return start_process([sys.executable, str(launcher), *args], port, env)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_one_catalog_entry_is_a_tool_on_mcp_the_json_api_openapi_and_status(tmp_path: Path) -> None:
    process, url = _start(tmp_path, "HASH")  # the local agent holds hash
    try:
        listed: list[Any] = []
        called: list[Any] = []

        async def over_mcp() -> None:
            async with (
                httpx2.AsyncClient(headers=_auth(), timeout=60) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
            ):
                listed.extend((await client.list_tools()).tools)
                called.append(await client.call_tool("echo_text", {"text": "hello"}))
                called.append(await client.call_tool("echo_text", {"text": "x" * 65}))

        anyio.run(over_mcp)
        assert [t.name for t in listed] == [*TOOL_NAMES, "echo_text"]
        echo = listed[-1]
        assert echo.description == "Echo a short text back." and echo.input_schema["required"] == ["text"]
        assert echo.output_schema["required"] == ["echo"]
        done, refused = called
        assert not done.is_error and done.structured_content["echo"] == "hello"
        assert done.structured_content["caller"] == "local-agent"
        assert refused.is_error and refused.structured_content["code"] == "bad_arguments"

        answer = httpx2.post(f"{url}/v1/echo", json={"text": "over http"}, headers=_auth(), timeout=30)
        assert answer.status_code == 200 and answer.json()["echo"] == "over http"
        bad = httpx2.post(f"{url}/v1/echo", json={"text": 7}, headers=_auth(), timeout=30)
        assert bad.status_code == 400 and bad.json()["code"] == "bad_arguments"
        anonymous = httpx2.post(f"{url}/v1/echo", json={"text": "who"}, timeout=30)
        assert anonymous.status_code == 401

        status = httpx2.get(f"{url}/v1/status", headers=_auth(), timeout=30).json()
        assert status["tools"] == [*(t.name for t in CATALOG), "echo_text"]
        document = httpx2.get(f"{url}/v1/openapi.json", timeout=30).json()
        operation = document["paths"]["/v1/echo"]["post"]
        assert operation["operationId"] == "echo_text"
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["required"] == ["echo"]
    finally:
        stop_server(process)
    refused = [(e.get("tool"), e.get("code")) for _, e in read_entries(tmp_path / "l.jsonl") if e["type"] == "failure"]
    # Every refusal of the new tool is audited like any other's: MCP, then the JSON API, then no token.
    assert refused == [("echo_text", "bad_arguments"), ("echo_text", "bad_arguments"), ("/v1/echo", "unauthenticated")]


def test_a_new_tools_scope_is_checked_before_its_handler_runs(tmp_path: Path) -> None:
    process, url = _start(tmp_path, "ADMIN")  # the local agent is no service_admin
    try:
        answer = httpx2.post(f"{url}/v1/echo", json={"text": "hello"}, headers=_auth(), timeout=30)
        assert answer.status_code == 403 and answer.json()["code"] == "not_authorized"
        assert "may not echo texts" in answer.json()["error"]
    finally:
        stop_server(process)
    refused = [(e.get("tool"), e.get("code")) for _, e in read_entries(tmp_path / "l.jsonl") if e["type"] == "failure"]
    assert refused == [("echo_text", "not_authorized")]


def test_a_catalog_refuses_two_tools_of_one_name_or_one_route() -> None:
    evaluate = CATALOG.get("evaluate_action")
    assert evaluate is not None
    with pytest.raises(CodedError) as twice:
        CATALOG.with_tool(evaluate)
    assert twice.value.code == "tool_catalog"
    import dataclasses

    with pytest.raises(CodedError):
        Catalog((evaluate, dataclasses.replace(evaluate, name="evaluate_again")))
