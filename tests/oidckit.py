"""A small OpenID Connect provider for the tests: a real HTTP server on a loopback port.

It serves discovery, a JWKS (one RSA and one P-256 key), an authorize endpoint that signs in
its configured user without asking (checking the client, the registered redirect URI and a
PKCE S256 challenge), and a token endpoint that checks the client secret, the code (once), the
redirect URI and the PKCE verifier before it answers an ID token. ``tamper`` lets an attack test
change the token it answers (claims, header, key), as a hostile or broken provider would.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from netkit import free_port

CLIENT_ID = "kcp-opa-ui"
ANNA = {"sub": "u-anna", "email": "anna@bank.example", "email_verified": True}
CLIENT_SECRET = "TEST-ONLY-client-secret-" + "x" * 16
#: A tamper hook: given the claims and header the provider would sign, returns the token to answer.
Tamper = Callable[["Provider", dict[str, Any], dict[str, Any]], str]


@dataclass
class Provider:
    """One provider; ``user`` is whom it signs in (its claims), ``redirect_uris`` the registered ones."""

    user: dict[str, Any] = field(
        default_factory=lambda: {"sub": "u-anna", "email": "anna@bank.example", "email_verified": True}
    )
    redirect_uris: list[str] = field(default_factory=list)
    algorithm: str = "RS256"
    tamper: Tamper | None = None
    port: int = 0
    rsa_key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))
    ec_key: Any = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    jwks_fetches: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Provider:
        self.port = self.port or free_port()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                provider._get(self)

            def do_POST(self) -> None:
                provider._post(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- what it publishes and signs ----------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.rsa_key.public_key()))
        ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.ec_key.public_key()))
        return {"keys": [{**rsa_jwk, "kid": "rsa-1", "use": "sig"}, {**ec_jwk, "kid": "ec-1", "use": "sig"}]}

    def sign(self, claims: dict[str, Any], header: dict[str, Any]) -> str:
        """Sign as the provider does: RS256 with the RSA key, ES256 with the EC key."""
        key = self.rsa_key if header["alg"] == "RS256" else self.ec_key
        return jwt.encode(claims, key, algorithm=header["alg"], headers={"kid": header["kid"]})

    def id_token(self, nonce: str) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": CLIENT_ID, "iat": now, "exp": now + 300, "nonce": nonce, **self.user}
        header = {"alg": self.algorithm, "kid": "rsa-1" if self.algorithm == "RS256" else "ec-1"}
        if self.tamper is not None:
            return self.tamper(self, claims, header)
        return self.sign(claims, header)

    # -- endpoints -----------------------------------------------------------------------------

    def _answer(
        self, handler: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        handler.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.seen.append((url.path, query))
        if url.path == "/.well-known/openid-configuration":
            self._answer(handler, 200, self.discovery())
        elif url.path == "/jwks":
            self.jwks_fetches += 1
            self._answer(handler, 200, self.jwks())
        elif url.path == "/authorize":
            self._authorize(handler, query)
        else:
            self._answer(handler, 404, {"error": "not_found"})

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "code_challenge_methods_supported": ["S256"],
        }

    def _authorize(self, handler: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        bad = (
            query.get("response_type") != "code"
            or query.get("client_id") != CLIENT_ID
            or query.get("redirect_uri") not in self.redirect_uris
            or query.get("code_challenge_method") != "S256"
            or not query.get("code_challenge")
            or "openid" not in query.get("scope", "").split()
        )
        if bad:
            self._answer(handler, 400, {"error": "invalid_request", "query": query})
            return
        code = secrets.token_urlsafe(24)
        self.codes[code] = dict(query)
        target = query["redirect_uri"] + "?" + urllib.parse.urlencode({"code": code, "state": query.get("state", "")})
        self._answer(handler, 302, None, {"Location": target})

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(handler.rfile.read(length).decode()))
        self.seen.append((handler.path, form))
        if handler.path != "/token":
            self._answer(handler, 404, {"error": "not_found"})
            return
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if not hmac.compare_digest(handler.headers.get("Authorization", ""), expected):
            self._answer(handler, 401, {"error": "invalid_client"})
            return
        issued = self.codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if (
            issued is None
            or form.get("grant_type") != "authorization_code"
            or form.get("redirect_uri") != issued["redirect_uri"]
            or not hmac.compare_digest(challenge, issued["code_challenge"])
        ):
            self._answer(handler, 400, {"error": "invalid_grant"})
            return
        self._answer(
            handler, 200, {"access_token": "at", "token_type": "Bearer", "id_token": self.id_token(issued["nonce"])}
        )


def follow_to_callback(authorization_url: str) -> str:
    """The browser's part: open the provider's authorize URL and return where it redirects (the callback)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(authorization_url, timeout=10)
    except urllib.error.HTTPError as exc:
        if exc.code == 302:
            return str(exc.headers["Location"])
        raise AssertionError(f"the provider refused the authorization request: {exc.read()!r}") from None
    raise AssertionError("the provider did not redirect")


def users_file(path: Any, claim: str = "email", users: dict[str, str] | None = None) -> Any:
    users = users or {"anna@bank.example": "treasury_approver_anna", "ada@bank.example": "auditor_ada"}
    path.write_text(json.dumps({"claim": claim, "users": users}))
    return path


def secret_file(path: Any) -> Any:
    path.write_text(CLIENT_SECRET)
    path.chmod(0o600)
    return path


def oidc_args(work: Any, provider: Provider) -> list[str]:
    """`kcp-opa serve`'s single sign-on options for ``provider`` (secret in a 0600 file, users file)."""
    return [
        "--oidc-issuer", provider.issuer, "--oidc-client-id", CLIENT_ID,
        "--oidc-client-secret-file", str(secret_file(work / "oidc-secret")),
        "--oidc-users", str(users_file(work / "oidc-users.json")),
    ]  # fmt: skip


def sign_on_over_http(client: Any, url: str) -> Any:
    """A sign-on without a browser (httpx2 ``client`` keeps the cookies): start, the provider, the callback."""
    started = client.get(f"{url}/ui/sso/start")
    assert started.status_code == 303, started.text
    return client.get(follow_to_callback(started.headers["location"]))
