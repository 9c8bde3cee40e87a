"""The HTTP side: MCP over streamable HTTP and a JSON API on one port, bearer-authenticated.

One Starlette app: ``/mcp`` is the SDK's streamable HTTP transport; ``/v1/...`` is a JSON API
over the same tool dispatch (so the two can never disagree); ``POST /v1/data/kcp/gate/decision``
answers existing OPA clients (``{"input": <action>}`` -> ``{"result": <decision>}``);
``/health`` and ``/metrics`` are open. Every other route needs ``Authorization: Bearer``: the
token is resolved by the :class:`~kcp_opa.service.identity.Authenticator`, and an
unauthenticated call is refused with 401 and audited like every refusal. The SDK binds each MCP
session to the credential that opened it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio.to_thread
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kcp_opa.core import strictjson
from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError
from kcp_opa.service.desk import GateService
from kcp_opa.service.identity import AccessDeniedError, Authenticator, Principal, token_hash
from kcp_opa.service.loading import Reloader
from kcp_opa.service.observe import METRICS_CONTENT_TYPE, span
from kcp_opa.service.tools import build_server, dispatch, error_payload
from kcp_opa.service.ui import ui_routes

MAX_BODY_BYTES = 2 * 1024 * 1024
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class PrincipalUser(AuthenticatedUser):
    """The SDK's authenticated user, carrying the resolved principal (the token is kept hashed)."""

    def __init__(self, principal: Principal, hashed: str) -> None:
        scopes = sorted(scope.value for scope in principal.scopes)
        super().__init__(AccessToken(token=hashed, client_id=principal.id, scopes=scopes))
        self.principal = principal


class BearerBackend(AuthenticationBackend):
    """``Authorization: Bearer <token>`` -> the principal the authenticator maps it to."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, PrincipalUser] | None:
        header = conn.headers.get("authorization", "")
        if not header.lower().startswith("bearer "):
            return None
        token = header[7:].strip()
        principal = self.authenticator.bearer(token) if token else None
        if principal is None:
            return None
        user = PrincipalUser(principal, token_hash(token))
        return AuthCredentials(list(user.scopes)), user


def principal_of(request: Any) -> Principal | None:
    """The principal the bearer middleware put on a request (None: unauthenticated)."""
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    return user.principal if isinstance(user, PrincipalUser) else None


class RequireAuth:
    """Refuse unauthenticated requests with 401, auditing each refusal, before the app sees them."""

    def __init__(self, app: ASGIApp, service: GateService, what: str) -> None:
        self.app, self.service, self.what = app, service, what

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if principal_of(HTTPConnection(scope)) is None:
            refusal = AccessDeniedError("authentication required (Authorization: Bearer <token>)", "unauthenticated")
            await anyio.to_thread.run_sync(self.service.refuse, None, self.what, refusal)
            response = JSONResponse(
                {"error": str(refusal), "code": refusal.code}, 401, headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


_STATUS = {
    "unauthenticated": 401,
    "not_authorized": 403,
    "not_your_decision": 403,
    "principal_mismatch": 403,
    "scope_not_granted": 403,
    "unknown_decision": 404,
    "unknown_challenge": 404,
    "unknown_handler": 404,
    "handler_not_bound": 403,
    "challenge_used": 409,
    "replay": 409,
    "reload_failed": 409,
    "action_rejected": 400,
    "bad_request": 400,
    "bad_arguments": 400,
    "unknown_tool": 404,
    "store_unavailable": 503,  # the database is down, failing or read-only: retry later (nothing was done)
}


def _refused(exc: KcpOpaError) -> JSONResponse:
    payload = error_payload(exc)
    return JSONResponse(payload, _STATUS.get(payload["code"], 422))


async def read_capped(receive: Receive, declared: str | None, *, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused past ``limit`` (:data:`MAX_BODY_BYTES`) before more of it is read."""
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise CodedError(f"body is over {limit} bytes (Content-Length {declared[:20]})", "bad_request")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise CodedError(f"body is over {limit} bytes", "bad_request")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def strict_json(raw: bytes) -> Any:
    """The project's strict reader (duplicate keys, BOM, UTF-16, NaN, 1e309 refused), one-line errors."""
    try:
        return strictjson.loads(raw)
    except json.JSONDecodeError as exc:
        raise CodedError(f"body is not strict JSON: {str(exc)[:200]}", "bad_request") from None


