"""The dashboard's and report's filters and pages in a real headless Chromium, on a file ledger and on
PostgreSQL: an auditor narrows to an outcome and to one decision, walks the pages, and sees the same
counts `audit report` gives for that selection. Screenshots go to reports/ui-filters/BACKEND/
(git-ignored) for review. The attacks are in tests/adversarial/test_report_pages.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import uikit
from browserkit import screenshot
from uikit import HOSTILE, _action, _api, _pending_payment, _sign_in, _wait_for, ui_servers

from kcp_opa.audit.selection import parse_selection
from kcp_opa.audit.summary import LedgerSummary, summarize
from kcp_opa.trail.locations import readable

browser = uikit.browser  # the module-scoped Chromium


@pytest.fixture(scope="module", params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One payment approved and executed, two left pending, on the backend's ledger."""
    work = tmp_path_factory.mktemp(f"ui-filters-{request.param}")
    location = request.getfixturevalue("postgres").database("kcp_ui_filters") if request.param == "postgres" else None
    with ui_servers(work, ledger=location, store=location) as (server,):
        executed, ids = _pending_payment(server, _action(f"filters_{request.param}_paid"))
        approval = {"status": "PASSED", "evidence_reference": "call:anna"}
        answered = _api(
            server, "approver", "POST", f"/v1/challenges/{ids['independent_human_approval']}/result", approval
        )
        assert answered.status_code == 200, answered.text
        issued = _api(server, "issuer", "POST", "/v1/receipts", {"decision_id": executed})
        run = {
            "action": _action(f"filters_{request.param}_paid"),
            "receipt": issued.json()["receipt"],
            "handler": "pay",
        }
        assert _api(server, "executor", "POST", "/v1/executions", run).status_code == 200
        pending = [_pending_payment(server, _action(f"filters_{request.param}_{n}"))[0] for n in range(2)]
        yield {"backend": request.param, "server": server, "executed": executed, "pending": pending}


def _held(server: dict[str, Any], **params: str) -> LedgerSummary:
    """The ledger's count for ``params`` as `audit report` reads it."""
    selection, _ = parse_selection(params.items())
    with readable(server["ledger"]) as path:
        return summarize(path, selection=selection)


def _navigated(driver: Any, part: str) -> None:
    """Wait for the form's GET to load (the old page holds the same ids until it does)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: part in d.current_url)
    _wait_for(driver, "pager")


def _number(driver: Any, key: str) -> int:
    from selenium.webdriver.common.by import By

    return int(driver.find_element(By.CSS_SELECTOR, f"#n-{key} b").text)


def _listed(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [
        row.find_element(By.TAG_NAME, "td").text for row in driver.find_elements(By.CSS_SELECTOR, "#decisions tbody tr")
    ]


def test_an_auditor_filters_and_pages_the_dashboard(deployment: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server, backend = deployment["server"], deployment["backend"]
    _sign_in(browser, server, "auditor")
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("APPROVED")
    browser.find_element(By.ID, "apply").click()
    _navigated(browser, "outcome=APPROVED")
    approved = _held(server, outcome="APPROVED")
    assert _number(browser, "decisions") == approved.decisions == 1
    assert _number(browser, "executions") == approved.executions == 1
    assert _listed(browser) == [deployment["executed"]]
    assert "outcome=APPROVED" in browser.find_element(By.ID, "report-link").get_attribute("href")
    screenshot(browser, f"ui-filters/{backend}/dashboard-approved.png")

    browser.get(f"{server['url']}/ui/dashboard?per_page=1")
    assert _number(browser, "decisions") == _held(server).decisions == 3
    first = _listed(browser)
    browser.find_element(By.ID, "next").click()
    _wait_for(browser, "previous")
    assert "page=2" in browser.current_url and "per_page=1" in browser.current_url
    second = _listed(browser)
    assert len(first) == len(second) == 1 and first != second
    assert first == [deployment["pending"][-1]]  # newest first
    screenshot(browser, f"ui-filters/{backend}/dashboard-page-2.png")


def test_an_auditor_narrows_the_report_to_one_decision(deployment: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    server, backend, executed = deployment["server"], deployment["backend"], deployment["executed"]
    _sign_in(browser, server, "auditor")
    browser.get(f"{server['url']}/ui/report?decision={executed}")
    pager = _wait_for(browser, "pager").text
    held = _held(server, decision=executed)
    assert f"{held.entries} entries (filtered: decision {executed})" in pager
    sections = [s.get_attribute("id") for s in browser.find_elements(By.CSS_SELECTOR, "section[id^=d-]")]
    assert sections == [f"d-{executed}"]
    assert browser.find_elements(By.TAG_NAME, "svg")  # the charts, of the selection
    screenshot(browser, f"ui-filters/{backend}/report-one-decision.png")
    browser.get(f"{server['url']}/ui/report?page=99")
    assert _wait_for(browser, "query-error").text == "page=99 is past the last page (1): give page=1 to 1"
    screenshot(browser, f"ui-filters/{backend}/report-bad-page.png")


def test_a_hostile_filter_typed_into_the_form_is_shown_as_text(deployment: dict[str, Any], browser: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    server, backend = deployment["server"], deployment["backend"]
    _sign_in(browser, server, "auditor")
    browser.get(f"{server['url']}/ui/report")
    browser.find_element(By.ID, "f-agent").send_keys(HOSTILE)
    browser.find_element(By.ID, "apply").click()
    _navigated(browser, "agent=")
    assert browser.find_element(By.ID, "f-agent").get_attribute("value") == HOSTILE
    assert not browser.find_elements(By.TAG_NAME, "script") and not browser.find_elements(By.TAG_NAME, "img")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018
    assert "0 entries" in browser.find_element(By.ID, "pager").text
    screenshot(browser, f"ui-filters/{backend}/report-hostile-filter.png")
