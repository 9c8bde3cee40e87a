"""UI sessions, their cookie, and the forms the UI reads.

The session cookie is random (``secrets.token_urlsafe(32)``), HttpOnly, SameSite=Strict,
Path=/ui, and Secure unless the page is served over plain HTTP on a loopback socket: a service
bound to another address sends it only over TLS (or through a proxy uvicorn trusts to say
https), fail-safe rather than a flag to remember. Sessions live in the service's store
(:class:`~kcp_opa.stores.protocols.SessionStore`), keyed by the sha256 of the cookie, never the
cookie: replicas on one database share them, so a user signed in on one replica is signed in on
all, and a sign-out on one ends the session everywhere. A session lives
``KCP_OPA_UI_SESSION_SECONDS`` (default 900) from sign-in, never longer. Its CSRF token is an
HMAC of the cookie, so the store holds nothing a form could be forged from.

A form is read through the service's capped reader: past 16 KiB it is refused before more is
read (413), past 20 fields it is refused (400); the caller audits the refusal.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from kcp_opa.core.errors import CodedError
from kcp_opa.stores.protocols import SessionStore
from kcp_opa.stores.storedtypes import PendingSignIn, UiSession

MAX_FORM_BYTES = 16 * 1024
MAX_FIELDS = 20
_CSRF_LABEL = b"kcp-opa ui csrf"
COOKIE = "kcp_ui"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def secure_headers(response: Response, csp: str = CSP) -> Response:
    """Every UI response's headers: a strict CSP (no script source), no sniffing, framing or caching."""
    response.headers["Content-Security-Policy"] = csp
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"  # no-referrer makes a browser send Origin: null
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cache-Control"] = "no-store"
    return response


def html(text: str, status: int = 200, *, csp: str = CSP) -> Response:
    return secure_headers(HTMLResponse(text, status), csp)


def session_seconds() -> int:
    raw = os.environ.get("KCP_OPA_UI_SESSION_SECONDS", "900")
    return max(5, min(int(raw), 8 * 3600)) if raw.isdigit() else 900


