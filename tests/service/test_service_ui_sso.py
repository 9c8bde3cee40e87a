"""Single sign-on for the UI in a real headless Chromium: `kcp-opa serve` (a real process) with
--oidc-issuer pointing at the test OpenID provider (a real HTTP server), on a SQLite store, and
as two replicas on one PostgreSQL store and ledger.

A person clicks "Sign in with single sign-on", the provider signs them in, and they land in the
UI as the principal the users file maps them to, with its roles from the registry. On PostgreSQL
the session opened on replica A is used on replica B, and the sign-out on B ends it on A. The
bearer-token sign-in keeps working beside it. Screenshots go to reports/ui-sso/BACKEND/
(git-ignored) for review. The attacks are in tests/adversarial/test_ui_sso_attacks.py and
test_oidc_attacks.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import uikit
from browserkit import screenshot
from oidckit import Provider, oidc_args
from uikit import _sign_in, ui_servers

browser = uikit.browser  # the module-scoped Chromium


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp(f"ui-sso-{request.param}")
    provider = Provider().start()
    try:
        if request.param == "sqlite":
            opened = ui_servers(work, extra=oidc_args(work, provider))
        else:
            location = request.getfixturevalue("postgres").database("kcp_ui_sso")
            opened = ui_servers(work, ledger=location, store=location, replicas=2, extra=oidc_args(work, provider))
        with opened as servers:
            provider.redirect_uris.extend(f"{server['url']}/ui/sso/callback" for server in servers)
            yield {"backend": request.param, "servers": servers, "provider": provider}
    finally:
        provider.stop()


def _landed(driver: Any) -> str:
    """The page the browser settles on after a sign-on (the callback's page moves on to /ui)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.current_url.rstrip("/").endswith(("/ui/dashboard", "/ui/inbox")))
    return str(driver.current_url)


def test_a_person_signs_in_through_the_provider_and_every_replica_knows_them(
    deployment: dict[str, Any], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    servers, backend = deployment["servers"], deployment["backend"]
    first, other = servers[0], servers[-1]
    browser.delete_all_cookies()
    browser.get(f"{first['url']}/ui")
    assert browser.current_url.endswith("/ui/login")
    screenshot(browser, f"ui-sso/{backend}/sign-in.png")
    browser.find_element(By.ID, "sso").click()
    _landed(browser)
    header = browser.find_element(By.TAG_NAME, "header").text
    assert "treasury_approver_anna" in header and "human" in header
    screenshot(browser, f"ui-sso/{backend}/signed-in.png")

    browser.get(f"{other['url']}/ui/inbox")  # the other replica (the same one on SQLite)
    assert browser.current_url.endswith("/ui/inbox")
    assert "treasury_approver_anna" in browser.find_element(By.TAG_NAME, "header").text
    screenshot(browser, f"ui-sso/{backend}/other-replica-inbox.png")
    browser.find_element(By.CSS_SELECTOR, "header form button").click()  # sign out there
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/ui/login"))
    browser.get(f"{first['url']}/ui/inbox")
    assert browser.current_url.endswith("/ui/login")  # signed out everywhere

    _sign_in(browser, first, "auditor")  # the token sign-in beside single sign-on, shared alike
    assert browser.current_url.endswith("/ui/dashboard")
    assert "auditor_ada" in browser.find_element(By.TAG_NAME, "header").text
    browser.get(f"{other['url']}/ui/dashboard")
    assert browser.current_url.endswith("/ui/dashboard")
    assert "auditor_ada" in browser.find_element(By.TAG_NAME, "header").text
