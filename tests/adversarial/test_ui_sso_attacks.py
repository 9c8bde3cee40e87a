"""Attacks on the UI's single sign-on at the service (`kcp-opa serve` as a real process, the test
OpenID provider as a real server): no forged, replayed, foreign or failed sign-on opens a session.

Each names its guard (kcp_opa/service/uisso.py); the ID token's own attacks are in
test_oidc_attacks.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from netkit import free_port
from oidckit import ANNA, Provider, follow_to_callback, oidc_args, sign_on_over_http, users_file
from uikit import ui_servers

from kcp_opa.service.oidc import QUICK_FAILURE_SECONDS
from kcp_opa.trail.ledger import read_entries


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One server whose provider is not started yet (its port reserved): the first test finds it down."""
    work = tmp_path_factory.mktemp("sso")
    provider = Provider(port=free_port())
    with ui_servers(work, extra=oidc_args(work, provider)) as (server,):
        provider.redirect_uris.append(f"{server['url']}/ui/sso/callback")
        try:
            yield {"server": server, "provider": provider, "ledger": Path(server["ledger"])}
        finally:
            provider.stop()


def _client() -> httpx2.Client:
    return httpx2.Client(timeout=60, follow_redirects=False)


def _refusals(setting: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for _, e in read_entries(setting["ledger"]) if e["type"] == "failure" and e.get("tool") == "/ui/sso"]


def test_1_an_unreachable_provider_is_an_error_page_and_no_session(setting: dict[str, Any]) -> None:
    """Guard: OidcUnavailable at discovery is a 503 page (fail closed), never a session or a 500."""
    with _client() as client:
        page = client.get(f"{setting['server']['url']}/ui/sso/start")
        assert page.status_code == 503 and "identity provider cannot be reached" in page.text
        assert "kcp_ui" not in client.cookies
    setting["provider"].start()  # the other tests have a provider
    time.sleep(QUICK_FAILURE_SECONDS)  # a discovery refused at once is remembered this long


def test_a_callback_whose_state_is_not_this_browsers_opens_no_session(setting: dict[str, Any]) -> None:
    """Guard: the callback's state equals the browser's state cookie (login CSRF: the attacker's own
    code and state, sent to the victim's browser, would sign the victim in as the attacker)."""
    url = setting["server"]["url"]
    with _client() as attacker, _client() as victim:
        started = attacker.get(f"{url}/ui/sso/start")
        callback = follow_to_callback(started.headers["location"])  # the attacker's code and state
        victim.get(f"{url}/ui/sso/start")  # the victim has a sign-on of its own under way
        page = victim.get(callback)
        assert page.status_code == 403 and "not started here" in page.text
        assert "kcp_ui" not in victim.cookies
        bare = _client().get(callback)  # no state cookie at all
        assert bare.status_code == 403 and "kcp_ui" not in bare.cookies


def test_a_callback_is_used_once(setting: dict[str, Any]) -> None:
    """Guard: the sign-on under way is taken from the store once (the code and state cannot be replayed)."""
    url = setting["server"]["url"]
    with _client() as client:
        started = client.get(f"{url}/ui/sso/start")
        callback = follow_to_callback(started.headers["location"])
        state_cookie = client.cookies["kcp_ui_sso"]
        assert client.get(callback).status_code == 200
        replay = httpx2.get(callback, cookies={"kcp_ui_sso": state_cookie}, timeout=60)
        assert replay.status_code == 403 and "expired or was used" in replay.text
        assert "kcp_ui" not in replay.cookies


def test_an_unlisted_person_is_refused_with_a_page_and_audited(setting: dict[str, Any]) -> None:
    """Guard: the users file, never a default role."""
    provider = setting["provider"]
    provider.user = {"sub": "u-eve", "email": "eve@bank.example", "email_verified": True}
    try:
        with _client() as client:
            page = sign_on_over_http(client, setting["server"]["url"])
            assert page.status_code == 403 and "not a user of this service" in page.text
            assert "kcp_ui" not in client.cookies
            assert client.get(f"{setting['server']['url']}/ui/dashboard").headers["location"] == "/ui/login"
    finally:
        provider.user = dict(ANNA)
    assert any("eve@bank.example" in e["message"] and e["code"] == "sso_unknown_user" for e in _refusals(setting))


def test_a_token_for_another_sign_on_is_refused_at_the_service(setting: dict[str, Any]) -> None:
    """Guard: the nonce the service kept with this sign-on (a token minted for another is refused)."""
    provider = setting["provider"]
    provider.tamper = lambda p, claims, header: p.sign({**claims, "nonce": "another"}, header)
    try:
        with _client() as client:
            page = sign_on_over_http(client, setting["server"]["url"])
            assert page.status_code == 401 and "nonce" in page.text and "kcp_ui" not in client.cookies
    finally:
        provider.tamper = None


def test_a_provider_gone_before_the_code_exchange_is_an_error_page(setting: dict[str, Any]) -> None:
    provider = setting["provider"]
    url = setting["server"]["url"]
    with _client() as client:
        started = client.get(f"{url}/ui/sso/start")
        callback = follow_to_callback(started.headers["location"])
        provider.stop()
        try:
            page = client.get(callback)
        finally:
            provider.start()
        assert page.status_code == 503 and "cannot be reached" in page.text and "kcp_ui" not in client.cookies


