"""Single sign-on for the UI: an OpenID Connect relying party (authorization-code flow with PKCE).

The operator configures one issuer, this service's client id (and its secret, from a 0600 file
or ``$KCP_OPA_OIDC_CLIENT_SECRET``, never argv), and a users file saying which signed-in people
are which registered principals: ``{"claim": "email" | "sub", "users": {"<claim value>":
"<principal id>"}}``. The principal's roles come from the trust registry, as for a token; a
person the file does not list is refused, never given a default role. With ``claim: email``
the provider must also say ``email_verified: true``.

The provider's metadata comes from ``<issuer>/.well-known/openid-configuration`` (its ``issuer``
must be the configured one exactly), fetched when the first sign-on begins and kept an hour; a
provider that cannot be reached is :class:`OidcUnavailable` (the UI shows an error page and
opens no session). The issuer is https, or http on a loopback address only. The ID token is
checked by :mod:`kcp_opa.service.oidctoken`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import os
import secrets
import socket
import stat
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.core.files import read_regular
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.declare.trust import TrustRegistry
from kcp_opa.service.oidctoken import KeySet, OidcRefused, OidcUnavailable, verify_id_token

SECRET_ENV = "KCP_OPA_OIDC_CLIENT_SECRET"  # noqa: S105 - the variable's name, not a secret
CLAIMS = ("sub", "email")
METADATA_SECONDS = 3600.0
#: Every call to the provider (connect, send, headers, body) ends within this, whatever it sends.
FETCH_DEADLINE_S = 5.0
#: A discovery that failed slowly (a stalled provider) is answered at once for this long, not asked again;
#: one refused at once (nothing listening) for QUICK_FAILURE_SECONDS, as asking again costs nothing.
FAILED_DISCOVERY_SECONDS = 30.0
QUICK_FAILURE_SECONDS = 2.0
MAX_DOCUMENT_BYTES = 1024 * 1024
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class OidcConfigError(CodedError):
    """A single sign-on setting that cannot work: refused at start, naming what to fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "service_config")


@dataclass(frozen=True)
class OidcSettings:
    """What the operator declares: the issuer, this client, and who may sign in as whom."""

    issuer: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    claim: str = "sub"
    #: The claim's value (as compared: see claim_key) -> the registered principal id it signs in as.
    users: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_issuer(self.issuer)
        if not self.client_id:
            raise OidcConfigError("--oidc-client-id is required with --oidc-issuer")

    def principal_id(self, claims: JsonObject) -> tuple[str, str]:
        """(identity, principal id) the users file gives these verified claims; OidcRefused if none."""
        if self.claim == "email" and claims.get("email_verified") is not True:
            raise OidcRefused("the identity provider does not say this email address is verified", "sso_unknown_user")
        value = claims.get(self.claim)
        if not isinstance(value, str) or not value.strip():
            raise OidcRefused(f"the ID token carries no {self.claim} claim", "sso_unknown_user")
        principal = self.mapped(value)
        if principal is None:
            raise OidcRefused(f"{value[:200]!r} is not listed in this service's users file", "sso_unknown_user")
        return value, principal

    def mapped(self, identity: str) -> str | None:
        """The principal id the users file gives the claim value ``identity`` (as the provider said it), if any."""
        return self.users.get(claim_key(self.claim, identity))


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def claim_key(claim: str, value: str) -> str:
    """How a claim value is compared with the users file: ``sub`` exactly (the provider's opaque id);
    ``email`` with ASCII letters lowercased and nothing else (no Unicode folding, no trimming: a
    look-alike or padded value is another person, never the listed one)."""
    return value.translate(_ASCII_LOWER) if claim == "email" else value


def check_issuer(issuer: str) -> None:
    """An issuer is an https URL (http only on a loopback address), without query or fragment."""
    parts = urllib.parse.urlsplit(issuer)
    local = parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK
    if not (parts.scheme == "https" or local) or not parts.hostname or parts.query or parts.fragment:
        raise OidcConfigError(
            f"--oidc-issuer {issuer[:200]!r}: an https:// URL (http:// only on 127.0.0.1 or localhost), no query"
        )


def read_users(path: Path) -> tuple[str, dict[str, str]]:
    """The users file: ``{"claim": "email" | "sub", "users": {"<value>": "<principal id>"}}``."""
    try:
        raw = strictjson.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        raise OidcConfigError(f"{path}: cannot read the --oidc-users file: {exc}") from None
    claim = raw.get("claim") if isinstance(raw, dict) else None
    users = raw.get("users") if isinstance(raw, dict) else None
    if claim not in CLAIMS or not isinstance(users, dict) or not users:
        raise OidcConfigError(
            f'{path}: expected {{"claim": "email" or "sub", "users": {{"<claim value>": "<principal id>", ...}}}}'
        )
    if not all(isinstance(k, str) and isinstance(v, str) and k.strip() and v.strip() for k, v in users.items()):
        raise OidcConfigError(f"{path}: every user is a claim value mapped to a registered principal id (strings)")
    compared: dict[str, str] = {}
    seen: dict[str, str] = {}
    for value, principal_id in users.items():
        if value != value.strip():
            raise OidcConfigError(
                f"{path}: the user {value[:200]!r} has spaces around it; write the claim value exactly"
            )
        key = claim_key(str(claim), value)
        if key in seen:
            raise OidcConfigError(
                f"{path}: the users {seen[key][:200]!r} and {value[:200]!r} are the same {claim}"
                " (email addresses are compared ignoring ASCII case); list each person once"
            )
        seen[key], compared[key] = value, principal_id
    return str(claim), compared


