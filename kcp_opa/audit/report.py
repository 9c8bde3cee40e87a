"""`audit report --html`: one self-contained HTML file for auditors and compliance officers.

No network and no JavaScript: the charts are matplotlib figures rendered to SVG and inlined, the
styles are inline, and a Content-Security-Policy (``default-src 'none'``) forbids anything else.
Every value from the ledger is HTML-escaped: an action's strings (agent ids, references, reason
messages) are attacker-controlled. Chart labels are drawn as glyph paths and the SVG's comments
are removed, so no ledger text reaches the markup inside a chart either.
"""

from __future__ import annotations

import html
import io
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from kcp_opa.audit.selection import Window
from kcp_opa.audit.summary import EXCEPTION_HEADERS, LedgerSummary, exception_rows
from kcp_opa.audit.tallies import REDECISION_STEPS
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonObject, strings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
#: The report as the service serves it: its filter form submits to the same page.
SERVED_CSP = CSP.replace("form-action 'none'", "form-action 'self'")
#: The most rows a count table shows (the largest counts), and the most entries a decision's case view lists.
TOP_ROWS, CASE_ROWS = 25, 40
_Row = TypeVar("_Row")
#: Every row, in chain order (the CLI's report without --page).
WHOLE = Window(1, 10**12)
_STATE_COLOURS = {
    "ALLOW": "#2e7d32",
    "USER_CONFIRMATION": "#7cb342",
    "HUMAN_APPROVAL": "#f9a825",
    "COMPLIANCE_REVIEW": "#ef6c00",
    "ESCALATE": "#8e24aa",
    "DENY": "#c62828",
}
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1b1b1b;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;display:block;overflow-x:auto}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f4f4f4}.num{text-align:right}.ok{color:#2e7d32}.bad{color:#c62828}
.cards{display:flex;flex-wrap:wrap;gap:1em}.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em}
.card b{display:block;font-size:1.6em}code{font-size:.9em;word-break:break-all}.chart svg{max-width:100%;height:auto}
.controls{background:#f4f4f4;border:1px solid #ddd;padding:.5em 1em}.controls input,.controls select{margin-right:.6em}
"""


#: Said on a report drawn without matplotlib (its charts are tables).
NO_CHARTS = "Charts are shown as tables: drawing them needs matplotlib (pip install 'kcp-opa[report]')."


#: How a page draws a table: headers, rows (each value escaped by it), ``empty`` (what to say for none).
Table = Callable[..., str]


class ReportError(KcpOpaError):
    """The report could not be drawn (matplotlib missing)."""


def esc(value: object) -> str:
    """Every value that reaches the page: escaped, quotes included (attributes are safe too)."""
    return html.escape("" if value is None else str(value), quote=True)


def _pyplot() -> ModuleType:
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "path"  # glyphs as paths: no <text> with ledger strings
        matplotlib.rcParams["svg.hashsalt"] = "kcp-opa"  # the same ledger draws the same SVG
        from matplotlib import pyplot
    except ImportError:
        raise ReportError("the HTML report needs matplotlib: pip install 'kcp-opa[report]'") from None
    return pyplot


def _svg(figure: Figure) -> str:
    pyplot = _pyplot()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    pyplot.close(figure)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def _bars(counts: Mapping[str, int], title: str, *, charts: bool, limit: int = 15) -> str:
    if not counts:
        return f"<p>No {esc(title.lower())}.</p>"
    if not charts:  # the same counts as a table
        return _top([title, "count"], counts)
    pyplot = _pyplot()
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit][::-1]
    figure, axes = pyplot.subplots(figsize=(7, 0.35 * len(items) + 0.9))
    axes.barh([_short(label) for label, _ in items], [count for _, count in items], color="#3f6fb5")
    axes.set_title(title)
    axes.xaxis.get_major_locator().set_params(integer=True)
    return _svg(figure)


def _over_time(summary: LedgerSummary, *, charts: bool) -> str:
    if not summary.over_time:
        return "<p>No decisions.</p>"
    if not charts:
        rows = ([label, ", ".join(f"{s} {n}" for s, n in sorted(c.items()))] for label, c in summary.over_time.items())
        return _table([summary.bucket, "decisions by final state"], rows)
    pyplot = _pyplot()
    labels = list(summary.over_time)
    states = sorted({state for counts in summary.over_time.values() for state in counts})
    figure, axes = pyplot.subplots(figsize=(8, 3.2))
    bottom = [0] * len(labels)
    for state in states:
        values = [summary.over_time[label].get(state, 0) for label in labels]
        axes.bar(labels, values, bottom=bottom, label=_short(state), color=_STATE_COLOURS.get(state, "#607d8b"))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_title(f"Decisions by final state, per {summary.bucket} of their first entry")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    axes.yaxis.get_major_locator().set_params(integer=True)
    pyplot.setp(axes.get_xticklabels(), rotation=30, ha="right", fontsize=8)
    return _svg(figure)


def _short(label: str, width: int = 40) -> str:
    # matplotlib treats $...$ as mathtext; a ledger string is text, never markup.
    text = label if len(label) <= width else label[: width - 1] + "…"
    return text.replace("$", r"\$")


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, empty: str = "None.") -> str:
    body = "".join(
        "<tr>" + "".join(_cell(header, value) for header, value in zip(headers, row, strict=True)) + "</tr>"
        for row in rows
    )
    if not body:
        return f"<p>{esc(empty)}</p>"
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(header: str, value: object) -> str:
    if header == "decision" and isinstance(value, str) and value:
        return f'<td><a href="#{esc(_anchor(value))}"><code>{esc(value)}</code></a></td>'
    css = ' class="num"' if isinstance(value, int | float) and not isinstance(value, bool) else ""
    return f"<td{css}>{esc(value)}</td>"


def _anchor(decision_id: str) -> str:
    return "d-" + re.sub(r"[^A-Za-z0-9_-]", "_", decision_id)


def _top(headers: Sequence[str], counts: Mapping[str, int]) -> str:
    """The ``TOP_ROWS`` largest counts, and how many more there are (a filter narrows to one)."""
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    more = f"<p>And {len(rows) - TOP_ROWS} more; filter to see one.</p>" if len(rows) > TOP_ROWS else ""
    return _table(headers, rows[:TOP_ROWS]) + more


def _counts_table(title: str, counts: Counter[str]) -> str:
    return f"<h3>{esc(title)}</h3>" + _top([title.split(" ")[-1], "decisions"], counts)


def pages_of(summary: LedgerSummary, window: Window) -> int:
    """How many pages the longest list the report shows takes at ``window``'s size."""
    lists = (summary.final, summary.approvals, summary.overrides, summary.exceptions, summary.refusal_rows,
             summary.ambiguous, summary.unresolved_intents, summary.divergences, summary.redecisions,
             summary.policy_timeline)  # fmt: skip
    return window.pages(len(listed) for listed in lists)


def page_decisions(summary: LedgerSummary, window: Window) -> list[str]:
    """The decision ids whose case views ``window`` shows."""
    return window.rows(list(summary.final)) if window is not WHOLE else list(summary.final)


def _pick(window: Window, items: Sequence[_Row]) -> Sequence[_Row]:
    return items if window is WHOLE else window.rows(items)


def render_html(
    summary: LedgerSummary,
    *,
    entries_by_decision: Mapping[str, Sequence[JsonObject]],
    charts: bool = True,
    window: Window = WHOLE,
    controls: str = "",
    csp: str = CSP,
) -> str:
    """The whole page; ``entries_by_decision`` feeds each decision's case view (its entries in order).

    ``charts`` False: each chart's counts as a table, with a note that drawing needs matplotlib
    (a server without the ``report`` extra still serves the report). ``window``: the page of every
    list shown (newest first; WHOLE: all, in chain order), the counts stay the whole selection's;
    ``controls``: the filter form and page links (HTML, every value already escaped), above the counts.
    """
    chain = (
        f'<p class="ok">Chain intact: {esc(summary.chain_detail)}</p>'
        if summary.chain_ok
        else f'<p class="bad">Chain BROKEN: {esc(summary.chain_detail)}</p>'
    )
    cards = "".join(
        f'<div class="card"><b>{esc(value)}</b>{esc(label)}</div>'
        for label, value in (
            ("decisions", summary.decisions),
            ("re-decisions", len(summary.redecisions)),
            ("denied", summary.by_state.get("DENY", 0)),
            ("approved", summary.by_status.get("APPROVED", 0)),
            ("pending controls", summary.by_status.get("PENDING_CONTROLS", 0)),
            ("control results", len(summary.approvals)),
            ("refusals", sum(summary.refusals.values())),
            ("receipts", summary.receipts),
            ("executions", summary.executions),
            ("ambiguous executions", len(summary.ambiguous)),
            ("intents without an outcome", len(summary.unresolved_intents)),
            ("engine divergences", len(summary.divergences)),
        )
    )
    approvals = _table(
        ["decision", "control", "actor", "actor type", "roles", "issuer", "status", "latency (s)", "seq"],
        (
            [a["decision_id"], a["control"], a["actor_id"], a["actor_type"], ", ".join(a.get("roles") or []),
             a["issuer"], a["status"], a.get("latency_seconds"), a["seq"]]
            for a in _pick(window, summary.approvals)
        ),
    )  # fmt: skip
    refusals = _table(
        ["seq", "code", "principal", "decision", "message"],
        (
            [r["seq"], r["code"], r["principal"], r["decision_id"], r["message"]]
            for r in _pick(window, summary.refusal_rows)
        ),
    )
    sections = [
        "<h1>kcp-opa audit report</h1>"
        f"<p>Ledger <code>{esc(summary.ledger)}</code>: {esc(summary.entries)} entries.</p>"
        + ("" if charts else f'<p id="no-charts">{esc(NO_CHARTS)}</p>')
        + controls,
        "<h2>Chain and checkpoints</h2>" + chain,
        f'<div class="cards">{cards}</div>',
        '<h2>Decisions over time</h2><div class="chart">' + _over_time(summary, charts=charts) + "</div>",
        '<h2>Reasons</h2><div class="chart">' + _bars(summary.by_reason, "Reason codes", charts=charts) + "</div>",
        "<h2>By agent, model, unit, tenant</h2>"
        + '<div class="chart">'
        + _bars(summary.by_agent, "Decisions by agent", charts=charts)
        + "</div>"
        + "".join(
            _counts_table(title, counts)
            for title, counts in (
                ("by state", summary.by_state),
                ("by model", summary.by_model),
                ("by unit", summary.by_unit),
                ("by tenant", summary.by_tenant),
            )
        ),
        "<h2>Re-decisions</h2>" + redecision_tables(summary, _table, window),
        "<h2>Policy versions</h2>" + policy_timeline_table(summary, _table, window),
        "<h2>Approvals and control results</h2>" + approvals,
        "<h2>Overrides and exceptions</h2>"
        + "<h3>Exceptions applied</h3>"
        + _table(EXCEPTION_HEADERS, _pick(window, exception_rows(summary)), empty="No exception was applied.")
        + "<h3>Override controls</h3>"
        + _table(
            ["decision", "control", "actor", "issuer", "seq"],
            (
                [o["decision_id"], o["control"], o["actor_id"], o["issuer"], o["seq"]]
                for o in _pick(window, summary.overrides)
            ),
        ),
        '<h2>Refusals by code</h2><div class="chart">'
        + _bars(summary.refusals, "Refusals by code", charts=charts)
        + "</div>"
        + refusals,
        "<h2>Ambiguous executions</h2>"
        + _table(
            ["seq", "idempotency key", "message"],
            ([a["seq"], a["idempotency_key"], a["message"]] for a in _pick(window, summary.ambiguous)),
        ),
        "<h2>Intents without an outcome</h2>"
        + _table(
            ["seq", "idempotency key", "receipt", "agent", "time"],
            (
                [i["seq"], i["idempotency_key"], i["receipt_id"], i["agent_id"], i["timestamp"]]
                for i in _pick(window, summary.unresolved_intents)
            ),
        ),
        "<h2>Engine divergences</h2>"
        + _table(
            ["seq", "decision", "engines"],
            (
                [d["seq"], d["decision_id"], ", ".join(strings(d["engines"]))]
                for d in _pick(window, summary.divergences)
            ),
        ),
        "<h2>Decisions</h2>" + _decisions(summary, entries_by_decision, page_decisions(summary, window)),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
        '<meta name="referrer" content="no-referrer"><title>kcp-opa audit report</title>'
        f"<style>{_STYLE}</style></head><body>" + "\n".join(sections) + "</body></html>\n"
    )


def _decisions(
    summary: LedgerSummary, entries_by_decision: Mapping[str, Sequence[JsonObject]], shown: Sequence[str]
) -> str:
    """One case view per decision shown: its final state, then its first ``CASE_ROWS`` entries in chain order."""
    from kcp_opa.audit.rows import row

    parts = []
    for decision_id in shown:
        final, held = summary.final[decision_id], entries_by_decision.get(decision_id, [])
        rows = [list(row(entry).values()) for entry in held[:CASE_ROWS]]
        more = (
            f"<p>And {len(held) - CASE_ROWS} more entries: the case file holds them all.</p>"
            if len(held) > CASE_ROWS
            else ""
        )
        parts.append(
            f'<section id="{esc(_anchor(decision_id))}"><h3><code>{esc(decision_id)}</code>: '
            f"{esc(final.get('decision'))} / {esc(final.get('authorization_status'))}</h3>"
            f"<p>Prove it: <code>kcp-opa audit case {esc(summary.ledger)} {esc(decision_id)} -o case/</code></p>"
            + _table(["seq", "time", "type", "decision id", "who", "what", "detail"], rows)
            + more
            + "</section>"
        )
    return "".join(parts) or "<p>No decisions.</p>"


def redecision_tables(summary: LedgerSummary, table: Table, window: Window) -> str:
    """The re-decisions by step, then each one on ``window``'s page linked to the decision it re-decides."""
    steps = [[step, REDECISION_STEPS.get(step, step), count] for step, count in summary.redecisions_by_step.items()]
    rows: Iterable[Sequence[object]] = (
        [r["seq"], r["step"], r["original_decision_id"], r["decision_id"], r["decision"], r["authorization_status"],
         str(r["revision"])[:12], r["timestamp"]]
        for r in _pick(window, summary.redecisions)
    )  # fmt: skip
    return table(["step", "re-decided at", "re-decisions"], steps, empty="No re-decision.") + table(
        ["seq", "step", "decision", "re-decision id", "state", "status", "bundle", "time"], rows, empty=""
    )


def policy_timeline_table(summary: LedgerSummary, table: Table, window: Window) -> str:
    """The bundle revisions that decided, in the order the ledger first named them (a page: newest first)."""
    rows = (
        [t["revision"], t["sha256"][:12], t["keyid"], f"{t['first_seen']['seq']} ({t['first_seen']['timestamp']})",
         f"{t['last_seen']['seq']} ({t['last_seen']['timestamp']})", t["entries"], t["decision_entries"]]
        for t in _pick(window, summary.policy_timeline)
    )  # fmt: skip
    headers = ["revision", "sha256", "signer", "first seen (seq, time)", "last seen", "entries", "decision entries"]
    return table(headers, rows, empty="None on this page." if summary.policy_timeline else "No entry names a bundle.")