def test_a_signed_in_session_is_the_mapped_principal_and_ends_at_sign_out(setting: dict[str, Any]) -> None:
    url = setting["server"]["url"]
    with _client() as client:
        page = sign_on_over_http(client, url)
        assert page.status_code == 200 and 'content="0;url=/ui"' in page.text
        inbox = client.get(f"{url}/ui/inbox")
        assert inbox.status_code == 200 and "treasury_approver_anna" in inbox.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', inbox.text)
        assert csrf is not None
        cookie = client.cookies["kcp_ui"]
        client.post(f"{url}/ui/logout", data={"csrf": csrf.group(1)})
    again = httpx2.get(f"{url}/ui/inbox", cookies={"kcp_ui": cookie}, timeout=60)
    assert again.status_code == 303 and again.headers["location"] == "/ui/login"  # the old cookie is dead
    notes = [e for _, e in read_entries(setting["ledger"]) if e["type"] == "note" and e["note"] == "ui.sign_in"]
    assert notes[-1]["principal"]["id"] == "treasury_approver_anna" and notes[-1]["detail"]["via"] == "oidc"


def test_a_replica_whose_users_file_no_longer_lists_the_person_refuses_their_session(
    setting: dict[str, Any], tmp_path: Path
) -> None:
    """Guard: a sign-on session counts only while this service's users file maps the person to its
    principal (a replica rolled out with the person removed, or a restart with a changed file, ends
    the session at once rather than at its lifetime)."""
    work = setting["ledger"].parent
    url = setting["server"]["url"]
    with _client() as client:
        assert sign_on_over_http(client, url).status_code == 200
        cookie = client.cookies["kcp_ui"]
    assert httpx2.get(f"{url}/ui/inbox", cookies={"kcp_ui": cookie}, timeout=60).status_code == 200
    users = users_file(tmp_path / "users.json", users={"ada@bank.example": "auditor_ada"})  # anna removed
    args = oidc_args(tmp_path, setting["provider"])
    args[args.index("--oidc-users") + 1] = str(users)
    shared = {"store": str(work / "service.db"), "ledger": str(work / "ledger.jsonl")}
    with ui_servers(tmp_path, **shared, extra=args) as (rolled_out,):
        page = httpx2.get(f"{rolled_out['url']}/ui/inbox", cookies={"kcp_ui": cookie}, timeout=60)
        assert page.status_code == 303 and page.headers["location"] == "/ui/login"


def test_a_folded_email_is_refused_and_the_ledger_keeps_the_raw_claim(setting: dict[str, Any]) -> None:
    """Guard: the email is compared with ASCII case only (a fullwidth look-alike is another person), and
    the sign-in note records the claim as the provider said it, not a folded form."""
    provider, url = setting["provider"], setting["server"]["url"]
    provider.user = {"sub": "u-anna2", "email": "\uff41nna@bank.example", "email_verified": True}
    try:
        with _client() as client:
            page = sign_on_over_http(client, url)
            assert page.status_code == 403 and "kcp_ui" not in client.cookies
        provider.user = {"sub": "u-anna", "email": "ANNA@bank.example", "email_verified": True}
        with _client() as client:
            assert sign_on_over_http(client, url).status_code == 200
    finally:
        provider.user = dict(ANNA)
    notes = [e for _, e in read_entries(setting["ledger"]) if e["type"] == "note" and e["note"] == "ui.sign_in"]
    assert notes[-1]["detail"]["identity"] == "ANNA@bank.example"


def test_over_https_the_ui_cookies_are_host_prefixed_and_a_plain_named_one_does_not_count(
    setting: dict[str, Any],
) -> None:
    """Guard: Secure UI cookies are ``__Host-`` named on Path=/ (uisession.set_ui_cookie), so a sibling
    subdomain or a plain-http page cannot plant or shadow them; where they are Secure, a cookie under
    the plain name (as such a page could set) is not read (uisession.read_ui_cookie)."""
    url = setting["server"]["url"]
    https = {"X-Forwarded-Proto": "https"}  # from loopback: the proxy uvicorn trusts says https
    with _client() as client:
        started = client.get(f"{url}/ui/sso/start", headers=https)
        assert started.status_code == 303
        state = started.headers["set-cookie"]
        assert state.startswith("__Host-kcp_ui_sso=") and "Path=/;" in state and "Secure" in state
        login = client.get(f"{url}/ui/login", headers=https).headers["set-cookie"]
        assert login.startswith("__Host-kcp_ui_login=") and "Path=/;" in login and "Secure" in login
    with _client() as client:  # a session opened over loopback http, its cookie replayed under the plain name
        assert sign_on_over_http(client, url).status_code == 200
        cookie = client.cookies["kcp_ui"]
    planted = httpx2.get(f"{url}/ui/inbox", cookies={"kcp_ui": cookie}, headers=https, timeout=60)
    assert planted.status_code == 303 and planted.headers["location"] == "/ui/login"
    hosted = httpx2.get(f"{url}/ui/inbox", cookies={"__Host-kcp_ui": cookie}, headers=https, timeout=60)
    assert hosted.status_code == 200  # the same session under its Secure name is this browser's
