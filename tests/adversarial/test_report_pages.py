"""Attacks on the report's and dashboard's filters and pages, through `kcp-opa serve` as a real process.

The service's ledger holds 10,000 entries (tests/bigledger.py) before the server starts; the gate
extends that chain. A page of either view stays under a bound however long the ledger is (a year's
ledger on one page was megabytes); a filter value a caller puts in the query comes back escaped,
never as markup; a parameter that cannot be used (a page past the last, an unknown name, a page
size over the limit, a period that is not one) is a 400 with one line naming it, never a 500,
an empty page or a silently ignored filter.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import bigledger
import pytest
from uikit import HOSTILE, _action, _api, _http_session, _pending_payment, ui_servers

from kcp_opa.audit.selection import MAX_PAGE_SIZE

#: What one page may weigh at the largest page size, charts included: a bound that does not grow with the ledger.
PAGE_BOUND = 600_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("report-pages")
    ledger = work / "ledger.jsonl"
    assert bigledger.write(ledger, bigledger.plan(3750)) == 10_000
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    with ui_servers(work, ledger=str(ledger)) as (one,):
        client, _ = _http_session(one, "auditor")
        yield {**one, "client": client, "started": started}


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.handlers += [f"{tag} {name}" for name, _ in attrs if name.startswith("on")]


@pytest.mark.parametrize("view", ["/ui/report", "/ui/dashboard"])
def test_a_ledger_of_ten_thousand_entries_gives_pages_of_bounded_size(server: dict[str, Any], view: str) -> None:
    for query in ("", f"?per_page={MAX_PAGE_SIZE}", f"?per_page={MAX_PAGE_SIZE}&page=3"):
        page = server["client"].get(view + query)
        assert page.status_code == 200, page.text[:300]
        assert len(page.content) < PAGE_BOUND, (view + query, len(page.content))
    assert re.search(r"[Cc]hain intact: 10\d{3} entries", page.text)  # the whole chain was verified


@pytest.mark.parametrize("view", ["/ui/report", "/ui/dashboard"])
def test_a_filter_value_comes_back_escaped_never_as_markup(server: dict[str, Any], view: str) -> None:
    page = server["client"].get(f"{view}?agent={quote(HOSTILE)}&tenant={quote(HOSTILE)}")
    assert page.status_code == 200, page.text[:300]
    assert HOSTILE not in page.text
    assert 'value="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;' in page.text  # shown in the form, as text
    parsed = _Markup()
    parsed.feed(page.text)
    assert not parsed.handlers and not {"script", "img"} & parsed.tags
    for link in ("previous", "next"):  # links that keep the filters carry them URL-encoded
        assert f'id="{link}"' not in page.text  # no decision matches: one page


BAD = [
    ("page=999999", "page=999999 is past the last page"),
    ("page=0", "page='0' is not a whole number from 1"),
    (f"per_page={MAX_PAGE_SIZE * 50}", f"per_page='{MAX_PAGE_SIZE * 50}' is not a whole number from 1 to"),
    ("outcome=MAYBE", "outcome='MAYBE' is not a decision state or status"),
    ("since=last+week", "since='last week' is not a date"),
    ("page=1&page=2", "page is given twice"),
    ("colour=red", "unknown parameter 'colour'"),
    ("page=%C2%B2", "page='²' is not a whole number from 1"),  # a digit to str.isdigit, not to int()
    ("until=9999-12-31", "until='9999-12-31' is past the last date"),  # the day after it is past datetime's range
    (f"agent={quote(HOSTILE)}&page=5", "page=5 is past the last page (1)"),
]


@pytest.mark.parametrize("view", ["/ui/report", "/ui/dashboard"])
@pytest.mark.parametrize(("query", "message"), BAD, ids=[q for q, _ in BAD])
def test_a_parameter_that_cannot_be_used_is_a_one_line_400(
    server: dict[str, Any], view: str, query: str, message: str
) -> None:
    page = server["client"].get(f"{view}?{query}")
    assert page.status_code == 400, (page.status_code, page.text[:300])
    start = page.text.index('<p class="bad" id="query-error">') + len('<p class="bad" id="query-error">')
    line = page.text[start : page.text.index("</p>", start)]
    assert line.replace("&#x27;", "'").startswith(message) and "\n" not in line and HOSTILE not in page.text


def test_the_pages_walk_the_decisions_newest_first_and_keep_the_filters(server: dict[str, Any]) -> None:
    client, seen, path = server["client"], [], "/ui/dashboard?outcome=DENY&per_page=200"
    while path:
        page = client.get(path.replace("&amp;", "&"))
        assert page.status_code == 200, page.text[:300]
        body = page.text.split('<table id="decisions">', 1)[1].split("</table>", 1)[0]
        seen += [cell.split("</td>", 1)[0] for cell in body.split("<tr><td>")[1:]]
        after = page.text.split('id="next"', 1)[0].rsplit('href="', 1) if 'id="next"' in page.text else None
        path = after[1].split('"', 1)[0] if after else ""
        assert not path or ("outcome=DENY" in path and "per_page=200" in path)
    assert seen == [f"dec_{i:05d}" for i in range(3750) if i % 3 == 1][::-1]


def _counted(text: str, name: str, label: str) -> dict[str, int]:
    found = re.findall(rf'^{name}_total\{{{label}="([^"]+)"\}} ([0-9.e+]+)$', text, re.MULTILINE)
    return {key: int(float(value)) for key, value in found}


def test_the_period_since_the_server_started_counts_what_metrics_counts(server: dict[str, Any]) -> None:
    """/metrics counts since the process started; the ledger holds 10,000 entries from before. The
    dashboard for the period since the start shows the same decisions by state and refusals by code."""
    action = _action("metrics_period")
    decision_id, ids = _pending_payment(server, action)
    own = {"status": "PASSED", "evidence_reference": "self-approval"}  # the subject approving its own payment
    refused = _api(server, "subject", "POST", f"/v1/challenges/{ids['independent_human_approval']}/result", own)
    assert refused.status_code >= 400, refused.text
    metrics = _api(server, "auditor", "GET", "/metrics").text
    page = server["client"].get(f"/ui/dashboard?since={server['started']}").text
    states = dict(
        re.findall(
            r"<tr><td>([A-Z_]+)</td><td>(\d+)</td></tr>", page.split('id="by-state"', 1)[1].split("</table>", 1)[0]
        )
    )
    codes = dict(
        re.findall(
            r"<tr><td>([a-z_]+)</td><td>(\d+)</td></tr>", page.split('id="refusals"', 1)[1].split("</table>", 1)[0]
        )
    )
    assert (
        {k: int(v) for k, v in states.items()}
        == _counted(metrics, "kcp_opa_decisions", "state")
        == {"HUMAN_APPROVAL": 1}
    )
    assert {k: int(v) for k, v in codes.items()} == _counted(metrics, "kcp_opa_refusals", "code") != {}
    assert int(re.search(r'id="n-decisions"><b>(\d+)', page).group(1)) == 1  # type: ignore[union-attr]
    whole = server["client"].get("/ui/dashboard").text  # the whole ledger: the 3,750 decisions from before too
    assert int(re.search(r'id="n-decisions"><b>(\d+)', whole).group(1)) == 3751  # type: ignore[union-attr]
    assert decision_id in page
