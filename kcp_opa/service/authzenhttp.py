"""The AuthZEN 1.0 routes of ``kcp-opa serve``: ``POST /access/v1/evaluation``, the batch
``POST /access/v1/evaluations`` and ``GET /.well-known/authzen-configuration``.

Each route is bearer-authenticated like every other (401 ``unauthenticated``, audited), reads
its body through the service's capped strict reader, maps each evaluation with authzen.py and
decides it through the catalog's ``evaluate_action``, the tool ``POST /v1/decisions`` runs: the
same caller checks, the same decision, the same kept record and ledger entry. A refusal is the
project's ``{"error", "code"}`` with AuthZEN's status (400, 401, 403, 500; 503 when the store
is down) and is audited; ``X-Request-ID`` is echoed on every answer.
"""

from __future__ import annotations

import anyio.to_thread
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.service.authzen import (
    answer,
    evaluations_of,
    map_evaluation,
    metadata,
    one_tenant,
    refused,
    stated_at,
)
from kcp_opa.service.callers import AccessDeniedError, Principal
from kcp_opa.service.callers import Scope as ToolScope
from kcp_opa.service.catalog import Catalog, ErrorPayload, error_payload
from kcp_opa.service.desk import GateService
from kcp_opa.service.httpedge import MAX_BODY_BYTES, RequireAuth, endpoint_app, principal_of, read_capped, strict_json
from kcp_opa.service.observe import span
from kcp_opa.service.refusals import AUTHZEN_STATUS, status_of

EVALUATION = "/access/v1/evaluation"
EVALUATIONS = "/access/v1/evaluations"
METADATA = "/.well-known/authzen-configuration"
#: The catalog tool every evaluation runs: the one behind ``POST /v1/decisions``.
TOOL = "evaluate_action"


class EchoRequestId:
    """AuthZEN: a response carries the request's ``X-Request-ID`` (the 401 of RequireAuth too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        wanted = [v for k, v in scope.get("headers", []) if k.lower() == b"x-request-id"]

        async def echo(message: Message) -> None:
            if message["type"] == "http.response.start" and wanted:
                MutableHeaders(scope=message)["x-request-id"] = wanted[0].decode("latin-1")
            await send(message)

        await self.app(scope, receive, echo)


async def _body(request: Request) -> JsonDict:
    """The request object: ``Content-Type: application/json``, capped, strict, not empty (else 400)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise CodedError(f"Content-Type must be application/json, not {media[:64]!r}", "bad_request")
    raw = await read_capped(request.receive, request.headers.get("content-length"))
    if not raw.strip():
        raise CodedError("body is empty: an AuthZEN request is a JSON object", "bad_request")
    value = strict_json(raw)
    if not isinstance(value, dict):
        raise CodedError("body must be a JSON object", "bad_request")
    return value


def _caller(request: Request) -> Principal:
    principal = principal_of(request)
    if principal is None:  # RequireAuth answered before this: never reached
        raise AccessDeniedError("authentication required", "unauthenticated")
    return principal


def authzen_routes(
    service: GateService,
    catalog: Catalog,
    enforced: frozenset[str] = frozenset(),
    public_url: str | None = None,
) -> list[Route]:
    """The three AuthZEN routes, refusing with refusals.AUTHZEN_STATUS's statuses; ``enforced``
    names the obligations the gateway in front enforces (``serve --authzen-obligation``);
    ``public_url`` the PDP's identifier in the metadata (``serve --public-url``; else the URL reached)."""

    def answered(exc: KcpOpaError) -> tuple[int, ErrorPayload]:
        payload = error_payload(exc)
        return status_of(payload["code"], AUTHZEN_STATUS), payload

    def error(exc: KcpOpaError) -> JSONResponse:
        code, payload = answered(exc)
        return JSONResponse(payload, code)

    def decide(principal: Principal, item: JsonObject, path: str) -> JsonDict:
        """One evaluation, mapped and decided (blocking); a refused mapping is audited here, the
        gate's refusals by dispatch."""
        try:
            mapped = map_evaluation(principal, item)
        except KcpOpaError as exc:
            service.refuse(principal, path, exc)
            raise
        try:
            decided = catalog.dispatch(service, principal, TOOL, {"action": mapped.action})
        except ActionRejectedError as exc:  # audited as the action contract named it; answered as the request
            raise CodedError(f"{stated_at(exc.path)}: {exc.reason}", "action_rejected") from None
        return answer(decided, mapped.ignored, enforced)

    def batch(principal: Principal, items: list[JsonDict], semantic: str) -> JsonDict:
        """Every evaluation in order, stopping where the semantic says; an item that cannot be
        decided is ``false`` with its error, a fault (5xx: the store or ledger down) ends the request."""
        results: list[JsonDict] = []
        for item in items:
            try:
                result = decide(principal, item, EVALUATIONS)
            except KcpOpaError as exc:
                code, payload = answered(exc)
                if code >= 500:
                    raise
                result = refused(code, payload["code"], payload["error"])
            results.append(result)
            if (semantic == "deny_on_first_deny" and not result["decision"]) or (
                semantic == "permit_on_first_permit" and result["decision"]
            ):
                break
        return {"evaluations": results}

    async def evaluation(request: Request) -> Response:
        principal = _caller(request)
        try:
            body = await _body(request)
        except KcpOpaError as exc:
            await anyio.to_thread.run_sync(service.refuse, principal, EVALUATION, exc)
            return error(exc)
        with span(f"kcp_opa.http {EVALUATION}", {"http.route": EVALUATION}, request.headers.get("traceparent")):
            try:
                return JSONResponse(await anyio.to_thread.run_sync(decide, principal, body, EVALUATION))
            except KcpOpaError as exc:
                return error(exc)

    async def evaluations(request: Request) -> Response:
        principal = _caller(request)
        try:
            body = await _body(request)
            listed = evaluations_of(body, MAX_BODY_BYTES)
            if listed is not None:
                one_tenant(listed[0])
                principal.require(ToolScope.EVALUATE, "evaluate actions")  # one refusal, not one per item
        except KcpOpaError as exc:
            await anyio.to_thread.run_sync(service.refuse, principal, EVALUATIONS, exc)
            return error(exc)
        with span(f"kcp_opa.http {EVALUATIONS}", {"http.route": EVALUATIONS}, request.headers.get("traceparent")):
            try:
                if listed is None:  # no evaluations: one evaluation, answered as one (the spec)
                    single = {k: v for k, v in body.items() if k not in ("evaluations", "options")}
                    return JSONResponse(await anyio.to_thread.run_sync(decide, principal, single, EVALUATIONS))
                return JSONResponse(await anyio.to_thread.run_sync(batch, principal, *listed))
            except KcpOpaError as exc:
                return error(exc)

    async def configuration(request: Request) -> Response:
        return JSONResponse(metadata(public_url or str(request.base_url).rstrip("/")))

    def route(path: str, app: ASGIApp, method: str) -> Route:
        return Route(path, EchoRequestId(RequireAuth(app, service, path)), methods=[method])

    return [
        route(EVALUATION, endpoint_app(evaluation), "POST"),
        route(EVALUATIONS, endpoint_app(evaluations), "POST"),
        route(METADATA, endpoint_app(configuration), "GET"),
    ]


__all__ = ["EVALUATION", "EVALUATIONS", "METADATA", "authzen_routes"]
