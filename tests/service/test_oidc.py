"""The UI's OpenID Connect relying party against the test provider (a real HTTP server): discovery,
the authorization request (state, nonce, PKCE S256), the code exchange with the client secret,
the ID token check (RS256 and ES256), the JWKS cache and the users file. The attacks are in
tests/adversarial/test_oidc_attacks.py."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oidckit import CLIENT_ID, CLIENT_SECRET, Provider, follow_to_callback, secret_file, users_file

from kcp_opa.service.oidc import OidcConfigError, OidcSettings, RelyingParty, read_client_secret, settings_from
from kcp_opa.service.oidctoken import OidcRefused, OidcUnavailable

REDIRECT = "http://127.0.0.1:1/ui/sso/callback"


@pytest.fixture
def provider() -> Iterator[Provider]:
    started = Provider(redirect_uris=[REDIRECT]).start()
    try:
        yield started
    finally:
        started.stop()


def party(provider: Provider, claim: str = "email", users: dict[str, str] | None = None) -> RelyingParty:
    users = users or {"anna@bank.example": "treasury_approver_anna"}
    return RelyingParty(OidcSettings(provider.issuer, CLIENT_ID, CLIENT_SECRET, claim, users))


def sign_on(rp: RelyingParty) -> tuple[str, str]:
    """begin, the browser at the provider, finish: (identity, principal id)."""
    started = rp.begin(REDIRECT)
    back = urllib.parse.parse_qs(urllib.parse.urlsplit(follow_to_callback(started.url)).query)
    assert back["state"] == [started.state]
    return rp.finish(back["code"][0], nonce=started.nonce, verifier=started.verifier, redirect_uri=REDIRECT)


def test_a_configured_user_signs_in_as_their_principal(provider: Provider) -> None:
    assert sign_on(party(provider)) == ("anna@bank.example", "treasury_approver_anna")


def test_an_es256_provider_is_believed_too(provider: Provider) -> None:
    provider.algorithm = "ES256"
    assert sign_on(party(provider))[1] == "treasury_approver_anna"


def test_the_subject_claim_maps_when_the_users_file_says_sub(provider: Provider) -> None:
    assert sign_on(party(provider, "sub", {"u-anna": "treasury_approver_anna"})) == ("u-anna", "treasury_approver_anna")


def test_the_authorization_request_carries_state_nonce_and_an_s256_challenge(provider: Provider) -> None:
    started = party(provider).begin(REDIRECT)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(started.url).query))
    assert query["code_challenge_method"] == "S256" and query["state"] == started.state
    assert query["nonce"] == started.nonce and query["redirect_uri"] == REDIRECT and query["client_id"] == CLIENT_ID
    assert len(started.state) >= 43 and len(started.verifier) >= 43 and started.verifier not in started.url


def test_discovery_and_keys_are_cached(provider: Provider) -> None:
    rp = party(provider)
    for _ in range(3):
        sign_on(rp)
    discovered = [path for path, _ in provider.seen if path == "/.well-known/openid-configuration"]
    assert len(discovered) == 1 and provider.jwks_fetches == 1


def test_a_provider_that_cannot_be_reached_is_unavailable_not_a_refusal(provider: Provider) -> None:
    rp = party(provider)
    provider.stop()
    with pytest.raises(OidcUnavailable, match="cannot be reached"):
        rp.begin(REDIRECT)


def test_a_discovery_document_naming_another_issuer_is_unavailable(provider: Provider) -> None:
    rp = RelyingParty(OidcSettings(provider.issuer + "/other", CLIENT_ID, CLIENT_SECRET, "email", {"a": "b"}))
    with pytest.raises(OidcUnavailable):
        rp.begin(REDIRECT)


def test_a_wrong_client_secret_is_refused_by_the_provider(provider: Provider) -> None:
    rp = RelyingParty(OidcSettings(provider.issuer, CLIENT_ID, "wrong", "email", {"anna@bank.example": "x"}))
    with pytest.raises(OidcRefused, match="refused the code \\(401\\)"):
        sign_on(rp)


def test_settings_need_an_https_issuer_and_a_users_file(tmp_path: Path) -> None:
    with pytest.raises(OidcConfigError, match="https"):
        OidcSettings("http://idp.example.com", CLIENT_ID)
    with pytest.raises(OidcConfigError, match="--oidc-users"):
        settings_from("https://idp.example.com", CLIENT_ID, None, None)
    with pytest.raises(OidcConfigError, match="need --oidc-issuer"):
        settings_from(None, CLIENT_ID, None, None)
    bad = tmp_path / "users.json"
    bad.write_text('{"claim": "preferred_username", "users": {"a": "b"}}')
    with pytest.raises(OidcConfigError, match='"email" or "sub"'):
        settings_from("https://idp.example.com", CLIENT_ID, None, bad)
    made = settings_from("https://idp.example.com", CLIENT_ID, None, users_file(tmp_path / "u.json"))
    assert made is not None and made.users["ada@bank.example"] == "auditor_ada" and made.client_secret is None


def test_the_client_secret_file_must_be_owner_only(tmp_path: Path, monkeypatch: Any) -> None:
    secret = secret_file(tmp_path / "secret")
    assert read_client_secret(secret) == CLIENT_SECRET
    secret.chmod(0o644)
    with pytest.raises(OidcConfigError, match="chmod 600"):
        read_client_secret(secret)
    monkeypatch.setenv("KCP_OPA_OIDC_CLIENT_SECRET", "from-env")
    assert read_client_secret(None) == "from-env"
    assert "from-env" not in repr(OidcSettings("https://idp.example.com", CLIENT_ID, "from-env"))


def test_an_unlisted_person_is_refused(provider: Provider) -> None:
    provider.user = {"sub": "u-mallory", "email": "mallory@bank.example", "email_verified": True}
    with pytest.raises(OidcRefused, match="not listed") as refused:
        sign_on(party(provider))
    assert refused.value.code == "sso_unknown_user"


def test_the_keys_are_fetched_again_after_an_hour(provider: Provider, monkeypatch: Any) -> None:
    """A key the provider withdrew stops counting within an hour, without any unknown kid."""
    import kcp_opa.service.oidctoken as oidctoken

    rp = party(provider)
    sign_on(rp)
    assert provider.jwks_fetches == 1
    monkeypatch.setattr(oidctoken, "KEYS_SECONDS", 0.0)
    sign_on(rp)
    assert provider.jwks_fetches == 2
