"""The HTML of the service's UI: sign-in, the live dashboard, the approvals inbox.

Server-rendered, no JavaScript: the pages work under ``script-src 'none'``. Every value that
reaches a page goes through :func:`esc` (a challenge's summary quotes the agent's action, whose
strings are attacker-controlled); forms carry the session's CSRF token.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence

from kcp_opa.audit.auditor import entry_agent
from kcp_opa.audit.report import TOP_ROWS, policy_timeline_table, redecision_tables
from kcp_opa.audit.selection import Window
from kcp_opa.audit.summary import EXCEPTION_HEADERS, LedgerSummary, exception_rows
from kcp_opa.core.jsonread import JsonObject, items, mapping, strings

CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
header{background:#23395d;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center}
header a{color:#fff}header form{margin-left:auto}main{max-width:70em;margin:1.5em auto;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.3em .7em;text-align:left;
vertical-align:top}th{background:#f0f0f0}.num{text-align:right}
.cards{display:flex;flex-wrap:wrap;gap:.8em}.card{background:#fff;border:1px solid #ddd;border-radius:6px;
padding:.5em 1em;min-width:8em}.card b{display:block;font-size:1.6em}
.challenge{background:#fff;border:1px solid #ccc;border-radius:6px;padding:.8em 1.2em;margin:1em 0}
.amount{font-size:1.3em;font-weight:bold}.ok{color:#2e7d32}.bad{color:#c62828}code{word-break:break-all}
input[type=text],input[type=password]{width:28em;max-width:100%;padding:.3em}button{padding:.35em 1em;margin-right:.5em}
.controls{background:#fff;border:1px solid #ddd;padding:.5em 1em}.controls input[type=text]{width:auto}
"""


def esc(value: object) -> str:
    """Escape for HTML text and attribute values (quotes included)."""
    return html.escape("" if value is None else str(value), quote=True)


def page(title: str, body: str, *, principal: JsonObject | None = None, csrf: str = "", nav: str = "") -> str:
    """A whole page: the stylesheet from /ui/static (CSP style-src 'self'), a header, the body."""
    who = ""
    if principal is not None:
        roles = ", ".join(sorted(strings(principal.get("roles"))))
        who = (
            f"<span>{esc(principal.get('id'))} ({esc(principal.get('kind'))}; {esc(roles)})</span>"
            f'<form method="post" action="/ui/logout"><input type="hidden" name="csrf" value="{esc(csrf)}">'
            '<button type="submit">Sign out</button></form>'
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<title>{esc(title)} · kcp-opa</title><link rel="stylesheet" href="/ui/static/ui.css">'
        f"</head><body><header><b>kcp-opa</b>{nav}{who}</header><main>{body}</main></body></html>\n"
    )


def nav(links: Iterable[tuple[str, str]]) -> str:
    return "".join(f'<a href="{esc(href)}">{esc(label)}</a>' for href, label in links)


def sign_in(csrf: str, message: str = "", *, sso: bool = False) -> str:
    note = f'<p class="bad" id="message">{esc(message)}</p>' if message else ""
    single = '<p><a href="/ui/sso/start" id="sso">Sign in with single sign-on</a></p><p>Or</p>' if sso else ""
    body = (
        f"<h1>Sign in</h1>{single}<p>With the bearer token the service holds a hash of for your principal. "
        "The session ends when you sign out, after its lifetime, or when the token is revoked.</p>"
        f'{note}<form method="post" action="/ui/login"><input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<label>Token <input type="password" name="token" id="token" autocomplete="off" required></label> '
        '<button type="submit" id="sign-in">Sign in</button></form>'
    )
    return page("Sign in", body)


def _cards(items: Sequence[tuple[str, str, object]]) -> str:
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card" id="n-{esc(key)}"><b>{esc(value)}</b>{esc(label)}</div>' for key, label, value in items
        )
        + "</div>"
    )


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], table_id: str) -> str:
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f'<table id="{esc(table_id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def no_ledger() -> str:
    return '<h1>Report</h1><p id="no-ledger">No ledger yet: nothing has been written to this service\'s ledger.</p>'


