"""The MCP tools: names in the KYA trust sequence, their schemas, and the server that serves them.

Built on the ``mcp`` SDK's low-level :class:`mcp.server.Server` (tools/list and tools/call
handlers), so each tool has an explicit input schema, an output schema and a structured result.
A refusal is a tool error (``isError``) whose structured content carries the project's error
``code``; the SDK's own middleware adds its tool-call span when OpenTelemetry is on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import anyio.to_thread
import fastjsonschema
import mcp_types as types
import structlog
from mcp.server import Server, ServerRequestContext

from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError
from kcp_opa.core.version import __version__
from kcp_opa.models.decision import RoutingState
from kcp_opa.schemas import _inline, schema
from kcp_opa.service.desk import GateService
from kcp_opa.service.identity import Principal

_log = structlog.get_logger("kcp_opa.service")

#: The seven KYA tools in the seed's order, then the two kcp-opa adds.
TOOL_NAMES = (
    "evaluate_financial_action",
    "create_control_challenge",
    "record_control_result",
    "issue_delegation_receipt",
    "verify_and_consume_receipt",
    "execute_authorized_action",
    "write_audit_event",
    "evaluate_action",
    "hash_action",
)


def _action_schema() -> dict[str, Any]:
    document = schema("action-intent.schema.json")
    inlined: dict[str, Any] = _inline(document, document.get("$defs", {}))
    return {k: v for k, v in inlined.items() if k not in {"$schema", "$id"}}


def _object(properties: Mapping[str, Any], required: list[str], *, closed: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "required": required}
    if closed:
        out["additionalProperties"] = False
    return out


_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}
_DECISION = _object(
    {
        "schema_version": _STR,
        "decision_id": _STR,
        "action_hash": _STR,
        "decision": {"enum": [s.value for s in RoutingState]},
        "authorization_status": {"enum": ["APPROVED", "PENDING_CONTROLS", "DENIED"]},
        "execution_allowed": {"type": "boolean"},
        "risk_level": _STR,
        "required_controls": _STRS,
        "satisfied_controls": _STRS,
        "missing_controls": _STRS,
        "reason_codes": _STRS,
        "policy_version": _STR,
        "bundle_revision": _STR,
    },
    ["decision_id", "action_hash", "decision", "authorization_status", "execution_allowed", "required_controls"],
    closed=False,
)
_CHALLENGE = _object(
    {
        "challenge_id": _STR,
        "decision_id": _STR,
        "action_hash": _STR,
        "control": _STR,
        "addressed_to": {"type": "object"},
        "summary": {"type": "object"},
        "expires_at": _STR,
        "state": {"enum": ["open", "consumed"]},
    },
    ["challenge_id", "decision_id", "action_hash", "control", "addressed_to", "summary", "expires_at", "state"],
    closed=False,
)
_RECEIPT = {"type": "object", "description": "A KYA v2.0 delegation receipt, as issue_delegation_receipt returned it."}


def tool_specs() -> list[types.Tool]:
    """The nine tools with their input and output schemas, in the order tools/list gives them."""
    action = _action_schema()
    decided = {"action": action}
    specs: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
        "evaluate_financial_action": (
            "Decide a financial action (it carries an amount); the decision is kept for its controls.",
            _object(decided, ["action"]),
            _DECISION,
        ),
        "create_control_challenge": (
            "Open one-time, expiring challenges for a decision's missing controls, addressed to who may answer.",
            _object(
                {"decision_id": _STR, "controls": _STRS, "ttl_seconds": {"type": "integer", "minimum": 30}},
                ["decision_id"],
            ),
            _object(
                {"decision_id": _STR, "action_hash": _STR, "challenges": {"type": "array", "items": _CHALLENGE}},
                ["decision_id", "action_hash", "challenges"],
            ),
        ),
        "record_control_result": (
            "Answer a challenge addressed to the caller (PASSED or FAILED); the policy re-derives the decision.",
            _object(
                {"challenge_id": _STR, "status": {"enum": ["PASSED", "FAILED"]}, "evidence_reference": _STR},
                ["challenge_id", "status", "evidence_reference"],
            ),
            _object(
                {"challenge_id": _STR, "control": _STR, "decision": _DECISION}, ["challenge_id", "control", "decision"]
            ),
        ),
        "issue_delegation_receipt": (
            "Sign a one-time receipt for an APPROVED decision, bound to the frozen action's hash.",
            _object(
                {"decision_id": _STR, "ttl_seconds": {"type": "integer", "minimum": 30, "maximum": 900}},
                ["decision_id"],
            ),
            _object({"receipt": _RECEIPT, "action": {"type": "object"}}, ["receipt", "action"]),
        ),
        "verify_and_consume_receipt": (
            "Verify a receipt against the final action and consume it (for a side effect run elsewhere).",
            _object({"receipt": _RECEIPT, "action": action}, ["receipt", "action"]),
            _object(
                {"verified": {"type": "boolean"}, "consumed": {"type": "boolean"}, "receipt_id": _STR},
                ["verified", "consumed", "receipt_id"],
            ),
        ),
        "execute_authorized_action": (
            "Verify and consume the receipt, then run a registered handler once per idempotency key.",
            _object({"action": action, "receipt": _RECEIPT, "handler": _STR}, ["action", "receipt", "handler"]),
            _object(
                {
                    "idempotency_key": _STR,
                    "receipt_id": _STR,
                    "outcome": {},
                    "replayed": {"type": "boolean"},
                    "executed_by": _STR,
                },
                ["idempotency_key", "receipt_id", "replayed"],
            ),
        ),
        "write_audit_event": (
            "Append an event to the hash-chained audit ledger, attributed to the authenticated caller.",
            _object({"event": _STR, "detail": {"type": "object"}}, ["event"]),
            _object(
                {"written": {"type": "boolean"}, "event": _STR, "principal": _STR}, ["written", "event", "principal"]
            ),
        ),
        "evaluate_action": (
            "Decide any action type with the same gate; the decision is kept for its controls.",
            _object(decided, ["action"]),
            _DECISION,
        ),
        "hash_action": (
            "The action's KYA-CJ-1 hash (what decisions, evidence and receipts are bound to).",
            _object(decided, ["action"]),
            _object({"action_hash": _STR, "canonicalization": _STR}, ["action_hash", "canonicalization"]),
        ),
    }
    return [
        types.Tool(name=name, description=specs[name][0], input_schema=specs[name][1], output_schema=specs[name][2])
        for name in TOOL_NAMES
    ]


#: Routes of the JSON API that are not MCP tools, and their arguments.
_ROUTE_SCHEMAS: dict[str, dict[str, Any]] = {
    "opa_decision": _object({"action": {"type": "object"}}, ["action"]),
    "read_challenge": _object({"challenge_id": _STR}, ["challenge_id"]),
}


@cache
def _argument_checks() -> dict[str, Callable[[Any], Any]]:
    """Each tool's input schema, compiled. The action inside is checked by the gate's own action
    contract (the same schema and more, refused with the path named), so here it is an object."""
    checks: dict[str, Callable[[Any], Any]] = {}
    relaxed = {"type": "object"}
    for tool in tool_specs():
        document = dict(tool.input_schema)
        properties = dict(document.get("properties", {}))
        if "action" in properties:
            properties["action"] = relaxed
        checks[tool.name] = fastjsonschema.compile(document | {"properties": properties})
    for name, document in _ROUTE_SCHEMAS.items():
        checks[name] = fastjsonschema.compile(document)
    return checks


def check_arguments(name: str, args: Any) -> None:
    """Raise :class:`CodedError` ``bad_arguments`` unless ``args`` match tool ``name``'s input schema."""
    try:
        _argument_checks()[name](args)
    except fastjsonschema.JsonSchemaValueException as exc:
        where = "".join(f"/{part}" for part in exc.path[1:]) or "arguments"
        detail = exc.message.removeprefix("data").strip()
        raise CodedError(f"bad arguments: {where}: {detail}", "bad_arguments") from None


