"""The report's filters and pages over a ledger of 10,000 entries: each filter counts exactly the
decisions it names (with their re-decisions and refusals), a period counts the entries in it, and
the pages list every decision once, newest first. The attacks (hostile filter values, pages out of
range, the page size at 10,000 entries through a real server) are in
tests/adversarial/test_report_pages.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import bigledger
import pytest
from conftest import run_cli

from kcp_opa.audit.report import pages_of, render_html
from kcp_opa.audit.selection import MAX_PAGE_SIZE, SelectionError, Window, parse_selection
from kcp_opa.audit.summary import LedgerSummary, entries_by_decision, summarize


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bigledger.Planned]]:
    planned = bigledger.plan(3750)
    path = tmp_path_factory.mktemp("big") / "ledger.jsonl"
    assert bigledger.write(path, planned) == 10_000
    return path, planned


def _selected(path: Path, **params: str) -> LedgerSummary:
    selection, _ = parse_selection(params.items())
    return summarize(path, selection=selection)


def _assert_counts(summary: LedgerSummary, planned: list[bigledger.Planned]) -> None:
    want = bigledger.expected(planned)
    assert summary.decisions == want["decisions"]
    assert summary.by_state == want["by_state"] and summary.by_status == want["by_status"]
    assert len(summary.redecisions) == want["redecisions"]
    assert sum(summary.refusals.values()) == want["refusals"]
    assert summary.entries == sum(len(p.entries) for p in planned)


def test_the_whole_ledger_counts_as_planned(ledger: tuple[Path, list[bigledger.Planned]]) -> None:
    path, planned = ledger
    _assert_counts(summarize(path), planned)


FILTERS: list[tuple[dict[str, str], Callable[[bigledger.Planned], bool]]] = [
    ({"outcome": "DENY"}, lambda p: p.state == "DENY"),
    ({"outcome": "APPROVED"}, lambda p: p.status == "APPROVED"),  # the final status, after the control answer
    ({"outcome": "HUMAN_APPROVAL", "tenant": "tenant_2"},
     lambda p: (p.state, p.tenant) == ("HUMAN_APPROVAL", "tenant_2")),
    ({"agent": "agent_3"}, lambda p: p.agent == "agent_3"),
    ({"model": "model-1", "task_type": "task_2"}, lambda p: p.model == "model-1" and p.task_type == "task_2"),
    ({"decision": "dec_00005"}, lambda p: p.decision_id == "dec_00005"),
    ({"decision": "dec_00005_x"}, lambda p: p.decision_id == "dec_00005"),  # an execution's id names its decision
    ({"agent": "nobody"}, lambda p: False),
]  # fmt: skip


@pytest.mark.parametrize(("params", "chosen"), FILTERS, ids=[str(p) for p, _ in FILTERS])
def test_each_filter_counts_the_decisions_it_names_with_their_entries(
    ledger: tuple[Path, list[bigledger.Planned]], params: dict[str, str], chosen: Callable[[bigledger.Planned], bool]
) -> None:
    path, planned = ledger
    summary = _selected(path, **params)
    _assert_counts(summary, [p for p in planned if chosen(p)])
    assert summary.chain_ok and summary.chain_detail.startswith("10000 entries")  # the chain is verified whole


def test_a_period_counts_the_entries_in_it(ledger: tuple[Path, list[bigledger.Planned]]) -> None:
    path, planned = ledger
    summary = _selected(path, since="2026-11-03", until="2026-11-03")  # one whole UTC day, both dates included
    day = [p for p in planned if p.at.date() == dt.date(2026, 11, 3)]
    assert summary.decisions == len(day) == 144
    stamps = [entry["timestamp"] for p in planned for entry in p.entries]
    assert summary.entries == sum(1 for s in stamps if s.startswith("2026-11-03"))
    timed = _selected(path, since="2026-11-03T10:00:00Z", until="2026-11-03T11:00:00+00:00")  # until excluded
    assert timed.decisions == 6 and min(timed.final) == "dec_00348"


def test_the_pages_list_every_decision_once_newest_first(ledger: tuple[Path, list[bigledger.Planned]]) -> None:
    path, planned = ledger
    summary = _selected(path, outcome="DENY")
    window = Window(1, MAX_PAGE_SIZE)
    pages = pages_of(summary, window)
    seen: list[str] = []
    for number in range(1, pages + 1):
        seen += Window(number, MAX_PAGE_SIZE).rows(list(summary.final))
    assert seen == [p.decision_id for p in planned if p.state == "DENY"][::-1]
    with pytest.raises(SelectionError, match=rf"page={pages + 1} is past the last page \({pages}\)"):
        Window(pages + 1, MAX_PAGE_SIZE).check(pages)


def test_a_page_of_the_report_lists_only_its_decisions(ledger: tuple[Path, list[bigledger.Planned]]) -> None:
    path, _ = ledger
    summary, window = summarize(path), Window(3, 20)
    shown = window.rows(list(summary.final))
    page = render_html(summary, entries_by_decision=entries_by_decision(path, only=shown), charts=False, window=window)
    listed = [d for d in summary.final if f'id="d-{d}"' in page]
    assert sorted(listed) == sorted(shown) and len(shown) == 20 and shown[0] == "dec_03709"


BAD: list[tuple[list[tuple[str, str]], str]] = [
    ([("page", "0")], "page='0' is not a whole number from 1"),
    ([("per_page", "100000")], f"per_page='100000' is not a whole number from 1 to {MAX_PAGE_SIZE}"),
    ([("page", "-1")], "page='-1'"),
    ([("outcome", "MAYBE")], "outcome='MAYBE' is not a decision state or status"),
    ([("since", "yesterday")], "since='yesterday' is not a date"),
    ([("since", "2026-11-05"), ("until", "2026-11-04")], "until is not after since"),
    ([("colour", "red")], "unknown parameter 'colour'"),
    ([("agent", "a"), ("agent", "b")], "agent is given twice"),
    ([("agent", "a\nb")], "agent is longer than 256 characters or holds control characters"),
    ([("agent", "a" * 300)], "agent is longer than 256 characters"),
]


@pytest.mark.parametrize(("params", "message"), BAD, ids=[m for _, m in BAD])
def test_a_parameter_that_cannot_be_used_is_one_line_naming_it(params: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(SelectionError) as raised:
        parse_selection(params)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_empty_form_fields_are_no_filter() -> None:
    selection, window = parse_selection([("agent", ""), ("outcome", ""), ("page", ""), ("since", " ")])
    assert not selection.active and not selection.narrows_decisions and window == Window()


def test_audit_report_takes_the_same_filters_and_pages(
    ledger: tuple[Path, list[bigledger.Planned]], tmp_path: Path
) -> None:
    path, planned = ledger
    counted = run_cli("audit", "report", str(path), "--outcome", "DENY", "--agent", "agent_3", "--format", "text")
    assert counted.returncode == 0, counted.stderr
    chosen = [p for p in planned if p.state == "DENY" and p.agent == "agent_3"]
    entries = sum(len(p.entries) for p in chosen)
    assert f"{entries} entries (filtered: outcome DENY, agent agent_3), {len(chosen)} decisions" in counted.stdout
    page = tmp_path / "page.html"
    drawn = run_cli("audit", "report", str(path), "--html", str(page), "--page", "2", "--per-page", "100")
    assert drawn.returncode == 0, drawn.stderr
    text = page.read_text()
    assert text.count('<section id="d-') == 100 and 'id="d-dec_03649"' in text and len(text) < 400_000
    past = run_cli(
        "audit", "report", str(path), "--html", str(tmp_path / "x.html"), "--page", "99", "--per-page", "200"
    )
    assert (
        past.returncode != 0
        and past.stderr.strip() == "kcp-opa: error: page=99 is past the last page (19): give page=1 to 19"
    )
    assert not (tmp_path / "x.html").exists()
