"""``GET /v1/openapi.json``: the JSON API and the AuthZEN routes as OpenAPI 3.1, built from the tool catalog.

Each tool route runs one tool through the same dispatch as MCP, so its request and response
schemas are the tool's input and output schemas (a path parameter is taken out of the body's);
the routes that are not tools are listed in :data:`FIXED_ROUTES`, AuthZEN's in
:data:`AUTHZEN_ROUTES`. Every operation has a unique ``operationId`` (a tool route's is the tool's
name) and lists each status its route answers: the codes every route of its kind can refuse with
(refusals.py) and, for a route that runs a tool, the tool's own ``refusals``, mapped through the
one table the routes answer with. Tests hold that every ``/v1`` and AuthZEN route of the app is
described here and nothing else, and that each status a real server answers is documented.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict, items
from kcp_opa.core.version import __version__
from kcp_opa.service.catalog import Catalog, Tool
from kcp_opa.service.proofs import PROOF_REFUSALS, PROOFS_ROUTE
from kcp_opa.service.refusals import (
    AUTHENTICATED,
    AUTHZEN_STATUS,
    DEFAULT_STATUS,
    DISPATCH,
    EDGE,
    STATUS,
    meaning,
    statuses,
)

OPA_ROUTE = "/v1/data/kcp/gate/decision"
_ADMIN = ("no_reload", "scope_not_granted", "not_authorized", "bad_arguments")
#: The ``/v1`` routes that are not a catalog tool's: (path, method, operationId, summary, the
#: refusal codes the route answers besides the edge's and authentication's).
FIXED_ROUTES: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    (
        "/v1/challenges",
        "get",
        "list_addressed_challenges",
        "The open challenges addressed to the caller (?addressed_to=me)",
        ("bad_request", "bad_arguments", "scope_not_granted", "not_authorized", "store_unavailable"),
    ),
    (OPA_ROUTE, "post", "opa_decision", "OPA-compatible: {input: action} -> {result: decision}", DISPATCH),
    ("/v1/status", "get", "service_status", "Bundle, store, ledger, trust and tools status", ()),
    (
        "/v1/admin/reload",
        "post",
        "admin_reload",
        "Reload bundle, registry, tokens and keys (service_admin)",
        (*_ADMIN, "reload_failed"),
    ),
    (
        "/v1/admin/mode",
        "post",
        "admin_mode",
        "Switch enforce / log_only (service_admin; may need a second admin)",
        (*_ADMIN, "bad_request", "mode_unknown", "mode_change_refused", "audit_unavailable"),
    ),
    ("/v1/openapi.json", "get", "openapi_document", "This document", ()),
    (
        PROOFS_ROUTE,
        "get",
        "decision_proofs",
        "A decision's ledger entries, each with an inclusion proof to a signed tree checkpoint (verify offline)",
        PROOF_REFUSALS,
    ),
)
#: The tool the OPA-compatible route runs, and the one the AuthZEN evaluations run (their handlers' refusals).
OPA_TOOL, AUTHZEN_TOOL = "opa_decision", "evaluate_action"
#: The AuthZEN 1.0 routes (authzenhttp.py): (path, method, operationId, summary, request schema,
#: response schema); the two evaluation routes run the catalog's ``evaluate_action``.
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
_AUTHZEN_DECISION: JsonDict = {
    "type": "object",
    "properties": {"decision": {"type": "boolean"}, "context": {"type": "object"}},
    "required": ["decision"],
}
_SEMANTICS = {"enum": ["execute_all", "deny_on_first_deny", "permit_on_first_permit"]}
AUTHZEN_ROUTES: tuple[tuple[str, str, str, str, JsonDict | None, JsonDict], ...] = (
    (
        "/access/v1/evaluation",
        "post",
        "authzen_evaluation",
        "AuthZEN 1.0 Access Evaluation: {subject, resource, action, context?} -> {decision, context}",
        {"type": "object", "properties": _EVALUATION_PARTS, "required": ["subject", "resource", "action"]},
        _AUTHZEN_DECISION,
    ),
    (
        "/access/v1/evaluations",
        "post",
        "authzen_evaluations",
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
        "authzen_configuration",
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


def _responses(codes: Iterable[str], table: Mapping[str, int], *, runs_tool: bool, schema: object = None) -> JsonDict:
    """200 (answering ``schema``, else any object) and each status the route can refuse with, naming
    the codes answered with it; a route that runs a tool can also answer a code the table lacks (422)."""
    grouped = statuses(codes, table)
    if runs_tool:
        grouped.setdefault(DEFAULT_STATUS, [])
    ok = {"type": "object"} if schema is None else copy.deepcopy(schema)
    responses: JsonDict = {"200": {"description": "OK", "content": {"application/json": {"schema": ok}}}}
    for status, named in sorted(grouped.items()):
        listed = [*named, "another refusal code"] if status == DEFAULT_STATUS and runs_tool else named
        described = f"{meaning(status)}: {', '.join(listed)}"
        responses[str(status)] = {"description": described, "content": {"application/json": {"schema": _ERROR}}}
    return responses


def _operation(
    operation_id: str, parameter: str | None, summary: str, tool: Tool | None, responses: JsonDict
) -> JsonDict:
    operation: JsonDict = {"operationId": operation_id, "summary": summary, "responses": responses}
    if parameter is not None:
        operation["parameters"] = [{"name": parameter, "in": "path", "required": True, "schema": {"type": "string"}}]
    if tool is not None:
        body = copy.deepcopy(dict(tool.input_schema))
        if parameter is not None:
            properties = body.get("properties")
            if isinstance(properties, dict):
                properties.pop(parameter, None)
            body["required"] = [name for name in items(body.get("required")) if name != parameter]
        if tool.route is not None and tool.route.method != "get":
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return operation


def openapi_document(catalog: Catalog) -> JsonDict:
    """The OpenAPI 3.1 document for every ``/v1`` and AuthZEN route (bearer auth except this one)."""
    paths: dict[str, dict[str, JsonDict]] = {}
    bearer = (*EDGE, *AUTHENTICATED)
    for tool in catalog:
        if tool.route is not None:
            route = tool.route
            refusals = (*bearer, *DISPATCH, *tool.refusals)
            responses = _responses(refusals, STATUS, runs_tool=True, schema=tool.output_schema)
            operation = _operation(tool.name, route.parameter, route.summary, tool, responses)
            paths.setdefault(route.path, {})[route.method] = operation
    opa = catalog.get(OPA_TOOL)
    for path, method, operation_id, summary, codes in FIXED_ROUTES:
        if path == OPA_ROUTE:
            codes = (*codes, *(opa.refusals if opa is not None else ()))
        shown = EDGE if path == "/v1/openapi.json" else bearer
        operation = _operation(
            operation_id, None, summary, None, _responses((*shown, *codes), STATUS, runs_tool=path == OPA_ROUTE)
        )
        if path == "/v1/openapi.json":
            operation["security"] = []
        if path == PROOFS_ROUTE:
            operation["parameters"] = [
                {"name": "decision_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ]
        if path == "/v1/challenges":
            operation["parameters"] = [
                {"name": "addressed_to", "in": "query", "required": True, "schema": {"enum": ["me"]}}
            ]
        paths.setdefault(path, {})[method] = operation
    evaluate = catalog.get(AUTHZEN_TOOL)
    for path, method, operation_id, summary, request, response in AUTHZEN_ROUTES:
        evaluates = request is not None
        codes = (*bearer, "bad_request", "authzen_request", "authzen_mixed_tenants", *DISPATCH) if evaluates else bearer
        if evaluates and evaluate is not None:
            codes = (*codes, *evaluate.refusals)
        responses = _responses(codes, AUTHZEN_STATUS, runs_tool=evaluates, schema=response)
        operation = _operation(operation_id, None, summary, None, responses)
        if request is not None:
            body = {"required": True, "content": {"application/json": {"schema": copy.deepcopy(request)}}}
            operation["requestBody"] = body
        paths.setdefault(path, {})[method] = operation
    named = [str(operation["operationId"]) for methods in paths.values() for operation in methods.values()]
    repeated = sorted({name for name in named if named.count(name) > 1})
    if repeated:
        raise CodedError(
            f"operationIds repeat in the OpenAPI document: {', '.join(repeated)} (rename the tool)", "tool_catalog"
        )
    return {
        "openapi": "3.1.0",
        "info": {"title": "kcp-opa gate service", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