def _chain(summary: LedgerSummary | None) -> str:
    if summary is None:
        return '<p id="chain">No ledger yet: nothing has been written to this service\'s ledger.</p>'
    if summary.chain_ok:
        return f'<p class="ok" id="chain">Ledger chain intact: {esc(summary.chain_detail)}</p>'
    return f'<p class="bad" id="chain">Ledger chain BROKEN: {esc(summary.chain_detail)}</p>'


def dashboard(
    found: LedgerSummary | None, open_challenges: int, window: Window, controls: str = "", report: str = "/ui/report"
) -> str:
    """The live figures (the response's Refresh header reloads the page; no script); ``found`` None: no ledger yet.

    The counts are the selection's; the lists show ``window``'s page; ``controls``: the filter form and page links;
    ``report``: the report's link, with the same filters.
    """
    chain = _chain(found)
    summary = found or LedgerSummary("")
    cards = _cards(
        [
            ("decisions", "decisions", summary.decisions),
            ("redecisions", "re-decisions", len(summary.redecisions)),
            ("deny", "denied", summary.by_state.get("DENY", 0)),
            ("approved", "approved", summary.by_status.get("APPROVED", 0)),
            ("pending", "pending controls", summary.by_status.get("PENDING_CONTROLS", 0)),
            ("open-challenges", "open challenges", open_challenges),
            ("controls", "control results", len(summary.approvals)),
            ("refusals", "refusals", sum(summary.refusals.values())),
            ("receipts", "receipts", summary.receipts),
            ("executions", "executions", summary.executions),
            ("ambiguous", "ambiguous executions", len(summary.ambiguous)),
            ("unresolved-intents", "intents without an outcome", len(summary.unresolved_intents)),
        ]
    )
    by_state = _table(["state", "decisions"], summary.by_state.most_common(TOP_ROWS), "by-state")
    refusals = _table(["code", "refusals"], summary.refusals.most_common(TOP_ROWS), "refusals")
    approvals = _table(
        ["decision", "control", "actor", "issuer", "status", "latency (s)"],
        (
            [a["decision_id"], a["control"], a["actor_id"], a["issuer"], a["status"], a.get("latency_seconds")]
            for a in window.rows(summary.approvals)
        ),
        "approvals",
    )
    exceptions = _table(EXCEPTION_HEADERS, window.rows(exception_rows(summary)), "exceptions")
    decisions = _table(
        ["decision", "state", "status", "agent", "reasons"],
        (
            [
                d,
                e.get("decision"),
                e.get("authorization_status"),
                entry_agent(e),
                ", ".join(e.get("reason_codes") or []),
            ]
            for d, e in window.rows(list(summary.final.items()))
        ),
        "decisions",
    )
    return (
        f"<h1>Dashboard</h1>{chain}{controls}{cards}"
        f'<p><a href="{esc(report)}" id="report-link">The full report, with charts</a></p>'
        f"<h2>Decisions by state</h2>{by_state}<h2>Refusals by code</h2>{refusals}"
        f"<h2>Latest control results</h2>{approvals}<h2>Exceptions applied (overrides)</h2>{exceptions}"
        f"<h2>Latest decisions</h2>{decisions}"
        '<h2>Re-decisions</h2><div id="redecisions">' + redecision_tables(summary, _listed, window) + "</div>"
        '<h2>Policy versions</h2><div id="policy-versions">'
        + policy_timeline_table(summary, _listed, window)
        + "</div>"
    )


def _listed(headers: Sequence[str], rows: Iterable[Sequence[object]], *, empty: str) -> str:
    """A table for the tallies' sections (every value escaped), or what to say when it is empty."""
    listed = [list(row) for row in rows]
    return _table(headers, listed, "") if listed else f"<p>{esc(empty)}</p>" if empty else ""


def _summary_block(summary: JsonObject) -> str:
    amount, beneficiary = summary.get("amount"), summary.get("beneficiary")
    money = f"{amount.get('major')} {amount.get('currency')}" if isinstance(amount, Mapping) else "no amount"
    beneficiary = beneficiary if isinstance(beneficiary, Mapping) else {}
    rows = [
        ("Amount", money),
        ("Beneficiary", ", ".join(f"{k}: {v}" for k, v in beneficiary.items() if v is not None)),
        ("Consequence", summary.get("consequence")),
        ("Fees", summary.get("fees")),
        ("Decision", f"{summary.get('decision')} (risk {summary.get('risk_level')})"),
        ("Reasons", "; ".join(str(r) for r in items(summary.get("reasons")))),
        ("Agent", summary.get("agent_id")),
        ("Subject", summary.get("subject_id")),
    ]
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<p class="amount">{esc(money)}</p><table class="summary">{cells}</table>'


