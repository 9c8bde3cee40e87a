"""MCP over the catalog: ``tools/list`` and ``tools/call`` for every transport (stdio.py, http.py).

Built on the ``mcp`` SDK's low-level :class:`mcp.server.Server` (tools/list and tools/call
handlers), so each tool has an explicit input schema, an output schema and a structured result,
all from its :class:`~kcp_opa.service.catalog.Tool` entry. A refusal is a tool error
(``isError``) whose structured content carries the project's error ``code``; the SDK's own
middleware adds its tool-call span when OpenTelemetry is on.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.version import __version__
from kcp_opa.service import tools
from kcp_opa.service.callers import Principal
from kcp_opa.service.catalog import Catalog, ErrorPayload, error_payload
from kcp_opa.service.desk import GateService


def tool_specs(catalog: Catalog) -> list[types.Tool]:
    """The catalog's MCP tools with their input and output schemas, in the order tools/list gives them."""
    return [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=dict(tool.input_schema),
            output_schema=dict(tool.output_schema),
        )
        for tool in catalog
        if tool.mcp
    ]


Resolver = Callable[[ServerRequestContext[object, object]], Principal | None]


def build_server(service: GateService, resolve: Resolver, catalog: Catalog | None = None) -> Server[object]:
    """An MCP server over ``service`` serving ``catalog`` (default: ``tools.CATALOG``); ``resolve``
    names the caller of each request."""
    served = catalog or tools.CATALOG
    listed = tool_specs(served)

    async def list_tools(ctx: ServerRequestContext[object, object], params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[object, object], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        principal = resolve(ctx)
        args = dict(params.arguments or {})
        try:
            result = await anyio.to_thread.run_sync(served.dispatch, service, principal, params.name, args)
        except KcpOpaError as exc:
            return tool_error(error_payload(exc))
        except (ValueError, TypeError) as exc:  # a malformed argument (e.g. ttl_seconds "x"): the caller's fault
            return tool_error({"error": f"bad arguments: {exc}", "code": "bad_arguments"})
        return types.CallToolResult(
            content=[types.TextContent(text=_summary(params.name, result))], structured_content=result
        )

    return Server(
        "kcp-opa",
        version=__version__,
        instructions="The kcp-opa gate: evaluate, open challenges, record results, issue, verify, execute, audit.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def tool_error(payload: ErrorPayload) -> types.CallToolResult:
    """A refusal as an MCP tool error (this server's and the guard proxy's)."""
    return types.CallToolResult(
        content=[types.TextContent(text=f"{payload['code']}: {payload['error']}")],
        structured_content=dict(payload),
        is_error=True,
    )


def _summary(name: str, result: JsonObject) -> str:
    return json.dumps(result, sort_keys=True, default=str)