def _shown(name: str) -> str:
    return repr(name[:64].encode("ascii", "backslashreplace").decode("ascii"))


def dispatch(service: GateService, principal: Principal | None, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Run tool ``name`` for ``principal`` (blocking: the transports call it off the event loop).

    Every call goes through :meth:`GateService.call`, so every refusal is audited: an unknown
    tool, arguments outside the tool's input schema, and whatever the tool itself refuses.
    """
    if name not in _argument_checks():

        def unknown(p: Principal) -> dict[str, Any]:
            raise CodedError(f"unknown tool {_shown(name)}", "unknown_tool")

        return service.call(principal, "unknown_tool", unknown)
    table: dict[str, Callable[[Principal], dict[str, Any]]] = {
        "evaluate_financial_action": lambda p: service.evaluate(p, args.get("action"), financial=True),
        "evaluate_action": lambda p: service.evaluate(p, args.get("action")),
        "hash_action": lambda p: service.hash_action(p, args.get("action")),
        "opa_decision": lambda p: service.decide_only(p, args.get("action")),
        "read_challenge": lambda p: service.read_challenge(p, str(args.get("challenge_id", ""))),
        "create_control_challenge": lambda p: service.create_challenges(
            p, str(args.get("decision_id", "")), args.get("controls"), int(args.get("ttl_seconds", 900))
        ),
        "record_control_result": lambda p: service.record_result(
            p, str(args.get("challenge_id", "")), str(args.get("status", "")), str(args.get("evidence_reference", ""))
        ),
        "issue_delegation_receipt": lambda p: service.issue_receipt(
            p, str(args.get("decision_id", "")), args.get("ttl_seconds")
        ),
        "verify_and_consume_receipt": lambda p: service.verify_and_consume(p, args.get("receipt"), args.get("action")),
        "execute_authorized_action": lambda p: service.execute(
            p, args.get("action"), args.get("receipt"), str(args.get("handler", ""))
        ),
        "write_audit_event": lambda p: service.write_audit_event(
            p, str(args.get("event", "")), args.get("detail") or {}
        ),
    }
    work = table[name]

    def checked(p: Principal) -> dict[str, Any]:
        check_arguments(name, args)
        return work(p)

    try:
        return service.call(principal, name, checked)
    except KcpOpaError:
        raise
    except Exception as exc:  # never a 500 or a traceback to the caller: an audited refusal, logged here
        _log.error("tool_failed", tool=name, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        refusal = CodedError(f"{name} failed ({type(exc).__name__}); the call is refused", "internal_error")
        service.refuse(principal, name, refusal)
        raise refusal from None


def error_payload(exc: KcpOpaError) -> dict[str, Any]:
    code = getattr(exc, "code", None) or ("action_rejected" if isinstance(exc, ActionRejectedError) else "error")
    return {"error": str(exc), "code": code}


Resolver = Callable[[ServerRequestContext[Any, Any]], Principal | None]


def build_server(service: GateService, resolve: Resolver) -> Server[Any]:
    """An MCP server over ``service``; ``resolve`` names the caller of each request."""
    tools = tool_specs()

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        principal = resolve(ctx)
        args = dict(params.arguments or {})
        try:
            result = await anyio.to_thread.run_sync(dispatch, service, principal, params.name, args)
        except KcpOpaError as exc:
            return _error(error_payload(exc))
        except (ValueError, TypeError) as exc:  # a malformed argument (e.g. ttl_seconds "x"): the caller's fault
            return _error({"error": f"bad arguments: {exc}", "code": "bad_arguments"})
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


def _error(payload: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=f"{payload['code']}: {payload['error']}")],
        structured_content=payload,
        is_error=True,
    )


def _summary(name: str, result: Mapping[str, Any]) -> str:
    return json.dumps(result, sort_keys=True, default=str)