def inbox(challenges: Sequence[JsonObject], csrf: str) -> str:
    """The challenges addressed to the signed-in principal, each with its answer form."""
    if not challenges:
        return '<h1>Approvals inbox</h1><p id="empty">No open challenge is addressed to you.</p>'
    items = []
    for challenge in challenges:
        cid = str(challenge.get("challenge_id"))
        items.append(
            f'<section class="challenge" id="c-{esc(cid)}"><h2>{esc(challenge.get("control"))}</h2>'
            f"<p>Decision <code>{esc(challenge.get('decision_id'))}</code>, action hash "
            f"<code>{esc(challenge.get('action_hash'))}</code>; expires {esc(challenge.get('expires_at'))}.</p>"
            + _summary_block(mapping(challenge.get("summary")))
            + f'<form method="post" action="/ui/challenges/{esc(cid)}/answer">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            '<p><label>Evidence reference <input type="text" name="evidence_reference" required '
            'placeholder="ticket, call or document reference"></label></p>'
            '<button type="submit" name="status" value="PASSED" class="pass">Approve (PASSED)</button>'
            '<button type="submit" name="status" value="FAILED" class="fail">Refuse (FAILED)</button></form></section>'
        )
    return "<h1>Approvals inbox</h1>" + "".join(items)


def answered(result: JsonObject | None, error: JsonObject | None) -> str:
    if error is not None:
        return (
            f'<h1>Not recorded</h1><p class="bad" id="outcome">{esc(error.get("code"))}: {esc(error.get("error"))}</p>'
            '<p><a href="/ui/inbox">Back to the inbox</a></p>'
        )
    decision = mapping((result or {}).get("decision"))
    missing = ", ".join(strings(decision.get("missing_controls"))) or "none"
    return (
        f'<h1>Recorded</h1><p class="ok" id="outcome">{esc((result or {}).get("control"))}: decision '
        f'<code>{esc(decision.get("decision_id"))}</code> is now <b id="status">'
        f"{esc(decision.get('authorization_status'))}</b>; missing controls: {esc(missing)}.</p>"
        '<p><a href="/ui/inbox">Back to the inbox</a></p>'
    )


def nothing_here(principal: JsonObject, *, reads: bool, answers: bool) -> str:
    """Why this principal has no such view, and which view its role does have (none for an agent)."""
    who = f"{esc(principal.get('id'))} ({esc(principal.get('kind'))})"
    if reads and not answers:
        return (
            f'<h1>No inbox</h1><p id="no-inbox">{who} answers no control challenges, so it has no inbox: its role'
            ' reads the ledger. See the <a href="/ui/dashboard">dashboard</a> and the'
            ' <a href="/ui/report">report</a>.</p>'
        )
    if answers and not reads:
        return (
            f'<h1>No dashboard</h1><p id="no-dashboard">{who} does not read the ledger, so it has no dashboard or'
            " report: its role answers the control challenges addressed to it in the"
            ' <a href="/ui/inbox">inbox</a>.</p>'
        )
    if principal.get("kind") == "agent":
        return (
            f'<h1>No views</h1><p id="no-views">{who} has no dashboard and no inbox: an agent decides and opens'
            " challenges through the API; it never answers them.</p>"
        )
    return (
        f'<h1>No views</h1><p id="no-views">{who} has no dashboard and no inbox: its roles neither read the'
        " ledger nor answer control challenges.</p>"
    )


def unavailable(error: JsonObject) -> str:
    """The page for a store or ledger outage (503): a fault to retry, never a refusal or an empty inbox."""
    return (
        f'<h1>Unavailable</h1><p class="bad" id="outcome">{esc(error.get("code"))}: the gate\'s store or ledger'
        " cannot be reached right now; nothing was recorded. Try again shortly.</p>"
    )