async def _body(request: Request) -> dict[str, Any]:
    raw = await read_capped(request.receive, request.headers.get("content-length"))
    value = strict_json(raw or b"{}")
    if not isinstance(value, dict):
        raise CodedError("body must be a JSON object", "bad_request")
    return value


class EdgeGuard:
    """Before any route: on a loopback listener every request's Host must be loopback (``/metrics``
    and ``/health`` too, not only the SDK's ``/mcp``); an MCP POST body is read capped and through
    the strict reader before the SDK parses it. Each refusal is audited."""

    def __init__(self, app: ASGIApp, service: GateService, loopback: bool) -> None:
        self.app, self.service, self.loopback = app, service, loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = str(scope.get("path", ""))
        if self.loopback and not _loopback_host(headers.get("host", "")):
            refusal = CodedError(f"Host {headers.get('host', '')[:80]!r} is not this loopback listener", "bad_host")
            await self._refuse(path, refusal, 421, scope, receive, send)
            return
        if path.rstrip("/") == "/mcp" and scope.get("method") == "POST":
            try:
                raw = await read_capped(receive, headers.get("content-length"))
                strict_json(raw)
            except CodedError as exc:
                await self._refuse(path, exc, 400, scope, receive, send)
                return
            receive = _replay(raw)
        await self.app(scope, receive, send)

    async def _refuse(self, path: str, exc: CodedError, code: int, scope: Scope, receive: Receive, send: Send) -> None:
        await anyio.to_thread.run_sync(self.service.refuse, None, path, exc)
        await JSONResponse({"error": str(exc), "code": exc.code}, code)(scope, receive, send)


_LOOPBACK_HOST = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\])(?::[0-9]{1,5})?", re.IGNORECASE)


def _loopback_host(host: str) -> bool:
    return _LOOPBACK_HOST.fullmatch(host) is not None


def _replay(raw: bytes) -> Receive:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


Handler = Callable[[Request, dict[str, Any]], tuple[str, dict[str, Any]]]


def _tool_route(service: GateService, path: str, build: Handler, *, opa: bool = False) -> Route:
    """A JSON API route that runs one tool through the same dispatch as MCP."""

    async def endpoint(request: Request) -> Response:
        principal = principal_of(request)
        try:
            body = await _body(request)
            tool, args = build(request, body)
        except KcpOpaError as exc:
            await anyio.to_thread.run_sync(service.refuse, principal, path, exc)
            return _refused(exc)
        with span(f"kcp_opa.http {path}", {"http.route": path}, request.headers.get("traceparent")):
            try:
                result = await anyio.to_thread.run_sync(dispatch, service, principal, tool, args)
            except KcpOpaError as exc:
                return _refused(exc)
            except (ValueError, TypeError) as exc:
                return JSONResponse({"error": f"bad arguments: {exc}", "code": "bad_arguments"}, 400)
        return JSONResponse({"result": result, "decision_id": result.get("decision_id")} if opa else result)

    return Route(path, RequireAuth(endpoint_app(endpoint), service, path), methods=["POST"])


def endpoint_app(endpoint: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)

    return app