def cookie_key(cookie: str) -> str:
    """What the store keeps for a cookie (its sha256): a stolen store row is no cookie."""
    return hashlib.sha256(cookie.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Session:
    """A session the browser presented: how it signed in (the stored record) and its CSRF token."""

    record: UiSession
    csrf: str


class Sessions:
    """The UI's sessions over a :class:`SessionStore` (the cookie is never stored, only its hash)."""

    def __init__(self, store: SessionStore, lifetime: int) -> None:
        self.store, self.lifetime = store, lifetime

    @staticmethod
    def _csrf(cookie: str) -> str:
        return hmac.new(cookie.encode("utf-8"), _CSRF_LABEL, hashlib.sha256).hexdigest()

    def open(self, record: UiSession) -> tuple[str, Session]:
        """A new session for ``record``: the cookie to set (random) and the session. Raises StoreError."""
        cookie = secrets.token_urlsafe(32)
        self.store.open_session(cookie_key(cookie), record, self.lifetime)
        return cookie, Session(record, self._csrf(cookie))

    def get(self, cookie: str | None) -> Session | None:
        """The unexpired session of ``cookie``, or None. Raises StoreError when the store cannot answer."""
        if not cookie or len(cookie) > 256:
            return None
        record = self.store.session(cookie_key(cookie))
        return Session(record, self._csrf(cookie)) if record is not None else None

    def close(self, cookie: str | None) -> None:
        if cookie and len(cookie) <= 256:
            self.store.close_session(cookie_key(cookie))


class MemorySessionStore:
    """A :class:`SessionStore` in this process's memory: for an app built in-process without a
    store (``build_app`` embedded); ``kcp-opa serve`` always keeps its sessions in its store."""

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[UiSession, dt.datetime]] = {}
        self._pending: dict[str, tuple[PendingSignIn, dt.datetime]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _now() -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def open_session(self, key: str, session: UiSession, lifetime_seconds: int) -> None:
        with self._lock:
            now = self._now()
            self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
            self._sessions[key] = (session, now + dt.timedelta(seconds=lifetime_seconds))

    def session(self, key: str) -> UiSession | None:
        with self._lock:
            held = self._sessions.get(key)
        return held[0] if held is not None and held[1] > self._now() else None

    def close_session(self, key: str) -> None:
        with self._lock:
            self._sessions.pop(key, None)

    def begin_sign_in(self, key: str, pending: PendingSignIn, lifetime_seconds: int) -> None:
        with self._lock:
            now = self._now()
            self._pending = {k: v for k, v in self._pending.items() if v[1] > now}
            self._pending[key] = (pending, now + dt.timedelta(seconds=lifetime_seconds))

    def take_sign_in(self, key: str) -> PendingSignIn | None:
        with self._lock:
            held = self._pending.pop(key, None)
        return held[0] if held is not None and held[1] > self._now() else None


class FormRefused(CodedError):
    """A form the UI will not read: over 16 KiB (413) or not a form of at most 20 fields (400)."""

    def __init__(self, message: str, code: str, status: int) -> None:
        super().__init__(message, code)
        self.status = status


async def read_form(request: Request) -> dict[str, str]:
    """The form, read through the service's capped reader: never more than 16 KiB in memory."""
    from kcp_opa.service.httpedge import read_capped

    try:
        raw = await read_capped(request.receive, request.headers.get("content-length"), limit=MAX_FORM_BYTES)
    except CodedError:
        raise FormRefused(f"form over {MAX_FORM_BYTES // 1024} KiB", "body_too_large", 413) from None
    try:
        parsed = parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise FormRefused(f"form with more than {MAX_FIELDS} fields", "bad_request", 400) from None
    return {key: values[0] for key, values in parsed.items() if values}


def secure_cookie(request: Request) -> bool:
    """Secure unless served over plain HTTP on a loopback socket: fail-safe for a bind on another
    address (the cookie then travels only over TLS, or a proxy uvicorn trusts that says https)."""
    server = request.scope.get("server") or ("", 0)
    return request.url.scheme == "https" or not _loopback(str(server[0]))


def cookie_name(request: Request, name: str) -> str:
    """``__Host-<name>`` when the cookie is Secure (a browser then takes it only over https, from this
    host, on Path=/ without Domain: a sibling subdomain or a plain-http page cannot plant or shadow
    it); ``<name>`` over plain http on loopback, where a browser refuses the prefix."""
    return f"__Host-{name}" if secure_cookie(request) else name


def set_ui_cookie(
    response: Response, request: Request, name: str, value: str, *, path: str, max_age: int, samesite: str
) -> None:
    """A UI cookie (HttpOnly): ``__Host-`` prefixed on Path=/ when Secure, else ``name`` on ``path``."""
    secure = secure_cookie(request)
    response.set_cookie(
        cookie_name(request, name), value, max_age=max_age, path="/" if secure else path, httponly=True,
        samesite=samesite, secure=secure,  # type: ignore[arg-type]
    )  # fmt: skip


def delete_ui_cookie(response: Response, request: Request, name: str, *, path: str) -> None:
    """Drop the UI cookie ``set_ui_cookie`` set for this request's scheme."""
    secure = secure_cookie(request)
    response.delete_cookie(cookie_name(request, name), path="/" if secure else path, secure=secure, httponly=True)


def read_ui_cookie(request: Request, name: str) -> str | None:
    """The UI cookie ``name`` under this request's name (a plain name never counts where Secure applies)."""
    return request.cookies.get(cookie_name(request, name))


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def same_origin(request: Request) -> bool:
    """A browser's Origin (when sent) must be this server: a cross-site form post is refused."""
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.headers.get('host', '')}"


def csrf_ok(expected: str, given: str | None) -> bool:
    """The form's CSRF token is the session's, compared in constant time."""
    return bool(expected) and hmac.compare_digest(expected.encode("utf-8"), (given or "").encode("utf-8"))
