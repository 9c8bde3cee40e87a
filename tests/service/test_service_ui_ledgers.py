"""The UI in a real headless Chromium on both ledger backends: a file ledger with a SQLite store, and
two replicas on one PostgreSQL ledger and store.

A payment goes through the trust sequence, the approver answers in the inbox (on the second
replica when there are two), the payment executes; then an auditor reads the dashboard and the
report on every replica. Each shows the chain `audit verify` sees, with its entry count, and the
counts of the ledger as `audit report` reads it. Screenshots go to reports/ui-ledgers/BACKEND/
(git-ignored) for review. The attacks are in tests/adversarial/test_ui_ledger_reads.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uikit
from browserkit import screenshot
from uikit import _action, _api, _http_session, _pending_payment, _sign_in, _wait_for, ui_servers

from kcp_opa.audit.summary import summarize
from kcp_opa.trail.ledger import verify_ledger
from kcp_opa.trail.locations import readable

browser = uikit.browser  # the module-scoped Chromium


@pytest.fixture(scope="module", params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp(f"ui-{request.param}")
    if request.param == "file":
        with ui_servers(work) as servers:
            yield {"backend": "file", "servers": servers}
        return
    location = request.getfixturevalue("postgres").database("kcp_ui_ledgers")
    with ui_servers(work, ledger=location, store=location, replicas=2) as servers:
        yield {"backend": "postgres", "servers": servers}


def _number(driver: Any, key: str) -> int:
    from selenium.webdriver.common.by import By

    return int(driver.find_element(By.CSS_SELECTOR, f"#n-{key} b").text)


def test_a_payment_through_the_ui_then_every_replica_shows_the_ledger(deployment: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    servers, backend = deployment["servers"], deployment["backend"]
    first, answering = servers[0], servers[-1]
    action = _action(f"ledgers_{backend}")
    decision_id, ids = _pending_payment(first, action)
    approval = ids["independent_human_approval"]

    _sign_in(browser, answering, "approver")
    browser.get(f"{answering['url']}/ui/inbox")
    card = browser.find_element(By.ID, f"c-{approval}")
    assert decision_id in card.text and "8000.00 USD" in card.text
    screenshot(browser, f"ui-ledgers/{backend}/inbox-approver.png")
    card.find_element(By.NAME, "evidence_reference").send_keys(f"call:anna-{backend}")
    card.find_element(By.CSS_SELECTOR, "button.pass").click()
    assert _wait_for(browser, "status").text == "APPROVED"
    screenshot(browser, f"ui-ledgers/{backend}/answered.png")

    issued = _api(first, "issuer", "POST", "/v1/receipts", {"decision_id": decision_id})
    assert issued.status_code == 200, issued.text
    run = {"action": action, "receipt": issued.json()["receipt"], "handler": "pay"}
    done = _api(first, "executor", "POST", "/v1/executions", run)
    assert done.status_code == 200, done.text

    with readable(first["ledger"]) as path:  # the ledger as `audit verify` and `audit report` read it
        verified, held = verify_ledger(path), summarize(path)
    assert verified.ok and held.executions >= 1 and held.by_status["APPROVED"] >= 1
    for n, server in enumerate(servers):
        _sign_in(browser, server, "auditor")
        assert browser.current_url.endswith("/ui/dashboard")
        chain = browser.find_element(By.ID, "chain").text
        assert chain == f"Ledger chain intact: {verified.entries} entries, chain intact, head {verified.head}"
        assert _number(browser, "decisions") == held.decisions
        assert _number(browser, "approved") == held.by_status["APPROVED"]
        assert _number(browser, "pending") == held.by_status.get("PENDING_CONTROLS", 0)
        assert _number(browser, "controls") == len(held.approvals)
        assert _number(browser, "refusals") == sum(held.refusals.values())
        assert _number(browser, "receipts") == held.receipts
        assert _number(browser, "executions") == held.executions
        assert _number(browser, "redecisions") == len(held.redecisions) > 0  # listed as such, not as decisions
        rows = browser.find_elements(By.CSS_SELECTOR, "#by-state tbody tr")
        cells = [row.find_elements(By.TAG_NAME, "td") for row in rows]
        assert {c[0].text: int(c[1].text) for c in cells} == dict(held.by_state)
        assert decision_id in browser.find_element(By.ID, "decisions").text
        screenshot(browser, f"ui-ledgers/{backend}/dashboard-replica-{n}.png")
        browser.get(f"{server['url']}/ui/report")
        text = browser.find_element(By.TAG_NAME, "body").text
        assert f"Chain intact: {verified.entries} entries" in text and "No ledger yet" not in text
        assert browser.find_elements(By.TAG_NAME, "svg")  # the charts
        screenshot(browser, f"ui-ledgers/{backend}/report-replica-{n}.png")


def test_the_report_without_matplotlib_is_served_with_its_charts_as_tables(tmp_path: Path) -> None:
    """A server without the `report` extra: /ui/report is the report, its charts as tables, never a 500."""
    absent = tmp_path / "without-matplotlib"
    (absent / "matplotlib").mkdir(parents=True)
    (absent / "matplotlib" / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    with ui_servers(tmp_path, path=str(absent)) as (server,):
        _pending_payment(server, _action("no_charts"))
        client, _ = _http_session(server, "auditor")
        page = client.get("/ui/report")
    assert page.status_code == 200, page.text
    assert "pip install &#x27;kcp-opa[report]&#x27;" in page.text and "<svg" not in page.text
    with readable(server["ledger"]) as path:
        held = summarize(path)
    for code, count in held.by_reason.items():  # the reasons chart's counts, as a table
        assert f'<tr><td>{code}</td><td class="num">{count}</td></tr>' in page.text