def read_client_secret(path: Path | None) -> str | None:
    """The client secret from ``path`` (owner-only: mode 0600 or narrower) or ``$KCP_OPA_OIDC_CLIENT_SECRET``."""
    if path is None:
        return os.environ.get(SECRET_ENV) or None
    try:
        mode = path.stat().st_mode
        secret = read_regular(path, 4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise OidcConfigError(f"{path}: cannot read the --oidc-client-secret-file: {exc}") from None
    if stat.S_IMODE(mode) & 0o077:
        raise OidcConfigError(f"{path}: the client secret is readable by others; chmod 600 {path}")
    if not secret:
        raise OidcConfigError(f"{path}: the --oidc-client-secret-file is empty")
    return secret


def _exchange(url: str, data: bytes | None, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """One request and its answer (status, body up to 1 MiB + 1 byte) within FETCH_DEADLINE_S overall.

    http.client, not urllib: a redirect is never followed (the client secret goes only where the
    discovery document said), and a watchdog shuts the socket at the deadline, so a provider that
    drips its headers or body a byte at a time costs FETCH_DEADLINE_S, not a socket timeout per read.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OidcUnavailable(f"the identity provider's URL {url[:200]!r} is not http(s)")
    connection_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(parts.hostname, parts.port, timeout=FETCH_DEADLINE_S)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(FETCH_DEADLINE_S, cut)
    watchdog.daemon = True
    watchdog.start()
    deadline = time.monotonic() + FETCH_DEADLINE_S
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST" if data is not None else "GET", target, body=data, headers=dict(headers))
        response = connection.getresponse()
        body = bytearray()
        while len(body) <= MAX_DOCUMENT_BYTES:
            chunk = response.read1(65536)
            if not chunk:
                break
            body += chunk
            if time.monotonic() > deadline:
                expired.set()
                break
        if expired.is_set():
            raise OSError("no whole answer")
        return response.status, bytes(body)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if expired.is_set():
            raise OidcUnavailable(
                f"the identity provider did not answer within {FETCH_DEADLINE_S:.0f} s at {url[:200]}"
            ) from None
        raise OidcUnavailable(f"the identity provider cannot be reached at {url[:200]}: {exc}") from None
    finally:
        watchdog.cancel()
        connection.close()


def fetch_json(
    url: str, data: bytes | None = None, headers: Mapping[str, str] | None = None, *, refusal: bool = False
) -> JsonDict:
    """One JSON document from the provider (5 s in all, 1 MiB, no redirects); OidcUnavailable for anything
    else, but with ``refusal`` (the code exchange) a 4xx answer is the provider refusing: OidcRefused."""
    status, body = _exchange(url, data, {"Accept": "application/json", **(headers or {})})
    if 300 <= status < 400:
        raise OidcUnavailable(f"the identity provider answered a redirect ({status}) at {url[:200]}; none is followed")
    if status >= 400 or status < 200:
        detail = body[:2048].decode("utf-8", "replace")
        if refusal and 400 <= status < 500:
            raise OidcRefused(f"the identity provider refused the code ({status}): {detail[:200]}")
        raise OidcUnavailable(f"the identity provider answered {status} at {url[:200]}: {detail[:200]}")
    if len(body) > MAX_DOCUMENT_BYTES:
        raise OidcUnavailable(f"the identity provider's answer at {url[:200]} is over 1 MiB")
    try:
        document = strictjson.loads(body)
    except ValueError as exc:
        raise OidcUnavailable(f"the identity provider's answer at {url[:200]} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise OidcUnavailable(f"the identity provider's answer at {url[:200]} is not a JSON object")
    return document


def _pkce_challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class Started:
    """A sign-on begun: where to send the browser, and what to keep until it comes back."""

    url: str
    state: str
    nonce: str
    verifier: str


class RelyingParty:
    """This service as the provider's client: begins sign-ons and turns a returned code into an identity."""

    def __init__(self, settings: OidcSettings, *, failed_seconds: float = FAILED_DISCOVERY_SECONDS) -> None:
        self.settings, self.failed_seconds = settings, failed_seconds
        self._metadata: JsonDict | None = None
        self._fetched_at = 0.0
        self._failure, self._failed_until = "", 0.0
        self._lock = threading.Lock()
        self.keys = KeySet(lambda: fetch_json(self._endpoint("jwks_uri")))

    def metadata(self) -> JsonDict:
        """The provider's discovery document (kept an hour); OidcUnavailable when it cannot be had.

        Never waits behind another fetch: while one is under way a kept document (even past its hour)
        is used, or OidcUnavailable says try again; a failed fetch is answered for a while, not repeated.
        """
        kept = self._metadata
        if kept is not None and time.monotonic() - self._fetched_at < METADATA_SECONDS:
            return kept
        if time.monotonic() < self._failed_until:
            raise OidcUnavailable(self._failure)
        if not self._lock.acquire(blocking=False):
            if kept is not None:
                return kept
            raise OidcUnavailable("the identity provider's discovery document is being fetched; try again shortly")
        began = time.monotonic()
        try:
            document = self._discover()
        except OidcUnavailable as exc:
            took = time.monotonic() - began
            hold = self.failed_seconds if took >= 1.0 else min(self.failed_seconds, QUICK_FAILURE_SECONDS)
            self._failure, self._failed_until = str(exc), time.monotonic() + hold
            raise
        finally:
            self._lock.release()
        self._metadata, self._fetched_at = document, time.monotonic()
        return document

    def _discover(self) -> JsonDict:
        issuer = self.settings.issuer
        document = fetch_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
        if document.get("issuer") != issuer:
            raise OidcUnavailable(
                f"the discovery document names issuer {str(document.get('issuer'))[:200]!r}, not {issuer!r}"
            )
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            endpoint = document.get(name)
            if not isinstance(endpoint, str):
                raise OidcUnavailable(f"the discovery document at {issuer} has no {name}")
            check_endpoint(name, endpoint, issuer)
        return document

    def _endpoint(self, name: str) -> str:
        return str(self.metadata()[name])

    def begin(self, redirect_uri: str) -> Started:
        """A new sign-on: fresh state, nonce and PKCE verifier, and the provider's authorization URL."""
        state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        query = {
            "response_type": "code",
            "client_id": self.settings.client_id,
            "redirect_uri": redirect_uri,
            "scope": "openid email profile",
            "state": state,
            "nonce": nonce,
            "code_challenge": _pkce_challenge(verifier),
            "code_challenge_method": "S256",
        }
        endpoint = self._endpoint("authorization_endpoint")
        joiner = "&" if urllib.parse.urlsplit(endpoint).query else "?"
        return Started(endpoint + joiner + urllib.parse.urlencode(query), state, nonce, verifier)

    def finish(self, code: str, *, nonce: str, verifier: str, redirect_uri: str) -> tuple[str, str]:
        """The code exchanged (with the PKCE verifier) and its ID token checked: (identity, principal id)."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri}
        form["code_verifier"] = verifier
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        secret = self.settings.client_secret
        if secret is None:  # a public client: PKCE is its proof
            form["client_id"] = self.settings.client_id
        else:  # client_secret_basic (RFC 6749 2.3.1: each part form-encoded first)
            pair = f"{urllib.parse.quote(self.settings.client_id, safe='')}:{urllib.parse.quote(secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
        body = urllib.parse.urlencode(form).encode("ascii")
        answer = fetch_json(self._endpoint("token_endpoint"), body, headers, refusal=True)
        token = answer.get("id_token")
        if not isinstance(token, str):
            raise OidcRefused("the identity provider's token answer has no id_token")
        claims = verify_id_token(
            token, self.keys, issuer=self.settings.issuer, client_id=self.settings.client_id, nonce=nonce
        )
        return self.settings.principal_id(claims)


def check_endpoint(name: str, url: str, issuer: str) -> None:
    """A discovered endpoint is https; http (on a loopback address) only when the issuer itself is
    loopback http, so a remote https provider's discovery cannot send the code, the client secret or
    the key fetch over plain http (to 127.0.0.1 or anywhere)."""
    parts = urllib.parse.urlsplit(url)
    loopback_issuer = urllib.parse.urlsplit(issuer).scheme == "http"  # check_issuer: http is loopback only
    local = loopback_issuer and parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK
    if not (parts.scheme == "https" or local) or not parts.hostname or parts.fragment:
        raise OidcUnavailable(f"the discovery document's {name} {url[:200]!r} is not https")


def settings_from(
    issuer: str | None, client_id: str | None, secret_file: Path | None, users: Path | None
) -> OidcSettings | None:
    """The service's single sign-on from its options (None without --oidc-issuer); OidcConfigError names what to fix."""
    if issuer is None:
        if client_id or secret_file or users:
            raise OidcConfigError("--oidc-client-id, --oidc-client-secret-file and --oidc-users need --oidc-issuer")
        return None
    if users is None:
        raise OidcConfigError("--oidc-issuer needs --oidc-users (which signed-in people are which principals)")
    claim, mapping = read_users(users)
    return OidcSettings(issuer, client_id or "", read_client_secret(secret_file), claim, mapping)


def check_principals(settings: OidcSettings, registry: TrustRegistry | None) -> None:
    """Every principal the users file names is in the trust registry (checked at start)."""
    if registry is None:
        raise OidcConfigError("single sign-on needs --trust: the registry gives the signed-in principals their roles")
    for identity, principal_id in settings.users.items():
        if registry.principal(principal_id) is None:
            raise OidcConfigError(
                f"the --oidc-users file maps {identity[:200]!r} to {principal_id!r}, which is not in {registry.file}"
            )
