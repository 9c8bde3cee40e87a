"""Attacks on the UI's single sign-on at the ID token: a hostile or broken provider (the test
provider, a real HTTP server, answering a token it was made to tamper with) never signs anyone in.

Each test names the guard it proves (kcp_opa/service/oidctoken.py, oidc.py); without that guard
the forged token would be believed.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from oidckit import CLIENT_ID, CLIENT_SECRET, Provider, follow_to_callback, users_file

from kcp_opa.service.oidc import OidcConfigError, OidcSettings, RelyingParty, fetch_json, read_users
from kcp_opa.service.oidctoken import OidcRefused, OidcUnavailable

REDIRECT = "http://127.0.0.1:1/ui/sso/callback"
USERS = {"anna@bank.example": "treasury_approver_anna"}


@pytest.fixture
def provider() -> Iterator[Provider]:
    started = Provider(redirect_uris=[REDIRECT]).start()
    try:
        yield started
    finally:
        started.stop()


def sign_on(provider: Provider, rp: RelyingParty | None = None) -> tuple[str, str]:
    rp = rp or RelyingParty(OidcSettings(provider.issuer, CLIENT_ID, CLIENT_SECRET, "email", USERS))
    started = rp.begin(REDIRECT)
    back = urllib.parse.parse_qs(urllib.parse.urlsplit(follow_to_callback(started.url)).query)
    return rp.finish(back["code"][0], nonce=started.nonce, verifier=started.verifier, redirect_uri=REDIRECT)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unsigned(claims: dict[str, Any], header: dict[str, Any]) -> str:
    head = _b64(json.dumps(header).encode())
    return f"{head}.{_b64(json.dumps(claims).encode())}"


def refused(provider: Provider, match: str) -> OidcRefused:
    with pytest.raises(OidcRefused, match=match) as caught:
        sign_on(provider)
    return caught.value


def test_an_unsigned_token_alg_none_is_refused(provider: Provider) -> None:
    """Guard: only RS256/ES256 (oidctoken.ALGORITHMS)."""
    provider.tamper = lambda p, claims, header: _unsigned(claims, {**header, "alg": "none"}) + "."
    refused(provider, "signed with 'none'")


def test_an_hs256_token_keyed_with_the_providers_public_key_is_refused(provider: Provider) -> None:
    """Guard: no HMAC algorithm, ever (the public key is public: anyone could sign)."""

    def forge(p: Provider, claims: dict[str, Any], header: dict[str, Any]) -> str:
        pem = p.rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        signing = _unsigned({**claims, "email": "anna@bank.example"}, {**header, "alg": "HS256"})
        return signing + "." + _b64(hmac.new(pem, signing.encode(), hashlib.sha256).digest())

    provider.tamper = forge
    refused(provider, "signed with 'HS256'")


def test_a_token_whose_claims_were_changed_after_signing_is_refused(provider: Provider) -> None:
    """Guard: the signature verifies with the provider's published key."""

    def swap(p: Provider, claims: dict[str, Any], header: dict[str, Any]) -> str:
        head, _, signature = p.sign({**claims, "email": "mallory@bank.example"}, header).split(".")
        return f"{head}.{_b64(json.dumps(claims).encode())}.{signature}"

    provider.tamper = swap
    refused(provider, "signature does not verify")


def test_a_token_signed_by_a_key_the_provider_does_not_publish_is_refused(provider: Provider) -> None:
    """Guard: only keys in the provider's JWKS; an unknown kid refetches at most once a minute."""
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    provider.tamper = lambda p, claims, header: jwt.encode(claims, stranger, "RS256", headers={"kid": "rsa-evil"})
    rp = RelyingParty(OidcSettings(provider.issuer, CLIENT_ID, CLIENT_SECRET, "email", USERS))
    for _ in range(5):
        with pytest.raises(OidcRefused, match="does not publish"):
            sign_on(provider, rp)
    assert provider.jwks_fetches == 1  # five unknown kids: one fetch, not five


def test_a_token_signed_by_a_stranger_under_the_providers_kid_is_refused(provider: Provider) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    provider.tamper = lambda p, claims, header: jwt.encode(claims, stranger, "RS256", headers={"kid": "rsa-1"})
    refused(provider, "signature does not verify")