def _opa_input(request: Request, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if "input" not in body:
        raise ActionRejectedError("", 'an OPA request is {"input": <action intent>}')
    return "opa_decision", {"action": body["input"]}


def build_app(
    service: GateService, authenticator: Authenticator, *, host: str = "127.0.0.1", reloader: Reloader | None = None
) -> Starlette:
    """The Starlette app ``kcp-opa serve --transport http`` runs (also usable in-process for tests)."""
    server = build_server(service, lambda ctx: principal_of(ctx.request))
    security = None
    if host in LOOPBACK:  # the SDK's DNS-rebinding protection for a loopback listener
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    manager = StreamableHTTPSessionManager(app=server, json_response=True, security_settings=security)
    mcp_app = RequireAuth(StreamableHTTPASGIApp(manager), service, "mcp")

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def metrics(request: Request) -> Response:
        return Response(service.metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    async def status(request: Request) -> Response:
        principal = principal_of(request)
        document = await anyio.to_thread.run_sync(lambda: service.status(principal, admin=False))
        if reloader is not None and reloader.follower is not None:  # serve --bundle-source
            followed = reloader.follower.status()
            if "path" not in document["store"]:  # not an admin: where the bundles come from is not shown
                followed.pop("source", None)
            document["bundle_source"] = followed
        return JSONResponse(document)

    async def challenge(request: Request) -> Response:
        args = {"challenge_id": request.path_params["challenge_id"]}
        try:
            found = await anyio.to_thread.run_sync(dispatch, service, principal_of(request), "read_challenge", args)
        except KcpOpaError as exc:
            return _refused(exc)
        return JSONResponse(found)

    async def reload(request: Request) -> Response:
        if reloader is None:
            return JSONResponse({"error": "this server was started without reload sources", "code": "no_reload"}, 404)
        try:
            done = await anyio.to_thread.run_sync(reloader.admin_reload, principal_of(request))
        except KcpOpaError as exc:
            return _refused(exc)
        return JSONResponse(done)

    async def mode(request: Request) -> Response:
        if reloader is None:
            return JSONResponse({"error": "this server was started without reload sources", "code": "no_reload"}, 404)
        try:
            wanted = (await _body(request)).get("mode")
            if not isinstance(wanted, str):
                raise CodedError('expected {"mode": "enforce" | "log_only"}', "bad_arguments")
            done = await anyio.to_thread.run_sync(reloader.admin_mode, principal_of(request), wanted)
        except KcpOpaError as exc:
            return _refused(exc)
        return JSONResponse(done)

    def param(request: Request, name: str) -> str:
        return str(request.path_params[name])

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/mcp", mcp_app),
        Route("/v1/status", RequireAuth(endpoint_app(status), service, "/v1/status"), methods=["GET"]),
        Route(
            "/v1/challenges/{challenge_id}",
            RequireAuth(endpoint_app(challenge), service, "/v1/challenges"),
            methods=["GET"],
        ),
        Route("/v1/admin/reload", RequireAuth(endpoint_app(reload), service, "/v1/admin/reload"), methods=["POST"]),
        Route("/v1/admin/mode", RequireAuth(endpoint_app(mode), service, "/v1/admin/mode"), methods=["POST"]),
        _tool_route(service, "/v1/data/kcp/gate/decision", _opa_input, opa=True),
        _tool_route(service, "/v1/decisions", lambda r, b: ("evaluate_action", b)),
        _tool_route(
            service,
            "/v1/decisions/{decision_id}/challenges",
            lambda r, b: ("create_control_challenge", {**b, "decision_id": param(r, "decision_id")}),
        ),
        _tool_route(
            service,
            "/v1/challenges/{challenge_id}/result",
            lambda r, b: ("record_control_result", {**b, "challenge_id": param(r, "challenge_id")}),
        ),
        _tool_route(service, "/v1/receipts", lambda r, b: ("issue_delegation_receipt", b)),
        _tool_route(service, "/v1/receipts/verify", lambda r, b: ("verify_and_consume_receipt", b)),
        _tool_route(service, "/v1/executions", lambda r, b: ("execute_authorized_action", b)),
        _tool_route(service, "/v1/audit-events", lambda r, b: ("write_audit_event", b)),
        *ui_routes(service, authenticator),  # /ui, GET /v1/challenges, /v1/openapi.json (ui.py)
    ]
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(EdgeGuard, service=service, loopback=host in LOOPBACK),
            Middleware(AuthenticationMiddleware, backend=BearerBackend(authenticator)),
        ],
        lifespan=lambda app: manager.run(),
    )
