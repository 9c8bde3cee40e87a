"""The tool catalog: one entry per tool, from which every transport is derived.

A :class:`Tool` names its description, input and output schemas, the scope a caller needs, the
handler that does its work on the :class:`~kcp_opa.service.desk.GateService`, and (optionally)
its JSON API route. MCP ``tools/list`` (mcpserver.py), dispatch (here), the ``/v1`` routes
(http.py), the OpenAPI document (openapi.py) and ``/v1/status`` read the same
:class:`Catalog`, so the transports can never disagree and a new tool is one entry
(``kcp_opa.service.tools.CATALOG``, or ``CATALOG.with_tool(...)`` for a host's own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypedDict

import fastjsonschema
import structlog

from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping
from kcp_opa.service.callers import Principal, Scope
from kcp_opa.service.desk import GateService

_log = structlog.get_logger("kcp_opa.service")

#: A tool's work: the service, the authenticated caller, the arguments (checked against the input schema).
ToolHandler = Callable[[GateService, Principal, JsonObject], JsonDict]


@dataclass(frozen=True)
class Route:
    """A tool's JSON API route: the body is its arguments, a path ``parameter`` is merged in."""

    path: str
    summary: str
    method: str = "post"
    parameter: str | None = None


@dataclass(frozen=True)
class Tool:
    """One tool: what ``tools/list`` shows, what dispatch checks and runs, where the JSON API serves it."""

    name: str
    description: str
    input_schema: JsonObject
    output_schema: JsonObject
    #: Checked by dispatch before the handler runs (None: the handler decides, e.g. addressees may read).
    scope: Scope | None
    #: What the caller may not do without ``scope``, for the refusal ("record control results").
    what: str
    handler: ToolHandler = field(repr=False)
    route: Route | None = None
    #: Listed in MCP ``tools/list`` (False: served on its route only, e.g. the OPA-compatible decision).
    mcp: bool = True
    #: The refusal codes its handler raises beyond dispatch's (refusals.DISPATCH): the OpenAPI
    #: document lists its route's statuses from them (a code refusals.STATUS lacks answers 422).
    refusals: tuple[str, ...] = ()


def _shown(name: str) -> str:
    return repr(name[:64].encode("ascii", "backslashreplace").decode("ascii"))


#: A refusal as every transport answers it: the message and its stable code.
class ErrorPayload(TypedDict):
    error: str
    code: str


def error_payload(exc: KcpOpaError) -> ErrorPayload:
    code = getattr(exc, "code", None) or ("action_rejected" if isinstance(exc, ActionRejectedError) else "error")
    return {"error": str(exc), "code": code}


@dataclass(frozen=True)
class Catalog:
    """The tools a service serves, in ``tools/list`` order; names are unique."""

    tools: tuple[Tool, ...]

    def __post_init__(self) -> None:
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise CodedError(f"tool names repeat in the catalog: {', '.join(sorted(names))}", "tool_catalog")
        routes = [(t.route.method, t.route.path) for t in self.tools if t.route is not None]
        if len(set(routes)) != len(routes):
            raise CodedError("two tools share one JSON API route", "tool_catalog")

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def with_tool(self, tool: Tool) -> Catalog:
        """This catalog and ``tool`` (last in ``tools/list``)."""
        return Catalog((*self.tools, tool))

    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    def get(self, name: str) -> Tool | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    @cached_property
    def _checks(self) -> dict[str, Callable[[object], object]]:
        """Each tool's input schema, compiled. The action inside is checked by the gate's own action
        contract (the same schema and more, refused with the path named), so here it is an object."""
        checks: dict[str, Callable[[object], object]] = {}
        for tool in self.tools:
            document = dict(tool.input_schema)
            properties = dict(mapping(document.get("properties")))
            if "action" in properties:
                properties["action"] = {"type": "object"}
            checks[tool.name] = fastjsonschema.compile(document | {"properties": properties})
        return checks

    def check_arguments(self, name: str, args: object) -> None:
        """Raise :class:`CodedError` ``bad_arguments`` unless ``args`` match tool ``name``'s input schema."""
        try:
            self._checks[name](args)
        except fastjsonschema.JsonSchemaValueException as exc:
            where = "".join(f"/{part}" for part in exc.path[1:]) or "arguments"
            detail = exc.message.removeprefix("data").strip()
            raise CodedError(f"bad arguments: {where}: {detail}", "bad_arguments") from None

    def dispatch(self, service: GateService, principal: Principal | None, name: str, args: JsonObject) -> JsonDict:
        """Run tool ``name`` for ``principal`` (blocking: the transports call it off the event loop).

        Every call goes through :meth:`GateService.call`, so every refusal is audited: an unknown
        tool, arguments outside the tool's input schema, a missing scope, and whatever the tool
        itself refuses.
        """
        tool = self.get(name)
        if tool is None:

            def unknown(p: Principal) -> JsonDict:
                raise CodedError(f"unknown tool {_shown(name)}", "unknown_tool")

            return service.call(principal, "unknown_tool", unknown)

        def checked(p: Principal) -> JsonDict:
            self.check_arguments(name, args)
            if tool.scope is not None:
                p.require(tool.scope, tool.what)
            return tool.handler(service, p, args)

        try:
            return service.call(principal, name, checked)
        except KcpOpaError:
            raise
        except Exception as exc:  # never a 500 or a traceback to the caller: an audited refusal, logged here
            _log.error("tool_failed", tool=name, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            refusal = CodedError(f"{name} failed ({type(exc).__name__}); the call is refused", "internal_error")
            service.refuse(principal, name, refusal)
            raise refusal from None
