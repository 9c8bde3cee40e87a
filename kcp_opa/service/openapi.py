"""``GET /v1/openapi.json``: the JSON API as OpenAPI 3.1, built from the tools' own schemas.

Each ``/v1`` route runs one tool through the same dispatch as MCP, so its request and response
schemas are the tool's input and output schemas (a path parameter is taken out of the body's);
a test holds that every ``/v1`` route of the app is described here and nothing else.
"""

from __future__ import annotations

import copy
from typing import Any

from kcp_opa.core.version import __version__

#: path -> (method, tool or None, path parameter or None, summary)
ROUTES: tuple[tuple[str, str, str | None, str | None, str], ...] = (
    ("/v1/decisions", "post", "evaluate_action", None, "Decide an action; the decision is kept for its controls"),
    (
        "/v1/decisions/{decision_id}/challenges",
        "post",
        "create_control_challenge",
        "decision_id",
        "Open challenges for a decision's missing controls",
    ),
    ("/v1/challenges", "get", None, None, "The open challenges addressed to the caller (?addressed_to=me)"),
    ("/v1/challenges/{challenge_id}", "get", None, "challenge_id", "One challenge (its addressees and readers)"),
    (
        "/v1/challenges/{challenge_id}/result",
        "post",
        "record_control_result",
        "challenge_id",
        "Answer a challenge addressed to the caller",
    ),
    ("/v1/receipts", "post", "issue_delegation_receipt", None, "Sign a one-time receipt for an APPROVED decision"),
    ("/v1/receipts/verify", "post", "verify_and_consume_receipt", None, "Verify and consume a receipt"),
    ("/v1/executions", "post", "execute_authorized_action", None, "Verify, consume, run a handler once"),
    ("/v1/audit-events", "post", "write_audit_event", None, "Append a note to the audit ledger"),
    ("/v1/data/kcp/gate/decision", "post", None, None, "OPA-compatible: {input: action} -> {result: decision}"),
    ("/v1/status", "get", None, None, "Bundle, store, ledger and trust status"),
    ("/v1/admin/reload", "post", None, None, "Reload bundle, registry, tokens and keys (service_admin)"),
    ("/v1/admin/mode", "post", None, None, "Switch enforce / log_only (service_admin; may need a second admin)"),
    ("/v1/openapi.json", "get", None, None, "This document"),
)
_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "code": {"type": "string"}},
    "required": ["error", "code"],
}


def _operation(tool: str | None, parameter: str | None, summary: str, specs: dict[str, Any]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
            "default": {"description": "Refused (audited)", "content": {"application/json": {"schema": _ERROR}}},
        },
    }
    if parameter is not None:
        operation["parameters"] = [{"name": parameter, "in": "path", "required": True, "schema": {"type": "string"}}]
    if tool is not None:
        spec = specs[tool]
        body = copy.deepcopy(spec.input_schema)
        if parameter is not None:
            body.get("properties", {}).pop(parameter, None)
            body["required"] = [name for name in body.get("required", []) if name != parameter]
        operation["operationId"] = tool
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
        operation["responses"]["200"]["content"]["application/json"]["schema"] = spec.output_schema
    return operation


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document for every ``/v1`` route (bearer auth except this one)."""
    from kcp_opa.service.tools import tool_specs

    specs = {spec.name: spec for spec in tool_specs()}
    paths: dict[str, dict[str, Any]] = {}
    for path, method, tool, parameter, summary in ROUTES:
        operation = _operation(tool, parameter, summary, specs)
        if path == "/v1/openapi.json":
            operation["security"] = []
        if path == "/v1/challenges":
            operation["parameters"] = [
                {"name": "addressed_to", "in": "query", "required": True, "schema": {"enum": ["me"]}}
            ]
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "kcp-opa gate service", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
