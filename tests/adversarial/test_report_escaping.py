"""The HTML report renders a hostile ledger inert: every attacker-controlled string is text.

Agent ids, decision ids, reason codes, units and refusal messages come from actions and
evidence an adversarial agent writes. The page must carry no script, no event handler, no
element the ledger named, in the markup and in a real Chromium.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from browserkit import chromium, screenshot
from conftest import run_cli

from kcp_opa.trail.ledger import AuditLedger

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "</code></td><svg onload=alert(3)>",
    "$\\alpha$ <iframe src=javascript:alert(4)>",
]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.handlers: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append(f"{tag} {name}")
            if name in {"src", "href"} and value is not None and not value.startswith("#"):
                self.urls.append(value)


def _hostile_ledger(path: Path) -> Path:
    ledger = AuditLedger(path)
    for index, text in enumerate(HOSTILE):
        ledger.append(
            {
                "type": "decision",
                "decision_id": f"dec_{index}{text}",
                "agent_id": text,
                "model": text,
                "kcp_unit_applied": text,
                "decision": "DENY",
                "authorization_status": "DENIED",
                "reason_codes": [text],
                "input": {
                    "action": {"tenant_id": text},
                    "context": {  # an exception applied, every field of it hostile: shown as an override
                        "exceptions": [
                            {"id": text, "scope": {"unit": text}, "grantor": text, "ticket": text, "expires_at": text}
                        ]
                    },
                },
                "result": {
                    "reasons": [
                        {"code": "exception_applied", "rule": f"kcp.exceptions.{text}"},
                        {"code": f"waived{text}", "waived_by": text},
                    ]
                },
                "timestamp": f"2026-11-29T10:0{index}:00.000000Z",
            }
        )
        ledger.append({"type": "failure", "code": text, "message": text, "principal": {"id": text}})
        ledger.append(
            {
                "type": "control",
                "decision_id": f"dec_{index}{text}",
                "evidence": {"control": f"sanctions_override{text}", "actor_id": text, "issuer": text, "status": text},
            }
        )
    ledger.close()
    return path


def test_report_of_a_hostile_ledger_renders_inert(tmp_path: Path) -> None:
    ledger = _hostile_ledger(tmp_path / "hostile.jsonl")
    page = tmp_path / "report.html"
    proc = run_cli("audit", "report", str(ledger), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    markup = page.read_text(encoding="utf-8")
    parsed = _Tags()
    parsed.feed(markup)
    assert not parsed.tags & {"script", "img", "iframe", "object", "embed", "link"}
    assert parsed.handlers == [] and parsed.urls == []
    for text in HOSTILE:
        assert text not in markup  # only ever escaped

    driver = chromium()
    try:
        driver.get(page.as_uri())  # type: ignore[attr-defined]
        from selenium.common.exceptions import NoAlertPresentException
        from selenium.webdriver.common.by import By

        for tag in ("script", "img", "iframe"):
            assert driver.find_elements(By.TAG_NAME, tag) == []  # type: ignore[attr-defined]
        body = driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
        assert HOSTILE[0] in body and HOSTILE[1] in body  # shown as the text it is
        overrides = driver.find_element(By.XPATH, "//h3[text()='Exceptions applied']/following-sibling::table[1]")  # type: ignore[attr-defined]
        assert all(text in overrides.text for text in HOSTILE), overrides.text  # id, scope, codes, grantor, ...
        try:
            driver.switch_to.alert  # type: ignore[attr-defined]  # noqa: B018
            raise AssertionError("a script from the ledger ran")
        except NoAlertPresentException:
            pass
        screenshot(driver, "report-hostile-ledger.png")
    finally:
        driver.quit()  # type: ignore[attr-defined]
