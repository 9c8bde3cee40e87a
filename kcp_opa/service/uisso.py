"""The UI's single sign-on routes: ``/ui/sso/start`` sends the browser to the identity provider,
``/ui/sso/callback`` takes it back and opens a session (oidc.py is the relying party).

The sign-on's state goes to the browser in a cookie (HttpOnly, SameSite=Lax so it comes back on
the provider's top-level redirect; ``__Host-`` on Path=/ when Secure, else Path=/ui/sso) and,
hashed, to the store with the nonce and the PKCE verifier, so the callback may reach any
replica. The callback opens a session only when the returned state equals the cookie's (constant
time), the store still holds the sign-on (taken once, within ten minutes), the code exchange and
the ID token check pass, the users file maps the person to a principal and the registry knows
that principal. Anything else is a sign-in page saying what happened, an audited refusal, and no
session; a provider that cannot be reached is a 503 page. The session cookie is SameSite=Strict,
so the callback answers with a page that moves on to /ui from this site rather than a redirect
the provider's navigation owns. Provider calls run on their own few threads, and a replica
begins a bounded number of sign-ons."""

from __future__ import annotations

import hmac
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.to_thread
import structlog
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from kcp_opa.core.errors import KcpOpaError, LedgerError, StoreError
from kcp_opa.service.callers import Principal, canonical_id
from kcp_opa.service.desk import GateService
from kcp_opa.service.issuing import IssuerConfigError, bundle_approver_roles, registry_principal
from kcp_opa.service.oidc import RelyingParty
from kcp_opa.service.oidctoken import OidcRefused, OidcUnavailable
from kcp_opa.service.uipages import esc
from kcp_opa.service.uisession import (
    COOKIE,
    Sessions,
    cookie_key,
    delete_ui_cookie,
    html,
    read_ui_cookie,
    secure_headers,
    set_ui_cookie,
)
from kcp_opa.stores.storedtypes import PendingSignIn, UiSession

STATE_COOKIE = "kcp_ui_sso"
PENDING_SECONDS = 600
#: Sign-ons this replica begins in PENDING_SECONDS, at most: each keeps a store row that long, and
#: /ui/sso/start needs no sign-in, so a flood is refused (503) beyond this rather than filling the store.
MAX_SIGN_ONS_UNDER_WAY = 2000
#: Threads that may talk to the identity provider at once: its own few, never the pool decisions use.
PROVIDER_THREADS = 4
T = TypeVar("T")
LoginPage = Callable[[Request, str, int], Awaitable[Response]]
_log = structlog.get_logger(__name__)


def sso_principal(service: GateService, principal_id: str) -> Principal | None:
    """The registered principal a single sign-on session is, as the registry says now (None: gone)."""
    registry = service.registry
    if registry is None:
        return None
    try:
        return registry_principal(registry, principal_id, bundle_approver_roles(service.gate.bundle))
    except IssuerConfigError:
        return None


