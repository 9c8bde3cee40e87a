"""What the UI shows of the ledger: the dashboard's figures and the report, read through the ledger itself.

The service's ledger is a ``LedgerStore`` (a JSON Lines file, or a PostgreSQL database shared by
replicas). Its :meth:`~kcp_opa.stores.protocols.LedgerStore.snapshot` is the chain as one ledger
file, the bytes ``kcp-opa audit verify`` reads; the dashboard and the report verify and count
that snapshot, so they say what the auditor's commands say, whichever backend holds the chain;
with a writer key (``--ledger-key``) they check every entry's signature with it, as ``audit
verify --keyring`` does, so an entry added without the key shows the chain BROKEN.
A database that cannot be read raises ``StoreUnavailableError``: the page says the ledger is
unavailable, never that it is empty or broken. Without matplotlib (the ``report`` extra) the
report is served with its charts as tables, never a 500. Both show a selection (filters) and one
page of their lists, at most ``Window.size`` rows each, so a ledger of millions of entries still
gives a page of bounded size; a page past the last is a ``SelectionError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from kcp_opa.audit.report import SERVED_CSP, ReportError, page_decisions, pages_of, render_html
from kcp_opa.audit.selection import Selection, Window
from kcp_opa.audit.summary import LedgerSummary, entries_by_decision, summarize
from kcp_opa.core.signing import Key
from kcp_opa.service.desk import GateService
from kcp_opa.stores.storedtypes import LedgerSnapshot


@contextlib.contextmanager
def _snapshot(service: GateService) -> Iterator[tuple[LedgerSnapshot, Key | None] | None]:
    """The ledger's snapshot and its writer key (--ledger-key: every entry must carry its signature)."""
    audit = service.gate.audit  # the ledger the gate writes now (a reload keeps it)
    if audit is None:
        yield None
        return
    with audit.ledger.snapshot() as snapshot:
        yield None if snapshot is None else (snapshot, audit.ledger.checkpoint_key)


#: The filter form and page links for a summary at a page count (uifilters.controls, bound to its path).
Controls = Callable[[LedgerSummary, int], str]


def _summary(snapshot: LedgerSnapshot, writer: Key | None, selection: Selection) -> LedgerSummary:
    return summarize(snapshot.path, position=snapshot.position, writer=writer, selection=selection)


def ledger_summary(service: GateService, selection: Selection, window: Window) -> tuple[LedgerSummary, int] | None:
    """The service's ledger, verified, its selection counted, and its page count (``window`` checked
    against it); None while nothing has been written to it."""
    with _snapshot(service) as read:
        if read is None:
            return None
        summary = _summary(*read, selection)
        summary.ledger = read[0].name
        pages = pages_of(summary, window)
        window.check(pages)
        return summary, pages


def ledger_report(
    service: GateService, *, show_location: bool, selection: Selection, window: Window, controls: Controls
) -> str | None:
    """The HTML report of the service's ledger (``audit report``'s) for ``selection``, ``window``'s page of
    its lists, or None while nothing is written.

    ``show_location``: name the ledger by its location (a service_admin's view, as /v1/status),
    else by a name that carries no server path.
    """
    with _snapshot(service) as read:
        if read is None:
            return None
        summary = _summary(*read, selection)
        summary.ledger = read[0].shown if show_location else read[0].name
        pages = pages_of(summary, window)
        window.check(pages)
        grouped = entries_by_decision(read[0].path, only=page_decisions(summary, window))
        above = controls(summary, pages)

        def draw(charts: bool) -> str:
            return render_html(
                summary, entries_by_decision=grouped, charts=charts, window=window, controls=above, csp=SERVED_CSP
            )

        try:
            return draw(True)
        except ReportError:  # no matplotlib here (the `report` extra): the same report, its charts as tables
            return draw(False)
