"""UI sessions, their cookie, and the forms the UI reads.

The session cookie is random, HttpOnly, SameSite=Strict, Path=/ui, and Secure unless the page
is served over plain HTTP on a loopback socket: a service bound to another address sends it
only over TLS (or through a proxy uvicorn trusts to say https), fail-safe rather than a flag to
remember. The server keeps the sha256 of the cookie, never the cookie, and a session lives
``KCP_OPA_UI_SESSION_SECONDS`` (default 900) from sign-in, never longer.

A form is read through the service's capped reader: past 16 KiB it is refused before more is
read (413), past 20 fields it is refused (400); the caller audits the refusal.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request

from kcp_opa.core.errors import CodedError

MAX_FORM_BYTES = 16 * 1024
MAX_FIELDS = 20


def session_seconds() -> int:
    raw = os.environ.get("KCP_OPA_UI_SESSION_SECONDS", "900")
    return max(5, min(int(raw), 8 * 3600)) if raw.isdigit() else 900


@dataclass(frozen=True)
class Session:
    token: str = ""
    csrf: str = ""
    expires: float = 0.0


class Sessions:
    """Server-side sessions by the sha256 of their cookie value (the cookie itself is not kept)."""

    def __init__(self, lifetime: int) -> None:
        self.lifetime = lifetime
        self._held: dict[str, Session] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(cookie: str) -> str:
        return hashlib.sha256(cookie.encode("utf-8")).hexdigest()

    def open(self, token: str) -> tuple[str, Session]:
        cookie = secrets.token_urlsafe(32)
        session = Session(token, secrets.token_urlsafe(32), time.monotonic() + self.lifetime)
        with self._lock:
            now = time.monotonic()
            self._held = {k: s for k, s in self._held.items() if s.expires > now}
            self._held[self._key(cookie)] = session
        return cookie, session

    def get(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        with self._lock:
            session = self._held.get(self._key(cookie))
            if session is not None and session.expires <= time.monotonic():
                del self._held[self._key(cookie)]
                return None
        return session

    def close(self, cookie: str | None) -> None:
        if cookie:
            with self._lock:
                self._held.pop(self._key(cookie), None)


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


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