def _continue_page() -> str:
    """After the callback: a same-site step on to /ui, so the browser sends the Strict session cookie."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/ui">'
        '<title>Signed in · kcp-opa</title><link rel="stylesheet" href="/ui/static/ui.css"></head><body><main>'
        f'<h1 id="signed-in">Signed in</h1><p><a href="{esc("/ui")}">Continue</a></p></main></body></html>\n'
    )


class SingleSignOn:
    """The two routes over one relying party, the UI's sessions and the store's sign-ons under way."""

    def __init__(
        self,
        service: GateService,
        party: RelyingParty,
        sessions: Sessions,
        login_page: LoginPage,
        public_url: str | None = None,
    ) -> None:
        self.service, self.party, self.sessions = service, party, sessions
        self.login_page, self.public_url = login_page, public_url
        self._provider_threads: anyio.CapacityLimiter | None = None
        self._begun: deque[float] = deque()  # when this replica's sign-ons under way began (event loop only)
        self._full_logged = False

    async def _at_provider(self, call: Callable[[], T]) -> T:
        """``call`` (which talks to the identity provider) on SSO's own few threads: a slow or silent
        provider and a flood of unauthenticated sign-ons wait there, not in the pool /v1 decisions share."""
        if self._provider_threads is None:  # made in the event loop, on first use
            self._provider_threads = anyio.CapacityLimiter(PROVIDER_THREADS)
        return await anyio.to_thread.run_sync(call, limiter=self._provider_threads)

    def maps(self, identity: str, principal_id: str) -> bool:
        """Whether this service's users file maps ``identity`` to ``principal_id`` (a session opened by a
        replica with another users file, or before a restart with a changed one, counts only if it does)."""
        mapped = self.party.settings.mapped(identity)
        return mapped is not None and canonical_id(mapped) == canonical_id(principal_id)

    def redirect_uri(self, request: Request) -> str:
        origin = self.public_url or f"{request.url.scheme}://{request.headers.get('host', '')}"
        return origin.rstrip("/") + "/ui/sso/callback"

    async def _refuse(self, request: Request, exc: KcpOpaError, message: str, status: int) -> Response:
        await anyio.to_thread.run_sync(self.service.refuse, None, "/ui/sso", exc)
        response = await self.login_page(request, message, status)
        delete_ui_cookie(response, request, STATE_COOKIE, path="/ui/sso")
        return response

    def _room_for_one_more(self) -> bool:
        """Whether another sign-on may begin (fewer than MAX_SIGN_ONS_UNDER_WAY in PENDING_SECONDS); counts it."""
        now = time.monotonic()
        while self._begun and now - self._begun[0] >= PENDING_SECONDS:
            self._begun.popleft()
        if len(self._begun) >= MAX_SIGN_ONS_UNDER_WAY:
            if not self._full_logged:  # once per flood: each refusal in the ledger would let it fill the ledger
                _log.warning("ui_sso_sign_ons_capped", under_way=len(self._begun), seconds=PENDING_SECONDS)
                self._full_logged = True
            return False
        self._full_logged = False
        self._begun.append(now)
        return True

    async def start(self, request: Request) -> Response:
        if not self._room_for_one_more():
            message = "Too many sign-ons are under way right now; try again in a few minutes."
            response = await self.login_page(request, message, 503)
            response.headers["Retry-After"] = "60"
            return response
        try:
            redirect_uri = self.redirect_uri(request)
            started = await self._at_provider(lambda: self.party.begin(redirect_uri))
            pending = PendingSignIn(started.nonce, started.verifier)
            store = self.sessions.store
            await anyio.to_thread.run_sync(store.begin_sign_in, cookie_key(started.state), pending, PENDING_SECONDS)
        except OidcUnavailable as exc:
            message = "Single sign-on is unavailable: the identity provider cannot be reached. Try again later."
            return await self._refuse(request, exc, message, 503)
        except StoreError as exc:
            return await self._refuse(request, exc, "Sessions cannot be kept right now; try again later.", 503)
        response = RedirectResponse(started.url, status_code=303)
        set_ui_cookie(
            response, request, STATE_COOKIE, started.state, path="/ui/sso", max_age=PENDING_SECONDS, samesite="lax"
        )
        return secure_headers(response)

    async def callback(self, request: Request) -> Response:
        query = request.query_params
        if query.get("error"):
            refusal = OidcRefused(f"the identity provider answered {query.get('error', '')[:100]}")
            return await self._refuse(request, refusal, "The identity provider did not sign you in.", 401)
        state, code = query.get("state", ""), query.get("code", "")
        held = read_ui_cookie(request, STATE_COOKIE) or ""
        if not held or not state or not hmac.compare_digest(held.encode("utf-8"), state.encode("utf-8")):
            refusal = OidcRefused("a sign-on callback whose state is not this browser's", "csrf")
            return await self._refuse(request, refusal, "That sign-on was not started here; start again.", 403)
        try:
            pending = await anyio.to_thread.run_sync(self.sessions.store.take_sign_in, cookie_key(state))
            if pending is None:
                refusal = OidcRefused("a sign-on callback for a sign-on expired or already used")
                return await self._refuse(request, refusal, "That sign-on expired or was used; start again.", 403)
            redirect_uri, nonce, verifier = self.redirect_uri(request), pending.nonce, pending.verifier
            identity, principal_id = await self._at_provider(
                lambda: self.party.finish(code, nonce=nonce, verifier=verifier, redirect_uri=redirect_uri)
            )
            principal = await anyio.to_thread.run_sync(sso_principal, self.service, principal_id)
            if principal is None:
                refusal = OidcRefused(f"{principal_id} (from the users file) is not in the trust registry")
                return await self._refuse(request, refusal, "Your account is not registered with this service.", 403)
            cookie, _ = await anyio.to_thread.run_sync(self.sessions.open, UiSession("oidc", principal.id, identity))
        except OidcUnavailable as exc:
            message = "Single sign-on is unavailable: the identity provider cannot be reached. Try again later."
            return await self._refuse(request, exc, message, 503)
        except OidcRefused as exc:
            unknown = exc.code == "sso_unknown_user"
            message = "You are not a user of this service; ask its operator to add you." if unknown else str(exc)
            return await self._refuse(request, exc, f"Not signed in: {message}", 403 if unknown else 401)
        except StoreError as exc:
            return await self._refuse(request, exc, "Sessions cannot be kept right now; try again later.", 503)
        await anyio.to_thread.run_sync(self._note, principal, identity)
        response = html(_continue_page())
        set_ui_cookie(response, request, COOKIE, cookie, path="/ui", max_age=self.sessions.lifetime, samesite="strict")
        delete_ui_cookie(response, request, STATE_COOKIE, path="/ui/sso")
        return response

    def _note(self, principal: Principal, identity: str) -> None:
        """The sign-in, in the ledger: who signed in as which principal, by single sign-on."""
        audit = self.service.gate.audit
        if audit is None:
            return
        detail = {"via": "oidc", "identity": identity}
        try:
            audit.event("note", None, None, note="ui.sign_in", detail=detail, principal=principal.to_dict())
        except LedgerError as exc:
            _log.error("ui_sign_in_not_noted", principal=principal.id, error=str(exc))
