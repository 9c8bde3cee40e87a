"""Attacks on the service's UI: an agent's token, a hostile action string, forged answers, framing.

In a real headless Chromium against `kcp-opa serve` as a real process (tests/uikit.py).
"""

from __future__ import annotations

import re
from typing import Any

import httpx2
import pytest
import uikit
from browserkit import screenshot
from uikit import HOSTILE, _action, _api, _http_session, _pending_payment, _sign_in

from kcp_opa.trail.ledger import read_entries

server = uikit.server  # the module-scoped fixtures
browser = uikit.browser


def test_an_agents_token_sees_no_inbox(server: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _pending_payment(server, _action("agent"))
    _sign_in(browser, server, "agent")
    assert browser.find_element(By.ID, "no-views")
    for path in ("/ui/inbox", "/ui/dashboard"):
        browser.get(f"{server['url']}{path}")
        assert browser.find_elements(By.ID, "no-views") and not browser.find_elements(By.TAG_NAME, "form")[1:]
        assert not browser.find_elements(By.CSS_SELECTOR, "section.challenge")
    screenshot(browser, "ui-agent-no-inbox.png")
    refused = _api(server, "agent", "GET", "/v1/challenges?addressed_to=me")
    assert refused.status_code == 403 and refused.json()["code"] == "not_authorized"


def test_a_hostile_action_string_renders_inert(server: dict[str, Any], browser: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    action = _action("hostile")
    action["target"] = {**action["target"], "reference": HOSTILE}
    _, ids = _pending_payment(server, action)
    _sign_in(browser, server, "approver")
    browser.get(f"{server['url']}/ui/inbox")
    card = browser.find_element(By.ID, f"c-{ids['independent_human_approval']}")
    assert HOSTILE in card.text  # shown as the text it is
    assert not browser.find_elements(By.TAG_NAME, "script") and not browser.find_elements(By.TAG_NAME, "img")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018
    screenshot(browser, "ui-hostile-inert.png")
    browser.get(f"{server['url']}/ui/dashboard")
    assert not browser.find_elements(By.TAG_NAME, "script") and not browser.find_elements(By.TAG_NAME, "img")


def test_ui_answers_need_the_csrf_token_and_the_same_origin(server: dict[str, Any]) -> None:
    _, ids = _pending_payment(server, _action("csrf"))
    challenge = ids["independent_human_approval"]
    client, csrf = _http_session(server, "approver")
    path = f"/ui/challenges/{challenge}/answer"
    answer = {"status": "PASSED", "evidence_reference": "forged"}
    assert client.post(path, data=answer).status_code == 403
    assert client.post(path, data={**answer, "csrf": "x" * len(csrf)}).status_code == 403
    cross = client.post(path, data={**answer, "csrf": csrf}, headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    still = _api(server, "approver", "GET", "/v1/challenges?addressed_to=me").json()["challenges"]
    assert challenge in {c["challenge_id"] for c in still}  # none of them spent it
    codes = [e.get("code") for _, e in read_entries(server["ledger"]) if e["type"] == "failure"]
    assert codes.count("csrf") >= 3


def test_ui_pages_carry_a_strict_csp_and_no_session_without_sign_in(server: dict[str, Any]) -> None:
    client, _ = _http_session(server, "auditor")
    page = client.get("/ui/dashboard")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["cache-control"] == "no-store"
    cookie = next(h for h in page.headers.get_list("set-cookie")) if page.headers.get_list("set-cookie") else None
    assert cookie is None  # the session cookie is set once, at sign-in
    anonymous = httpx2.get(f"{server['url']}/ui/dashboard", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/ui/login"
    unknown = httpx2.Client(base_url=server["url"])
    nonce = re.search(r'name="csrf" value="([^"]+)"', unknown.get("/ui/login").text)
    assert nonce is not None
    refused = unknown.post("/ui/login", data={"csrf": nonce.group(1), "token": "not-a-token"})
    assert refused.status_code == 401 and "kcp_ui=" not in refused.headers.get("set-cookie", "")


def _failures(server: dict[str, Any], path: str) -> list[str]:
    return [
        str(e.get("code"))
        for _, e in read_entries(server["ledger"])
        if e["type"] == "failure" and e.get("tool") == path
    ]


def test_ui_forms_past_their_limits_are_audited_refusals_not_500s(server: dict[str, Any]) -> None:
    """25 fields, a 20 MiB body (declared, and streamed without a length): a 400/413 page with
    the security headers and an audited refusal, never a traceback; the service stays up."""
    form = {"content-type": "application/x-www-form-urlencoded"}
    anonymous = httpx2.Client(base_url=server["url"], timeout=60)
    many = anonymous.post("/ui/login", content="&".join(f"f{i}=x" for i in range(25)), headers=form)
    assert many.status_code == 400 and "Traceback" not in many.text and "<form" in many.text
    assert "default-src 'none'" in many.headers["content-security-policy"]
    huge = anonymous.post("/ui/login", content=b"a=" + b"x" * (20 << 20), headers=form)
    assert huge.status_code == 413 and huge.headers["x-frame-options"] == "DENY"

    def streamed() -> Any:
        for _ in range(64):
            yield b"x" * 4096  # 256 KiB, no Content-Length: the cap holds while reading

    assert anonymous.post("/ui/login", content=streamed(), headers=form).status_code == 413
    _, ids = _pending_payment(server, _action("limits"))
    client, csrf = _http_session(server, "approver")
    path = f"/ui/challenges/{ids['independent_human_approval']}/answer"
    fields = "&".join([f"csrf={csrf}", "status=PASSED", *(f"f{i}=x" for i in range(25))])
    answer = client.post(path, content=fields, headers=form)
    assert answer.status_code == 400 and "content-security-policy" in answer.headers
    assert _failures(server, "/ui/login").count("bad_request") >= 1
    assert _failures(server, "/ui/login").count("body_too_large") >= 2
    assert "bad_request" in _failures(server, "/ui/answer")
    still = _api(server, "approver", "GET", "/v1/challenges?addressed_to=me").json()["challenges"]
    assert ids["independent_human_approval"] in {c["challenge_id"] for c in still}  # nothing recorded
    assert httpx2.get(f"{server['url']}/health").status_code == 200


def test_ui_report_hides_the_servers_ledger_path_from_a_reader(server: dict[str, Any]) -> None:
    _pending_payment(server, _action("report"))
    client, _ = _http_session(server, "auditor")
    page = client.get("/ui/report")
    assert page.status_code == 200 and server["ledger"].name in page.text
    assert str(server["ledger"].parent) not in page.text  # as /v1/status: paths for a service_admin only