def test_an_rs256_token_naming_the_ec_key_is_refused(provider: Provider) -> None:
    """Guard: the key a token names must fit its algorithm (no key-type confusion)."""
    provider.tamper = lambda p, claims, header: jwt.encode(claims, p.rsa_key, "RS256", headers={"kid": "ec-1"})
    refused(provider, "does not publish")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"aud": "another-client"}, "not for this client"),
        ({"aud": [CLIENT_ID, "another-client"], "azp": "another-client"}, "azp"),
        ({"iss": "http://127.0.0.1:1"}, "another issuer"),
        ({"exp": int(time.time()) - 120}, "expired"),
        ({"iat": int(time.time()) + 600}, "in the future"),
        ({"iat": int(time.time()) - 3600}, "more than 600 s ago"),
        ({"nonce": "a-nonce-from-another-sign-on"}, "nonce"),
    ],
    ids=["wrong-audience", "other-azp", "wrong-issuer", "expired", "issued-in-the-future", "stale", "wrong-nonce"],
)
def test_a_signed_token_with_a_wrong_claim_is_refused(provider: Provider, change: dict[str, Any], match: str) -> None:
    """Guards: aud (and azp), iss, exp and iat within a minute's skew, the nonce of this sign-on."""
    provider.tamper = lambda p, claims, header: p.sign({**claims, **change}, header)
    refused(provider, match)


def test_a_token_without_a_nonce_is_refused(provider: Provider) -> None:
    provider.tamper = lambda p, claims, header: p.sign({k: v for k, v in claims.items() if k != "nonce"}, header)
    refused(provider, "nonce")


def test_an_unverified_email_address_signs_no_one_in(provider: Provider) -> None:
    """Guard: with claim email the provider must say email_verified true (anyone may claim an address)."""
    provider.user = {**provider.user, "email_verified": False}
    assert refused(provider, "not say this email address is verified").code == "sso_unknown_user"


def test_a_person_not_in_the_users_file_gets_no_default_role(provider: Provider) -> None:
    """Guard: only the users file maps a person to a principal; nobody falls back to a role."""
    provider.user = {"sub": "u-eve", "email": "eve@bank.example", "email_verified": True}
    assert refused(provider, "not listed").code == "sso_unknown_user"


@pytest.mark.parametrize("folded", ["\uff21\uff24\uff2d\uff29\uff2e", " admin\t", "ADMIN", "ᴬdmin", "admin\u200b"])
def test_a_subject_that_only_folds_to_a_listed_one_is_refused(provider: Provider, folded: str) -> None:
    """Guard: ``sub`` is compared exactly (oidc.claim_key); NFKC, casefolding or trimming would let a
    provider account named ADMIN in fullwidth letters, or `` admin``, sign in as the principal listed for
    ``admin``."""
    rp = RelyingParty(
        OidcSettings(provider.issuer, CLIENT_ID, CLIENT_SECRET, "sub", {"admin": "treasury_approver_anna"})
    )
    provider.user = {"sub": folded}
    with pytest.raises(OidcRefused, match="not listed") as caught:
        sign_on(provider, rp)
    assert caught.value.code == "sso_unknown_user"
    provider.user = {"sub": "admin"}
    assert sign_on(provider, rp) == ("admin", "treasury_approver_anna")


@pytest.mark.parametrize("folded", ["straße@bank.example", "\u017ftrasse@bank.example", " strasse@bank.example"])
def test_an_email_that_only_folds_to_a_listed_one_is_refused(provider: Provider, folded: str) -> None:
    """Guard: ``email`` is compared with ASCII letters lowercased and nothing else (oidc.claim_key)."""
    users = {"strasse@bank.example": "treasury_approver_anna"}
    rp = RelyingParty(OidcSettings(provider.issuer, CLIENT_ID, CLIENT_SECRET, "email", users))
    provider.user = {"sub": "u-x", "email": folded, "email_verified": True}
    with pytest.raises(OidcRefused, match="not listed"):
        sign_on(provider, rp)
    provider.user = {"sub": "u-x", "email": "STRASSE@Bank.Example", "email_verified": True}
    assert sign_on(provider, rp) == ("STRASSE@Bank.Example", "treasury_approver_anna")  # the raw claim


