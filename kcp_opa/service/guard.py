"""The tool-call guard: the gate in front of a Python tool function or another MCP server's tools.

A call becomes an action intent (the deployer says how, per tool); the gate decides it. ALLOW
with execution allowed runs the call; anything else returns the decision and the control
challenges opened for it, and the call does not run. ``@guard(...)`` wraps in-process functions
(sync or async); :func:`build_guard_proxy` is an MCP server that forwards ``tools/call`` to an
upstream MCP client only when the gate allows it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import anyio.to_thread
import mcp_types as types
from mcp import Client
from mcp.server import Server, ServerRequestContext

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonDict, JsonObject, objects
from kcp_opa.service.callers import LOCAL_AGENT, Principal
from kcp_opa.service.catalog import error_payload
from kcp_opa.service.desk import GateService
from kcp_opa.service.mcpserver import tool_error

F = TypeVar("F", bound=Callable[..., object])
ActionFor = Callable[..., JsonObject]


@dataclass(frozen=True)
class Held:
    """A call the gate did not let run: its decision and the challenges to complete first."""

    decision: JsonObject
    challenges: list[JsonObject] = field(default_factory=list)

    @property
    def message(self) -> str:
        return f"the gate answered {self.decision.get('decision')}: the call did not run"

    def to_dict(self) -> JsonDict:
        return {
            "code": "held_by_gate",
            "error": self.message,
            "decision": dict(self.decision),
            "challenges": [dict(c) for c in self.challenges],
        }


def gate_call(service: GateService, principal: Principal | None, tool: str, action: JsonObject) -> Held | None:
    """Decide ``action`` for ``principal``: None when the call may run, else what holds it.

    An unauthenticated caller (None) is refused and audited like any refusal."""
    decision = service.call(principal, f"guard:{tool}", lambda p: service.evaluate(p, action))
    if decision["decision"] == "ALLOW" and decision["execution_allowed"] is True:
        return None
    challenges: list[JsonObject] = []
    if decision["decision"] != "DENY" and decision["missing_controls"]:
        opened = service.call(
            principal, "create_control_challenge", lambda p: service.create_challenges(p, str(decision["decision_id"]))
        )
        challenges = objects(opened["challenges"])
    return Held(decision, challenges)


def guard(service: GateService, action: ActionFor, *, principal: Principal = LOCAL_AGENT) -> Callable[[F], F]:
    """Wrap a tool function: ``action(*args, **kwargs)`` builds the intent; only ALLOW runs it.

    The wrapped function returns its own result when allowed and a :class:`Held` otherwise. An
    action that cannot be evaluated raises the gate's error (fail closed: the call never runs).
    """

    def decorate(function: F) -> F:
        name = getattr(function, "__name__", "tool")
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: object, **kwargs: object) -> object:
                intent = action(*args, **kwargs)
                held = await anyio.to_thread.run_sync(gate_call, service, principal, name, intent)
                return held if held is not None else await function(*args, **kwargs)

            return cast(F, run_async)

        @functools.wraps(function)
        def run(*args: object, **kwargs: object) -> object:
            held = gate_call(service, principal, name, action(*args, **kwargs))
            return held if held is not None else function(*args, **kwargs)

        return cast(F, run)

    return decorate


ToolAction = Callable[[str, JsonObject], JsonObject]


def build_guard_proxy(
    service: GateService,
    upstream: Client,
    to_action: ToolAction,
    resolve: Callable[[ServerRequestContext[object, object]], Principal | None] = lambda ctx: LOCAL_AGENT,
) -> Server[object]:
    """An MCP server listing ``upstream``'s tools and forwarding a call only when the gate allows it.

    ``to_action(tool, arguments)`` turns each call into an action intent; a held call is a tool
    error whose structured content is :meth:`Held.to_dict` (the decision and its challenges).
    """

    async def list_tools(ctx: ServerRequestContext[object, object], params: object) -> types.ListToolsResult:
        return await upstream.list_tools()

    async def call_tool(
        ctx: ServerRequestContext[object, object], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        principal = resolve(ctx)
        try:
            intent = to_action(params.name, arguments)
            held = await anyio.to_thread.run_sync(gate_call, service, principal, params.name, intent)
        except KcpOpaError as exc:
            return tool_error(error_payload(exc))
        if held is None:
            return await upstream.call_tool(params.name, arguments)
        return types.CallToolResult(
            content=[types.TextContent(text=held.message)], structured_content=held.to_dict(), is_error=True
        )

    return Server("kcp-opa-guard", on_list_tools=list_tools, on_call_tool=call_tool)
