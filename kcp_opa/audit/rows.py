"""One short row per ledger entry, for people reading `audit query` and the HTML report.

Each entry type says different things: a decision its state and reasons, a control result the
control, who acted and which issuer signed, a refusal its code and the principal refused. The
row keeps the decision id whole (an auditor copies it into `audit case`); everything else is
short enough for a terminal, and the JSON output keeps every field.
"""

from __future__ import annotations

from kcp_opa.audit.auditor import entry_agent, entry_decision_id, entry_principal
from kcp_opa.core.jsonread import JsonObject, mapping

COLUMNS = ("seq", "time", "type", "decision_id", "who", "what", "detail")


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def row(entry: JsonObject) -> dict[str, str]:
    """The seven columns of one entry (``COLUMNS``), all strings."""
    kind = _text(entry.get("type"))
    evidence = mapping(entry.get("evidence"))
    who, what, detail = _text(entry.get("agent_id")), "", ""
    if kind == "decision":
        who = entry_agent(entry)
        what = f"{_text(entry.get('decision'))}/{_text(entry.get('authorization_status'))}"
        parts = [", ".join(_strings(entry.get("reason_codes")))]
        parts += [f"unit {entry['kcp_unit_applied']}"] if entry.get("kcp_unit_applied") else []
        parts += [f"model {entry['model']}"] if entry.get("model") else []
        detail = "; ".join(p for p in parts if p)
    elif kind == "control":
        who = _text(evidence.get("actor_id"))
        what = f"{_text(evidence.get('control'))} {_text(evidence.get('status'))}".strip()
        missing = _strings(entry.get("missing_controls"))
        detail = f"issuer {_text(evidence.get('issuer'))}; " + (
            f"missing {', '.join(missing)}" if missing else f"-> {_text(entry.get('authorization_status'))}"
        )
    elif kind == "failure":
        who = entry_principal(entry) or _text(evidence.get("actor_id")) or who or "(no principal)"
        what = _text(entry.get("code"))
        message, control = _text(entry.get("message")), _text(evidence.get("control"))
        detail = message if not control or message.startswith(control) else f"{control}: {message}"
    elif kind == "receipt":
        who = ", ".join(_strings(entry.get("approver_ids"))) or who
        what = _text(entry.get("receipt_id"))
        kid, expires = mapping(entry.get("signature")).get("kid"), entry.get("expires_at")
        detail = "; ".join([*([f"kid {kid}"] if kid else []), *([f"expires {expires}"] if expires else [])])
    elif kind == "intent":
        what = _text(entry.get("idempotency_key"))
        detail = f"receipt {_text(entry.get('receipt_id'))}; about to run"
    elif kind == "execution":
        what = _text(entry.get("idempotency_key"))
        detail = f"receipt {_text(entry.get('receipt_id'))}" + ("; replayed" if entry.get("replayed") else "")
        detail += f"; intent seq {entry['intent_seq']}" if entry.get("intent_seq") else ""
    elif kind == "note":
        who = entry_principal(entry) or who
        what = _text(entry.get("note"))
        detail = ", ".join(f"{k}={v}" for k, v in sorted(mapping(entry.get("detail")).items()))
    else:
        what = _text(entry.get("code") or entry.get("receipt_id"))
    return {
        "seq": _text(entry.get("seq")),
        "time": _text(entry.get("timestamp"))[5:19].replace("T", " "),
        "type": kind,
        "decision_id": entry_decision_id(entry) or "",
        "who": who,
        "what": what,
        "detail": detail,
    }