def test_a_users_file_whose_people_collide_is_refused_at_start(tmp_path: Path) -> None:
    """Guard: two entries compared as one person (email, ASCII case) would let the later silently win."""
    path = users_file(tmp_path / "u.json", users={"Anna@bank.example": "auditor_ada", "anna@bank.example": "x"})
    with pytest.raises(OidcConfigError, match="are the same email"):
        read_users(path)
    path = users_file(tmp_path / "u.json", claim="sub", users={" admin": "auditor_ada"})
    with pytest.raises(OidcConfigError, match="spaces around it"):
        read_users(path)
    assert read_users(users_file(tmp_path / "u.json", claim="sub", users={"Admin": "a", "admin": "b"}))[1] == {
        "Admin": "a",
        "admin": "b",
    }  # subjects are distinct when their bytes are


class _Answering(BaseHTTPRequestHandler):
    """Answers every GET and POST with ``self.server.answer(handler)`` and records what it saw."""

    server: Any

    def log_message(self, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.server.seen.append(("GET", self.path, self.headers.get("Authorization")))
        self.server.answer(self)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(("POST", self.path, self.headers.get("Authorization")))
        self.server.answer(self)


def _serve(host: str, answer: Any, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), _Answering)
    server.daemon_threads = True
    server.seen, server.answer = [], answer  # type: ignore[attr-defined]
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _json(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


def test_a_redirect_from_the_token_endpoint_is_not_followed_with_the_client_secret() -> None:
    """Guard: provider calls follow no redirect (oidc._exchange); urllib's default sent the code
    exchange on, as a GET over plain http to the host the Location named, Authorization header and all."""
    elsewhere = _serve("127.0.0.2", lambda h: _json(h, {"id_token": "x", "keys": []}))

    def redirect(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", f"http://127.0.0.2:{elsewhere.server_port}/stolen")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    token_endpoint = _serve("127.0.0.1", redirect)
    try:
        secret = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        for data in (b"code=x", None):  # the code exchange, and a JWKS or discovery GET
            with pytest.raises(OidcUnavailable, match="redirect"):
                fetch_json(
                    f"http://127.0.0.1:{token_endpoint.server_port}/token",
                    data,
                    {"Authorization": secret},
                    refusal=True,
                )
        assert elsewhere.seen == []  # type: ignore[attr-defined]
    finally:
        for server in (token_endpoint, elsewhere):
            server.shutdown()
            server.server_close()


def _tls_for_loopback(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A self-signed certificate for 127.0.0.1: the server's TLS context and the CA file to trust."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_file.chmod(0o600)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


@pytest.mark.parametrize("endpoint", ["authorization_endpoint", "token_endpoint", "jwks_uri"])
def test_an_https_issuers_discovery_naming_a_plain_http_endpoint_is_refused(
    endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guard: every discovered endpoint is https unless the issuer itself is loopback http
    (oidc.check_endpoint); a remote https issuer could otherwise name http://127.0.0.1/... endpoints."""
    tls, ca = _tls_for_loopback(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    plain: dict[str, bool] = {"on": True}

    def discovery(handler: BaseHTTPRequestHandler) -> None:
        issuer = f"https://127.0.0.1:{handler.server.server_port}"
        document = {name: f"{issuer}/{name}" for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")}
        if plain["on"]:
            document[endpoint] = f"http://127.0.0.1:{handler.server.server_port}/{endpoint}"
        _json(handler, {"issuer": issuer, **document})

    server = _serve("127.0.0.1", discovery, tls)
    try:
        issuer = f"https://127.0.0.1:{server.server_port}"
        settings = OidcSettings(issuer, CLIENT_ID, CLIENT_SECRET, "email", USERS)
        with pytest.raises(OidcUnavailable, match=f"{endpoint} .* is not https"):
            RelyingParty(settings).metadata()
        plain["on"] = False  # the same provider with https endpoints is believed (the TLS here is sound)
        assert RelyingParty(settings).metadata()[endpoint].startswith("https://")
    finally:
        server.shutdown()
        server.server_close()
