"""The HTTP edge every route shares: bearer authentication, the capped strict body reader, the
loopback Host check, and the 401 wrapper that audits each unauthenticated call.

http.py (the app and the JSON API), ui.py and uisession.py build on these; none of them import
each other's modules through here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping

import anyio.to_thread
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.service.callers import AccessDeniedError, Authenticator, Principal, token_hash
from kcp_opa.service.desk import GateService
from kcp_opa.service.refusals import status_of

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


def principal_of(request: object) -> Principal | None:
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
                {"error": str(refusal), "code": refusal.code},
                status_of(refusal.code),
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


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


def strict_json(raw: bytes) -> object:
    """The project's strict reader (duplicate keys, BOM, UTF-16, NaN, 1e309 refused), one-line errors."""
    try:
        return strictjson.loads(raw)
    except json.JSONDecodeError as exc:
        raise CodedError(f"body is not strict JSON: {str(exc)[:200]}", "bad_request") from None


async def read_body(request: Request) -> JsonDict:
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
            await self._refuse(path, refusal, scope, receive, send)
            return
        if path.rstrip("/") == "/mcp" and scope.get("method") == "POST":
            try:
                raw = await read_capped(receive, headers.get("content-length"))
                strict_json(raw)
            except CodedError as exc:
                await self._refuse(path, exc, scope, receive, send)
                return
            receive = _replay(raw)
        await self.app(scope, receive, send)

    async def _refuse(self, path: str, exc: CodedError, scope: Scope, receive: Receive, send: Send) -> None:
        await anyio.to_thread.run_sync(self.service.refuse, None, path, exc)
        await JSONResponse({"error": str(exc), "code": exc.code}, status_of(exc.code))(scope, receive, send)


_LOOPBACK_HOST = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\])(?::[0-9]{1,5})?", re.IGNORECASE)


def _loopback_host(host: str) -> bool:
    return _LOOPBACK_HOST.fullmatch(host) is not None


def _replay(raw: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


def endpoint_app(endpoint: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)

    return app
