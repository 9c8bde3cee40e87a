"""The HTTP side: MCP over streamable HTTP and a JSON API on one port, bearer-authenticated.

One Starlette app: ``/mcp`` is the SDK's streamable HTTP transport; ``/v1/...`` is a JSON API
over the same tool dispatch (so the two can never disagree), one route per catalog tool that
names one (catalog.py); ``POST /v1/data/kcp/gate/decision``
answers existing OPA clients (``{"input": <action>}`` -> ``{"result": <decision>}``);
``/access/v1/evaluation(s)`` answers AuthZEN 1.0 gateways (authzenhttp.py);
``/health`` (liveness), ``/ready`` (the store and the ledger answer: 200, else 503
``store_unavailable``) and ``/metrics`` are open. Every other route needs ``Authorization: Bearer``: the
token is resolved by the :class:`~kcp_opa.service.callers.Authenticator`, and an
unauthenticated call is refused with 401 and audited like every refusal. The SDK binds each MCP
session to the credential that opened it; under ``serve --workers`` MCP keeps no sessions (a
session lives in one process), and every call stands on its own bearer token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio.to_thread
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError
from kcp_opa.core.jsonread import JsonDict, mapping
from kcp_opa.service import tools
from kcp_opa.service.authzenhttp import authzen_routes
from kcp_opa.service.callers import Authenticator
from kcp_opa.service.catalog import Catalog, Tool, error_payload
from kcp_opa.service.desk import GateService
from kcp_opa.service.httpedge import (
    LOOPBACK,
    BearerBackend,
    EdgeGuard,
    RequireAuth,
    endpoint_app,
    principal_of,
    read_body,
)
from kcp_opa.service.mcpserver import build_server
from kcp_opa.service.observe import METRICS_CONTENT_TYPE, Health, health, span
from kcp_opa.service.oidc import RelyingParty
from kcp_opa.service.openapi import OPA_ROUTE, openapi_document
from kcp_opa.service.proofs import PROOFS_ROUTE, decision_proofs
from kcp_opa.service.refusals import status_of
from kcp_opa.service.reloading import Reloader
from kcp_opa.service.ui import Ui, ui_routes
from kcp_opa.stores.protocols import SessionStore

__all__ = ["build_app", "local_exposition"]


def _refused(exc: KcpOpaError) -> JSONResponse:
    payload = error_payload(exc)
    return JSONResponse(payload, status_of(payload["code"]))


def _readiness(service: GateService) -> Health:
    """Whether the store and the ledger answer now, as /v1/status says it, never with their paths."""
    audit = service.gate.audit
    ledger = service.ledger_path or (audit.ledger if audit is not None else None)
    return health(service.location, service.challenges.healthy(), ledger, shown=False)


def _scrape(service: GateService) -> None:
    """Before ``/metrics`` answers: whether the store and the ledger answer now, the open challenges."""
    document = _readiness(service)
    store_ok, ledger_ok = bool(document["store"]["ok"]), bool(document["ledger"]["ok"])
    try:
        opened = len(service.challenges.open_challenges(limit=500)) if store_ok else None
    except KcpOpaError:  # the store failed between the two reads: reported down, never a 500
        opened, store_ok = None, False
    service.metrics.scraped(store_ok, ledger_ok, opened)


def local_exposition(service: GateService) -> bytes:
    """This process's metrics, scraped now (``serve --workers`` merges every worker's: fleet.py)."""
    _scrape(service)
    return service.metrics.exposition()


Arguments = Callable[[Request, JsonDict], JsonDict]


def _route(service: GateService, catalog: Catalog, path: str, method: str, name: str, arguments: Arguments) -> Route:
    """A JSON API route that runs tool ``name`` through the same dispatch as MCP."""
    opa = path == OPA_ROUTE

    async def endpoint(request: Request) -> Response:
        principal = principal_of(request)
        try:
            args = arguments(request, await read_body(request))
        except KcpOpaError as exc:
            await anyio.to_thread.run_sync(service.refuse, principal, path, exc)
            return _refused(exc)
        with span(f"kcp_opa.http {path}", {"http.route": path}, request.headers.get("traceparent")):
            try:
                result = await anyio.to_thread.run_sync(catalog.dispatch, service, principal, name, args)
            except KcpOpaError as exc:
                return _refused(exc)
            except (ValueError, TypeError) as exc:
                return JSONResponse({"error": f"bad arguments: {exc}", "code": "bad_arguments"}, 400)
        return JSONResponse({"result": result, "decision_id": result.get("decision_id")} if opa else result)

    return Route(path, RequireAuth(endpoint_app(endpoint), service, path), methods=[method.upper()])


def _tool_route(service: GateService, catalog: Catalog, tool: Tool) -> Route:
    """The route a catalog tool names: its body (none for a GET) and its path parameter are the arguments."""
    assert tool.route is not None
    route = tool.route

    def arguments(request: Request, body: JsonDict) -> JsonDict:
        args = {} if route.method == "get" else body
        if route.parameter is not None:
            args = {**args, route.parameter: str(request.path_params[route.parameter])}
        return args

    return _route(service, catalog, route.path, route.method, tool.name, arguments)


def _opa_input(request: Request, body: JsonDict) -> JsonDict:
    if "input" not in body:
        raise ActionRejectedError("", 'an OPA request is {"input": <action intent>}')
    return {"action": body["input"]}


def build_app(
    service: GateService,
    authenticator: Authenticator,
    *,
    host: str = "127.0.0.1",
    reloader: Reloader | None = None,
    catalog: Catalog | None = None,
    authzen_obligations: frozenset[str] = frozenset(),
    public_url: str | None = None,
    sessions: SessionStore | None = None,
    sso: RelyingParty | None = None,
    exposition: Callable[[], bytes] | None = None,
    mcp_stateless: bool = False,
) -> Starlette:
    """The Starlette app ``kcp-opa serve --transport http`` runs (also usable in-process for tests);
    ``catalog`` (default ``tools.CATALOG``) gives MCP's tools, the tool routes and the OpenAPI document;
    ``authzen_obligations`` the obligations the AuthZEN gateway enforces (``--authzen-obligation``),
    ``public_url`` the origin gateways reach it at (``--public-url``); ``sessions`` where the UI keeps
    its sessions (the service's store; default this process's memory), ``sso`` the UI's single sign-on;
    ``exposition`` what ``/metrics`` answers (default: this process's; ``serve --workers`` every
    worker's, labelled ``worker``);
    ``mcp_stateless`` serves MCP without sessions (``serve --workers``: any worker answers any call,
    each authenticated by its own bearer token)."""
    served = catalog or tools.CATALOG
    server = build_server(service, lambda ctx: principal_of(ctx.request), served)
    security = None
    if host in LOOPBACK:  # the SDK's DNS-rebinding protection for a loopback listener
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    manager = StreamableHTTPSessionManager(
        app=server, json_response=True, security_settings=security, stateless=mcp_stateless
    )
    mcp_app = RequireAuth(StreamableHTTPASGIApp(manager), service, "mcp")

    async def health(request: Request) -> Response:  # liveness: the process answers, whatever its database does
        return JSONResponse({"ok": True})

    async def ready(request: Request) -> Response:  # readiness: the store and the ledger answer now
        document = await anyio.to_thread.run_sync(_readiness, service)
        if document["ok"]:
            return JSONResponse(document)
        parts = (("store", document["store"]), ("ledger", document["ledger"]))
        down = " and ".join(part for part, reached in parts if not reached["ok"])
        refusal = {"error": f"the {down} cannot be reached: not ready", "code": "store_unavailable"}
        return JSONResponse({**document, **refusal}, 503)

    async def metrics(request: Request) -> Response:
        scraped = await anyio.to_thread.run_sync(exposition or (lambda: local_exposition(service)))
        return Response(scraped, media_type=METRICS_CONTENT_TYPE)

    async def status(request: Request) -> Response:
        principal = principal_of(request)
        document = await anyio.to_thread.run_sync(lambda: service.status(principal, admin=False))
        document["tools"] = [tool.name for tool in served]  # what dispatch serves (MCP and the JSON API)
        if reloader is not None and reloader.follower is not None:  # serve --bundle-source
            followed = reloader.follower.status()
            if "path" not in mapping(document["store"]):  # not an admin: where the bundles come from is not shown
                followed.pop("source", None)
            document["bundle_source"] = followed
        return JSONResponse(document)

    document = openapi_document(served)  # built once: a catalog whose operationIds clash refuses to start

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def proofs(request: Request) -> Response:  # a decision's entries with inclusion proofs (proofs.py)
        principal, decision_id = principal_of(request), str(request.path_params["decision_id"])
        try:
            found = await anyio.to_thread.run_sync(decision_proofs, service, principal, decision_id)
        except KcpOpaError as exc:
            return _refused(exc)
        return JSONResponse(found)

    def admin(path: str, run: Callable[[Request], Awaitable[JsonDict]]) -> Route:
        async def endpoint(request: Request) -> Response:
            if reloader is None:
                return _refused(CodedError("this server was started without reload sources", "no_reload"))
            try:
                done = await run(request)
            except KcpOpaError as exc:
                return _refused(exc)
            return JSONResponse(done)

        return Route(path, RequireAuth(endpoint_app(endpoint), service, path), methods=["POST"])

    async def reload(request: Request) -> JsonDict:
        assert reloader is not None
        return await anyio.to_thread.run_sync(reloader.admin_reload, principal_of(request))

    async def mode(request: Request) -> JsonDict:
        assert reloader is not None
        wanted = (await read_body(request)).get("mode")
        if not isinstance(wanted, str):
            raise CodedError('expected {"mode": "enforce" | "log_only"}', "bad_arguments")
        return await anyio.to_thread.run_sync(reloader.admin_mode, principal_of(request), wanted)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/mcp", mcp_app),
        Route("/v1/status", RequireAuth(endpoint_app(status), service, "/v1/status"), methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        Route(PROOFS_ROUTE, RequireAuth(endpoint_app(proofs), service, PROOFS_ROUTE), methods=["GET"]),
        admin("/v1/admin/reload", reload),
        admin("/v1/admin/mode", mode),
        _route(service, served, OPA_ROUTE, "post", "opa_decision", _opa_input),
        *(_tool_route(service, served, tool) for tool in served if tool.route is not None),
        # /ui and GET /v1/challenges (ui.py)
        *ui_routes(Ui(service, authenticator, served, sessions=sessions, sso=sso, public_url=public_url)),
        *authzen_routes(service, served, authzen_obligations, public_url),  # /access/v1/..., metadata (authzenhttp.py)
    ]
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(EdgeGuard, service=service, loopback=host in LOOPBACK),
            Middleware(AuthenticationMiddleware, backend=BearerBackend(authenticator)),
        ],
        lifespan=lambda app: manager.run(),
    )
