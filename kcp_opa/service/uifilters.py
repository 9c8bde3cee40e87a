"""The filter form and the page links above the dashboard and the report.

A GET form (no script): the period, the outcome, the agent, model, task type, tenant and decision
id, and the page size; below it "page N of M" with previous and next links that keep the filters.
Every value a user typed comes back into the page escaped (``esc``), in the form and in the links.
"""

from __future__ import annotations

from kcp_opa.audit.selection import MAX_PAGE_SIZE, OUTCOMES, Selection, Window, query_string
from kcp_opa.service.uiledger import Controls
from kcp_opa.service.uipages import esc

_TEXT_FIELDS = (
    ("since", "From", "YYYY-MM-DD or RFC 3339"),
    ("until", "Until", "YYYY-MM-DD or RFC 3339"),
    ("agent", "Agent", "agent id"),
    ("model", "Model", "model id"),
    ("task_type", "Task type", "action_type"),
    ("tenant", "Tenant", "tenant id"),
    ("decision", "Decision", "decision id"),
)


def controls(path: str, selection: Selection, window: Window, pages: int, *, counted: int) -> str:
    """The form (GET ``path``) and the page links; ``counted``: the entries the selection holds."""
    given = dict(selection.given)
    inputs = "".join(
        f'<label>{esc(label)} <input type="text" name="{name}" id="f-{name}" value="{esc(given.get(name, ""))}"'
        f' placeholder="{esc(hint)}" size="14"></label> '
        for name, label, hint in _TEXT_FIELDS
    )
    chosen = given.get("outcome", "")
    options = '<option value="">any</option>' + "".join(
        f'<option value="{esc(o)}"{" selected" if o == chosen else ""}>{esc(o)}</option>' for o in OUTCOMES
    )
    form = (
        f'<form method="get" action="{esc(path)}" class="controls" id="filters">{inputs}'
        f'<label>Outcome <select name="outcome" id="f-outcome">{options}</select></label> '
        f'<label>Per page <input type="text" name="per_page" id="f-per_page" value="{window.size}" size="4"'
        f' title="1 to {MAX_PAGE_SIZE}"></label> <button type="submit" id="apply">Filter</button>'
        f' <a href="{esc(path)}" id="clear">Clear</a></form>'
    )
    links = []
    if window.number > 1:
        links.append(
            f'<a href="{esc(path + query_string(selection, window, window.number - 1))}" id="previous">« previous</a>'
        )
    if window.number < pages:
        links.append(f'<a href="{esc(path + query_string(selection, window, window.number + 1))}" id="next">next »</a>')
    scope = "filtered: " + ", ".join(f"{k} {v}" for k, v in selection.given) if selection.active else "the whole ledger"
    return (
        form + f'<p id="pager">{counted} entries ({esc(scope)}). Page {window.number} of {pages}: each list shows up to'
        f" {window.size} rows, newest first. {' '.join(links)}</p>"
    )


def bad_query(path: str, message: str) -> str:
    """The page for a filter or page parameter that cannot be used: the one line that says what to fix."""
    return (
        f'<h1>Not shown</h1><p class="bad" id="query-error">{esc(message)}</p>'
        f'<p><a href="{esc(path)}">Without filters</a></p>'
    )


def controls_for(path: str, selection: Selection, window: Window) -> Controls:
    """The filter form and page links of ``path`` for a counted summary and its page count."""
    return lambda summary, pages: controls(path, selection, window, pages, counted=summary.entries)
