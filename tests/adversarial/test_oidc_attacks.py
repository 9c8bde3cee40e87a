"""Attacks on the UI's single sign-on at the ID token: a hostile or broken provider (the test
provider, a real HTTP server, answering a token it was made to tamper with) never signs anyone in.

Each test names the guard it proves (kcp_opa/service/oidctoken.py, oidc.py); without that guard
the forged token would be believed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from oidckit import CLIENT_ID, CLIENT_SECRET, Provider, follow_to_callback, users_file

from kcp_opa.service.oidc import OidcConfigError, OidcSettings, RelyingParty, read_users
from kcp_opa.service.oidctoken import OidcRefused

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
