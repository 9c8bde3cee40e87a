"""The service's UI in a real headless Chromium, against `kcp-opa serve` as a real process.

An approver signs in with its token and answers the challenge addressed to it; the payment then
completes to one execution. The dashboard's numbers are the ledger's. /v1/openapi.json describes
every /v1 route. Screenshots go to reports/ (git-ignored). The attacks are in
tests/adversarial/test_ui_attacks.py.
"""

from __future__ import annotations

from typing import Any

import httpx2
import uikit
from browserkit import screenshot
from uikit import _action, _api, _pending_payment, _sign_in, _wait_for

from kcp_opa.audit.summary import summarize
from kcp_opa.trail.ledger import read_entries

server = uikit.server  # the module-scoped fixtures
browser = uikit.browser


def test_an_approver_answers_in_the_inbox_and_the_payment_executes(server: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    action = _action("flow")
    decision_id, ids = _pending_payment(server, action)
    approval = ids["independent_human_approval"]
    listed = _api(server, "approver", "GET", "/v1/challenges?addressed_to=me").json()["challenges"]
    assert approval in {c["challenge_id"] for c in listed}

    _sign_in(browser, server, "approver")
    browser.get(f"{server['url']}/ui/inbox")
    card = browser.find_element(By.ID, f"c-{approval}")
    assert "8000.00 USD" in card.text and "supplier_4821" in card.text and decision_id in card.text
    screenshot(browser, "ui-inbox-approver.png")
    card.find_element(By.NAME, "evidence_reference").send_keys("call:anna-2026-12-01")
    card.find_element(By.CSS_SELECTOR, "button.pass").click()
    assert _wait_for(browser, "status").text == "APPROVED"  # the answer page loads after the POST
    screenshot(browser, "ui-answered.png")

    issued = _api(server, "issuer", "POST", "/v1/receipts", {"decision_id": decision_id})
    assert issued.status_code == 200, issued.text
    run = {"action": action, "receipt": issued.json()["receipt"], "handler": "pay"}
    done = _api(server, "executor", "POST", "/v1/executions", run)
    assert done.status_code == 200, done.text
    assert done.json()["outcome"]["payment_ref"] == "PAY-idem_ui_payment_flow" and done.json()["replayed"] is False

    entries = [entry for _, entry in read_entries(server["ledger"])]
    control = [
        e for e in entries if e["type"] == "control" and e["evidence"]["control"] == "independent_human_approval"
    ]
    assert control[-1]["evidence"]["actor_id"] == "treasury_approver_anna"
    assert control[-1]["evidence"]["issuer"] == "approval-app"  # the service signed as the registered issuer
    notes = [e for e in entries if e["type"] == "note" and e["note"] == "ui.answer"]
    assert notes[-1]["principal"]["id"] == "treasury_approver_anna"
    assert notes[-1]["detail"] == {
        "challenge_id": approval, "status": "PASSED", "outcome": "recorded", "authorization_status": "APPROVED",
    }  # fmt: skip
    assert any(e["type"] == "execution" and e["receipt_id"] == issued.json()["receipt"]["receipt_id"] for e in entries)


def test_the_dashboard_numbers_are_the_ledgers(server: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _pending_payment(server, _action("dashboard"))
    _sign_in(browser, server, "auditor")
    assert browser.current_url.endswith("/ui/dashboard")
    summary = summarize(server["ledger"])

    def number(key: str) -> int:
        return int(browser.find_element(By.CSS_SELECTOR, f"#n-{key} b").text)

    assert number("decisions") == summary.decisions >= 1
    assert number("pending") == summary.by_status.get("PENDING_CONTROLS", 0) >= 1
    assert number("controls") == len(summary.approvals)
    assert number("refusals") == sum(summary.refusals.values())
    assert number("executions") == summary.executions
    assert number("open-challenges") >= 1
    rows = browser.find_elements(By.CSS_SELECTOR, "#by-state tbody tr")
    shown = {r.find_elements(By.TAG_NAME, "td")[0].text: int(r.find_elements(By.TAG_NAME, "td")[1].text) for r in rows}
    assert shown == dict(summary.by_state)
    assert "Inbox" not in browser.find_element(By.TAG_NAME, "header").text  # an auditor reads, never answers
    screenshot(browser, "ui-dashboard-auditor.png")
    browser.get(f"{server['url']}/ui/report")
    assert browser.find_elements(By.TAG_NAME, "svg")


def test_a_view_a_role_lacks_names_the_view_it_has(server: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _sign_in(browser, server, "auditor")  # reads, answers nothing
    browser.get(f"{server['url']}/ui/inbox")
    said = browser.find_element(By.ID, "no-inbox")
    assert "auditor_ada (auditor) answers no control challenges" in said.text and "agent" not in said.text
    assert {a.get_attribute("href").rsplit("/", 1)[-1] for a in said.find_elements(By.TAG_NAME, "a")} == {
        "dashboard", "report",
    }  # fmt: skip
    screenshot(browser, "ui-auditor-inbox.png")
    _sign_in(browser, server, "provider")  # answers, reads nothing
    assert browser.current_url.endswith("/ui/inbox")
    browser.get(f"{server['url']}/ui/dashboard")
    said = browser.find_element(By.ID, "no-dashboard")
    assert "kyc-provider (provider) does not read the ledger" in said.text and "agent" not in said.text
    assert not browser.find_elements(By.ID, "chain")


# --- without a browser: the HTTP-level guarantees -------------------------------------------------------------


def test_openapi_describes_every_v1_route(server: dict[str, Any]) -> None:
    from kcp_opa.service.openapi import routes
    from kcp_opa.service.tools import CATALOG

    document = httpx2.get(f"{server['url']}/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    described = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert described == set(routes(CATALOG))
    assert len(described) == 19  # nine tool routes (read_challenge, post_fact among them), seven others, three AuthZEN
    body = document["paths"]["/v1/challenges/{challenge_id}/result"]["post"]["requestBody"]
    assert "challenge_id" not in body["content"]["application/json"]["schema"]["properties"]


def test_the_app_serves_exactly_the_v1_routes_openapi_describes() -> None:
    from starlette.routing import Route

    from kcp_opa.service.http import build_app
    from kcp_opa.service.openapi import routes
    from kcp_opa.service.tools import CATALOG

    class _Nothing:
        pass

    app = build_app(_Nothing(), _Nothing())  # type: ignore[arg-type]
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route) and route.path.startswith(("/v1", "/access/", "/.well-known/authzen"))
        for method in (route.methods or set()) - {"HEAD"}
    }
    assert served == set(routes(CATALOG))


def test_the_session_cookie_is_secure_unless_plain_http_on_a_loopback_socket() -> None:
    """Fail-safe: a service bound to another address never sends the session cookie in clear."""
    from starlette.requests import Request

    from kcp_opa.service.uisession import secure_cookie

    def request(scheme: str, server: tuple[str, int]) -> Request:
        scope = {"type": "http", "scheme": scheme, "server": server, "path": "/ui/login", "headers": []}
        return Request(scope)

    assert secure_cookie(request("http", ("10.0.0.5", 8080)))
    assert secure_cookie(request("http", ("0.0.0.0", 8080)))
    assert secure_cookie(request("https", ("127.0.0.1", 8443)))
    assert not secure_cookie(request("http", ("127.0.0.1", 8080)))
    assert not secure_cookie(request("http", ("::1", 8080)))
