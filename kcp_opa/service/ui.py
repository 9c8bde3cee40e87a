"""The service's UI at ``/ui`` (same port): sign-in, a live dashboard, an approvals inbox.

Sign-in takes the principal's bearer token, or with ``--oidc-issuer`` goes through the
identity provider (uisso, oidc). The session (uisession) is kept in the service's store, shared
by replicas, as the token's hash or the principal the users file maps the person to, and is
re-resolved on every request, so a token revoked or a principal removed by a reload ends its
sessions at once.

Views follow the principal's scopes: ``read`` sees the dashboard and the report, filtered and
paged (uifilters), read through the ledger's own snapshot whichever backend holds it (uiledger);
``record_result`` sees the challenges addressed to it and answers them through
``record_control_result``, the tool path the API and MCP use; an agent sees neither. Every POST needs the session's
CSRF token (and a same-origin Origin when the browser sends one); every response carries a
strict Content-Security-Policy with no script source; every value is escaped (uipages). A form
is read through the service's capped reader (16 KiB, 20 fields); anything else is a 400/413 page
and an audited refusal. Every answer is audited: the tool path writes the control result or the
refusal, and a ``ui.answer`` note records the answer given through the UI.

Also here, for the same inbox: ``GET /v1/challenges?addressed_to=me``.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import anyio.to_thread
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from kcp_opa.audit.selection import SelectionError, parse_selection, query_string
from kcp_opa.core.errors import CodedError, KcpOpaError, LedgerError, StoreError, StoreUnavailableError
from kcp_opa.core.jsonread import JsonDict, mapping, objects
from kcp_opa.service import uifilters, uipages
from kcp_opa.service.callers import AccessDeniedError, Authenticator, Principal, Scope, token_hash
from kcp_opa.service.catalog import Catalog, ErrorPayload, error_payload
from kcp_opa.service.desk import GateService
from kcp_opa.service.httpedge import RequireAuth, endpoint_app, principal_of
from kcp_opa.service.issuing import check_addressed
from kcp_opa.service.oidc import RelyingParty
from kcp_opa.service.refusals import status_of
from kcp_opa.service.uiledger import ledger_report, ledger_summary
from kcp_opa.service.uisession import (
    COOKIE,
    FormRefused,
    MemorySessionStore,
    Session,
    Sessions,
    csrf_ok,
    delete_ui_cookie,
    read_form,
    read_ui_cookie,
    same_origin,
    session_seconds,
    set_ui_cookie,
)
from kcp_opa.service.uisession import html as _html
from kcp_opa.service.uisession import secure_headers as _secure_headers
from kcp_opa.service.uisso import SingleSignOn, sso_principal
from kcp_opa.stores.protocols import SessionStore
from kcp_opa.stores.storedtypes import UiSession

LOGIN_COOKIE = "kcp_ui_login"
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
REFRESH_SECONDS = 15
#: An answer's page status by refusal code (otherwise 403): an outage is 503, never a refusal.
_ANSWER_STATUS = {"challenge_used": 409, "store_unavailable": 503}
_log = structlog.get_logger(__name__)


def list_addressed(service: GateService, principal: Principal | None) -> JsonDict:
    """The open challenges addressed to ``principal`` (the API's ``addressed_to=me``); refusals audited."""

    def work(caller: Principal) -> JsonDict:
        caller.require(Scope.RECORD_RESULT, "answer control challenges (it has no inbox)")
        found = []
        for challenge in service.challenges.open_challenges():
            try:
                check_addressed(caller, challenge)
            except AccessDeniedError:
                continue
            found.append(challenge.to_dict())
        return {"principal": caller.id, "challenges": found}

    return service.call(principal, "list_challenges", work)


class Ui:
    """The /ui routes over one GateService and the service's authenticator: answers go through
    ``catalog``, sessions live in ``sessions`` (the service's store), single sign-on through ``sso``."""

    def __init__(
        self,
        service: GateService,
        authenticator: Authenticator,
        catalog: Catalog,
        *,
        sessions: SessionStore | None = None,
        sso: RelyingParty | None = None,
        public_url: str | None = None,
    ) -> None:
        self.service, self.authenticator, self.catalog = service, authenticator, catalog
        self.sessions = Sessions(sessions or MemorySessionStore(), session_seconds())
        self.sso = None if sso is None else SingleSignOn(service, sso, self.sessions, self.login_page, public_url)

    async def _signed_in(self, request: Request) -> tuple[Session, Principal] | None:
        # a store that cannot answer raises StoreUnavailableError: the 503 page (ui_routes' guard), never "signed out"
        session = await anyio.to_thread.run_sync(self.sessions.get, read_ui_cookie(request, COOKIE))
        principal = await anyio.to_thread.run_sync(self._principal, session.record) if session is not None else None
        if session is None or principal is None:
            return None
        return session, principal

    def _principal(self, record: UiSession) -> Principal | None:
        """Who a session is now: its token's principal, or for a sign-on the principal this service's
        users file still maps the person to, as the registry has it now."""
        if record.via == "token":
            return self.authenticator.hashed(record.subject)
        if record.via == "oidc" and self.sso is not None and self.sso.maps(record.identity, record.subject):
            return sso_principal(self.service, record.subject)
        return None

    def _links(self, principal: Principal) -> str:
        links = []
        if Scope.READ in principal.scopes:
            links += [("/ui/dashboard", "Dashboard"), ("/ui/report", "Report")]
        if Scope.RECORD_RESULT in principal.scopes:
            links.append(("/ui/inbox", "Inbox"))
        return uipages.nav(links)

    def _page(self, title: str, body: str, session: Session, principal: Principal, status: int = 200) -> Response:
        text = uipages.page(title, body, principal=principal.to_dict(), csrf=session.csrf, nav=self._links(principal))
        return _html(text, status)

    @staticmethod
    def _nothing_here(principal: Principal) -> str:
        reads, answers = Scope.READ in principal.scopes, Scope.RECORD_RESULT in principal.scopes
        return uipages.nothing_here(principal.to_dict(), reads=reads, answers=answers)

    def _refuse(self, principal: Principal | None, what: str, exc: KcpOpaError) -> None:
        self.service.refuse(principal, what, exc)

    # -- sign-in ----------------------------------------------------------------------------------

    async def login_page(self, request: Request, message: str = "", status: int = 200) -> Response:
        nonce = secrets.token_urlsafe(32)
        response = _html(uipages.sign_in(nonce, message, sso=self.sso is not None), status)
        set_ui_cookie(response, request, LOGIN_COOKIE, nonce, path="/ui", max_age=600, samesite="strict")
        return response

    async def _bad_form(self, principal: Principal | None, what: str, exc: FormRefused) -> None:
        await anyio.to_thread.run_sync(self._refuse, principal, what, exc)

    async def login(self, request: Request) -> Response:
        try:
            form = await read_form(request)
        except FormRefused as exc:
            await self._bad_form(None, "/ui/login", exc)
            return await self.login_page(request, "That sign-in form was not accepted; try again.", exc.status)
        if not same_origin(request) or not csrf_ok(read_ui_cookie(request, LOGIN_COOKIE) or "", form.get("csrf")):
            refusal = AccessDeniedError("sign-in without its form's CSRF token or from another origin", "csrf")
            await anyio.to_thread.run_sync(self._refuse, None, "/ui/login", refusal)
            return await self.login_page(request, "The sign-in form expired; try again.", 403)
        token = form.get("token", "").strip()
        principal = self.authenticator.bearer(token) if token else None
        if principal is None:
            refusal = AccessDeniedError("UI sign-in with an unknown token", "unauthenticated")
            await anyio.to_thread.run_sync(self._refuse, None, "/ui/login", refusal)
            return await self.login_page(request, "That token is not known to this service.", 401)
        try:
            cookie, _ = await anyio.to_thread.run_sync(self.sessions.open, UiSession("token", token_hash(token)))
        except StoreError as exc:
            await anyio.to_thread.run_sync(self._refuse, principal, "/ui/login", exc)
            return await self.login_page(request, "Sessions cannot be kept right now; try again later.", 503)
        response = RedirectResponse("/ui", status_code=303)
        set_ui_cookie(response, request, COOKIE, cookie, path="/ui", max_age=self.sessions.lifetime, samesite="strict")
        delete_ui_cookie(response, request, LOGIN_COOKIE, path="/ui")
        return _secure_headers(response)

    async def logout(self, request: Request) -> Response:
        signed = await self._signed_in(request)
        try:
            form = await read_form(request)
        except FormRefused as exc:
            await self._bad_form(signed[1] if signed else None, "/ui/logout", exc)
            form = {}  # not signed out: the session's CSRF token did not arrive
        if signed is not None and same_origin(request) and csrf_ok(signed[0].csrf, form.get("csrf")):
            # a store that cannot delete it is the 503 page: never "signed out" while other replicas accept it
            await anyio.to_thread.run_sync(self.sessions.close, read_ui_cookie(request, COOKIE))
        response = RedirectResponse("/ui/login", status_code=303)
        delete_ui_cookie(response, request, COOKIE, path="/ui")
        return _secure_headers(response)

    # -- views ------------------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        signed = await self._signed_in(request)
        if signed is None:
            return _secure_headers(RedirectResponse("/ui/login", status_code=303))
        session, principal = signed
        if Scope.READ in principal.scopes:
            return _secure_headers(RedirectResponse("/ui/dashboard", status_code=303))
        if Scope.RECORD_RESULT in principal.scopes:
            return _secure_headers(RedirectResponse("/ui/inbox", status_code=303))
        return self._page("No views", self._nothing_here(principal), session, principal)

    async def dashboard(self, request: Request) -> Response:
        return await self._reader(request, "/ui/dashboard", self._dashboard)

    def _dashboard(self, request: Request, session: Session, principal: Principal) -> Response:
        selection, window = parse_selection(request.query_params.multi_items())
        found = ledger_summary(self.service, selection, window)
        controls = "" if found is None else uifilters.controls_for("/ui/dashboard", selection, window)(*found)
        report = "/ui/report" + (query_string(selection, window, 1) if selection.active else "")
        opened = len(self.service.challenges.open_challenges())
        body = uipages.dashboard(found[0] if found else None, opened, window, controls, report)
        response = self._page("Dashboard", body, session, principal)
        response.headers["Refresh"] = str(REFRESH_SECONDS)
        return response

    async def report(self, request: Request) -> Response:
        def build(request: Request, session: Session, principal: Principal) -> Response:
            selection, window = parse_selection(request.query_params.multi_items())
            # as /v1/status: the ledger's location (a server path) for a service_admin only
            report = ledger_report(
                self.service,
                show_location=Scope.ADMIN in principal.scopes,
                selection=selection,
                window=window,
                controls=uifilters.controls_for("/ui/report", selection, window),
            )
            if report is None:
                return self._page("Report", uipages.no_ledger(), session, principal)
            return _html(report, csp=REPORT_CSP)

        return await self._reader(request, "/ui/report", build)

    async def _reader(
        self, request: Request, what: str, build: Callable[[Request, Session, Principal], Response]
    ) -> Response:
        signed = await self._signed_in(request)
        if signed is None:
            return _secure_headers(RedirectResponse("/ui/login", status_code=303))
        session, principal = signed
        if Scope.READ not in principal.scopes:
            refusal = AccessDeniedError(f"{principal.kind.value} {principal.id} may not read the dashboard")
            await anyio.to_thread.run_sync(self._refuse, principal, what, refusal)
            return self._page("Not allowed", self._nothing_here(principal), session, principal, 403)
        try:
            result: Response = await anyio.to_thread.run_sync(build, request, session, principal)
        except (StoreUnavailableError, LedgerError) as exc:  # the ledger cannot be read: say so, never a blank
            await anyio.to_thread.run_sync(self._refuse, principal, what, exc)
            return self._unavailable(exc, session, principal)
        except SelectionError as exc:  # a filter or page that cannot be used: one line naming it, a 400
            await anyio.to_thread.run_sync(self._refuse, principal, what, exc)
            return self._page("Not shown", uifilters.bad_query(what, str(exc)), session, principal, 400)
        return result

    def _unavailable(self, exc: KcpOpaError, session: Session, principal: Principal) -> Response:
        """503 for an outage: a page that says so, never a refusal or an empty view."""
        return self._page("Unavailable", uipages.unavailable(error_payload(exc)), session, principal, 503)

    async def inbox(self, request: Request) -> Response:
        signed = await self._signed_in(request)
        if signed is None:
            return _secure_headers(RedirectResponse("/ui/login", status_code=303))
        session, principal = signed
        try:
            found = await anyio.to_thread.run_sync(list_addressed, self.service, principal)
        except StoreUnavailableError as exc:  # audited by the service: an outage, not a refusal
            return self._unavailable(exc, session, principal)
        except KcpOpaError:  # refused and audited by the service
            return self._page("Not allowed", self._nothing_here(principal), session, principal, 403)
        return self._page("Inbox", uipages.inbox(objects(found["challenges"]), session.csrf), session, principal)

    async def answer(self, request: Request) -> Response:
        signed = await self._signed_in(request)
        if signed is None:
            return _secure_headers(RedirectResponse("/ui/login", status_code=303))
        session, principal = signed
        challenge_id = str(request.path_params["challenge_id"])
        try:
            form = await read_form(request)
        except FormRefused as exc:
            await self._bad_form(principal, "/ui/answer", exc)
            return self._page(
                "Not recorded", uipages.answered(None, error_payload(exc)), session, principal, exc.status
            )
        if not same_origin(request) or not csrf_ok(session.csrf, form.get("csrf")):
            refusal = AccessDeniedError("an answer without the session's CSRF token or from another origin", "csrf")
            await anyio.to_thread.run_sync(self._refuse, principal, "/ui/answer", refusal)
            body = uipages.answered(None, error_payload(refusal))
            return self._page("Not recorded", body, session, principal, 403)
        args: JsonDict = {
            "challenge_id": challenge_id,
            "status": form.get("status", ""),
            "evidence_reference": form.get("evidence_reference", ""),
        }
        result: JsonDict | None = None
        error: ErrorPayload | None = None
        try:
            result = await anyio.to_thread.run_sync(
                self.catalog.dispatch, self.service, principal, "record_control_result", args
            )
        except KcpOpaError as exc:  # refused and audited by the tool path
            error = error_payload(exc)
        await anyio.to_thread.run_sync(self._note, principal, args, result, error)
        status = 200 if error is None else _ANSWER_STATUS.get(str(error["code"]), 403)
        return self._page("Answer", uipages.answered(result, error), session, principal, status)

    def _note(self, principal: Principal, args: JsonDict, result: JsonDict | None, error: ErrorPayload | None) -> None:
        audit = self.service.gate.audit
        if audit is None:
            return
        detail = {
            "challenge_id": args["challenge_id"],
            "status": args["status"],
            "outcome": "recorded" if error is None else str(error["code"]),
        }
        if result is not None:
            detail["authorization_status"] = str(mapping(result["decision"]).get("authorization_status"))
        try:
            audit.event("note", None, None, note="ui.answer", detail=detail, principal=principal.to_dict())
        except LedgerError as exc:
            _log.error("ui_answer_not_noted", challenge_id=args["challenge_id"], error=str(exc))

    async def stylesheet(self, request: Request) -> Response:
        response = Response(uipages.CSS, media_type="text/css")
        response.headers["Cache-Control"] = "max-age=300"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def ui_routes(ui: Ui) -> list[Route]:
    """The /ui routes and ``GET /v1/challenges`` for ``build_app``, served by ``ui``."""
    service = ui.service

    async def challenges(request: Request) -> Response:
        if request.query_params.get("addressed_to") != "me":
            refusal = CodedError("GET /v1/challenges needs ?addressed_to=me", "bad_request")
            await anyio.to_thread.run_sync(service.refuse, principal_of(request), "/v1/challenges", refusal)
            return JSONResponse(error_payload(refusal), status_of(refusal.code))
        try:
            found = await anyio.to_thread.run_sync(list_addressed, service, principal_of(request))
        except KcpOpaError as exc:
            payload = error_payload(exc)
            return JSONResponse(payload, status_of(payload["code"]))
        return JSONResponse(found)

    def guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                return await endpoint(request)
            except StoreUnavailableError as exc:  # the sessions cannot be read: an outage page, audited
                await anyio.to_thread.run_sync(service.refuse, None, request.url.path, exc)
                return _html(uipages.page("Unavailable", uipages.unavailable(error_payload(exc))), 503)

        return run

    def get(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
        return Route(path, guarded(endpoint), methods=["GET"])

    single = [] if ui.sso is None else [get("/ui/sso/start", ui.sso.start), get("/ui/sso/callback", ui.sso.callback)]

    return [
        Route("/v1/challenges", RequireAuth(endpoint_app(challenges), service, "/v1/challenges"), methods=["GET"]),
        get("/ui", ui.home),
        get("/ui/login", ui.login_page),
        Route("/ui/login", guarded(ui.login), methods=["POST"]),
        Route("/ui/logout", guarded(ui.logout), methods=["POST"]),
        get("/ui/dashboard", ui.dashboard),
        get("/ui/report", ui.report),
        get("/ui/inbox", ui.inbox),
        Route("/ui/challenges/{challenge_id}/answer", guarded(ui.answer), methods=["POST"]),
        get("/ui/static/ui.css", ui.stylesheet),
        *single,
    ]
