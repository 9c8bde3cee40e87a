"""``GET /v1/openapi.json``: the JSON API and the AuthZEN routes as OpenAPI 3.1, built from the tool catalog.

Each tool route runs one tool through the same dispatch as MCP, so its request and response
schemas are the tool's input and output schemas (a path parameter is taken out of the body's);
the routes that are not tools are listed in :data:`FIXED_ROUTES`, AuthZEN's in
:data:`AUTHZEN_ROUTES`. A test holds that every ``/v1`` and AuthZEN route of the app is described
here and nothing else.
"""

from __future__ import annotations

import copy
from typing import Any

from kcp_opa.core.version import __version__
from kcp_opa.service.catalog import Catalog, Tool

OPA_ROUTE = "/v1/data/kcp/gate/decision"
#: The ``/v1`` routes that are not a catalog tool's: (path, method, path parameter, summary).
FIXED_ROUTES: tuple[tuple[str, str, str | None, str], ...] = (
    ("/v1/challenges", "get", None, "The open challenges addressed to the caller (?addressed_to=me)"),
    (OPA_ROUTE, "post", None, "OPA-compatible: {input: action} -> {result: decision}"),
    ("/v1/status", "get", None, "Bundle, store, ledger, trust and tools status"),
    ("/v1/admin/reload", "post", None, "Reload bundle, registry, tokens and keys (service_admin)"),
    ("/v1/admin/mode", "post", None, "Switch enforce / log_only (service_admin; may need a second admin)"),
    ("/v1/openapi.json", "get", None, "This document"),
)
#: The AuthZEN 1.0 routes (authzenhttp.py): (path, method, summary, request schema, response schema).
_ENTITY = {
    "type": "object",
    "properties": {"type": {"type": "string"}, "id": {"type": "string"}, "properties": {"type": "object"}},
    "required": ["type", "id"],
}
_EVALUATION_PARTS = {
    "subject": _ENTITY,
    "resource": _ENTITY,
    "action": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "properties": {"type": "object"}},
        "required": ["name"],
    },
    "context": {"type": "object"},
}
_AUTHZEN_DECISION = {
    "type": "object",
    "properties": {"decision": {"type": "boolean"}, "context": {"type": "object"}},
    "required": ["decision"],
}
_SEMANTICS = {"enum": ["execute_all", "deny_on_first_deny", "permit_on_first_permit"]}
AUTHZEN_ROUTES: tuple[tuple[str, str, str, dict[str, Any] | None, dict[str, Any]], ...] = (
    (
        "/access/v1/evaluation",
        "post",
        "AuthZEN 1.0 Access Evaluation: {subject, resource, action, context?} -> {decision, context}",
        {"type": "object", "properties": _EVALUATION_PARTS, "required": ["subject", "resource", "action"]},
        _AUTHZEN_DECISION,
    ),
    (
        "/access/v1/evaluations",
        "post",
        "AuthZEN 1.0 Access Evaluations: defaults, evaluations[], options.evaluations_semantic -> evaluations[]",
        {
            "type": "object",
            "properties": {
                **_EVALUATION_PARTS,
                "evaluations": {"type": "array", "maxItems": 64, "items": {"type": "object"}},
                "options": {"type": "object", "properties": {"evaluations_semantic": _SEMANTICS}},
            },
        },
        {"type": "object", "properties": {"evaluations": {"type": "array", "items": _AUTHZEN_DECISION}}},
    ),
    (
        "/.well-known/authzen-configuration",
        "get",
        "AuthZEN 1.0 PDP metadata: this PDP's identifier and its evaluation endpoints",
        None,
        {
            "type": "object",
            "properties": {
                "policy_decision_point": {"type": "string"},
                "access_evaluation_endpoint": {"type": "string"},
                "access_evaluations_endpoint": {"type": "string"},
            },
            "required": ["policy_decision_point", "access_evaluation_endpoint"],
        },
    ),
)
_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "code": {"type": "string"}},
    "required": ["error", "code"],
}


def routes(catalog: Catalog) -> list[tuple[str, str]]:
    """Every ``/v1`` and AuthZEN (path, method) the app serves for ``catalog``."""
    tools = [(t.route.path, t.route.method) for t in catalog if t.route is not None]
    fixed = [(path, method) for path, method, *_ in FIXED_ROUTES]
    return [*tools, *fixed, *((path, method) for path, method, *_ in AUTHZEN_ROUTES)]


def _operation(parameter: str | None, summary: str, tool: Tool | None) -> dict[str, Any]:
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
        operation["operationId"] = tool.name
        operation["responses"]["200"]["content"]["application/json"]["schema"] = copy.deepcopy(tool.output_schema)
        body = copy.deepcopy(dict(tool.input_schema))
        if parameter is not None:
            body.get("properties", {}).pop(parameter, None)
            body["required"] = [name for name in body.get("required", []) if name != parameter]
        if tool.route is not None and tool.route.method != "get":
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return operation


def openapi_document(catalog: Catalog) -> dict[str, Any]:
    """The OpenAPI 3.1 document for every ``/v1`` and AuthZEN route (bearer auth except this one)."""
    paths: dict[str, dict[str, Any]] = {}
    for tool in catalog:
        if tool.route is not None:
            route = tool.route
            paths.setdefault(route.path, {})[route.method] = _operation(route.parameter, route.summary, tool)
    for path, method, parameter, summary in FIXED_ROUTES:
        operation = _operation(parameter, summary, None)
        if path == "/v1/openapi.json":
            operation["security"] = []
        if path == "/v1/challenges":
            operation["parameters"] = [
                {"name": "addressed_to", "in": "query", "required": True, "schema": {"enum": ["me"]}}
            ]
        paths.setdefault(path, {})[method] = operation
    for path, method, summary, request, response in AUTHZEN_ROUTES:
        operation = _operation(None, summary, None)
        operation["responses"]["200"]["content"]["application/json"]["schema"] = copy.deepcopy(response)
        if request is not None:
            body = {"required": True, "content": {"application/json": {"schema": copy.deepcopy(request)}}}
            operation["requestBody"] = body
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "kcp-opa gate service", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
