"""What a ledger says, counted: the figures behind `audit report` and the service's dashboard.

A decision is counted once, in its final state (the last entry for its id: a payment that went
PENDING_CONTROLS -> APPROVED counts as approved); the over-time series counts each decision at
its first entry. A re-decision (the desk's at a control answer, a reload or a receipt, the
executor's at execution under an id of its own) is counted as a re-decision of the decision it
names (``kcp_opa.audit.tallies``), never as a decision. Approvals are the accepted control
results, with who acted, the issuer that signed and the latency from the decision's first entry.
Refusals are the ``failure`` entries by code, one refusal once however many layers recorded
it; ambiguous executions are the executor's ``execution_ambiguous`` refusals; engine
divergences are decision entries that kept both engines' answers. An execution is its
``intent`` and the outcome naming it (``intent_seq``), counted once; an intent with no outcome
(the side effect ran, or was about to, and the ledger never got its outcome) is listed as
unresolved until an outcome or an ``executions reconcile`` entry for its key follows it.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from kcp_opa.audit.auditor import entry_agent, entry_decision_id, entry_principal
from kcp_opa.audit.selection import Selection
from kcp_opa.audit.tallies import (
    OpenIntents,
    PolicyTimeline,
    RefusalRow,
    Refusals,
    TimelineRow,
    decision_model,
    redecision_of,
)
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping
from kcp_opa.core.principalids import IdentityError
from kcp_opa.core.signing import Key, Keyring
from kcp_opa.declare.trust import Principal, TrustRegistry
from kcp_opa.trail.ledger import read_entries, verify_ledger

OVERRIDE_MARKERS = ("override", "exception")


class ExceptionRow(TypedDict):
    id: str
    waives: list[str]
    grantor: str
    ticket: str
    expires_at: str
    scope: dict[str, object]  # as the archived input held it
    uses: NotRequired[int]  # set by AppliedExceptions.rows


class ApprovalRow(TypedDict):
    seq: object
    decision_id: str
    control: str
    actor_id: str
    actor_type: str
    issuer: str
    status: str
    timestamp: str
    latency_seconds: NotRequired[float | None]  # these two are set once the whole ledger is read
    roles: NotRequired[list[str]]


class AppliedExceptions:
    """The exceptions decisions applied, from the ledger: per exception id what it waived, for
    which scope (the exception as the archived input held it), granted by whom, until when, and
    how many decisions applied it (an ``exception_applied`` reason; one decision once, however
    many entries record it)."""

    def __init__(self) -> None:
        self._rows: dict[str, ExceptionRow] = {}
        self._decisions: dict[str, set[str]] = {}

    def add(self, entry: JsonObject) -> None:
        if entry.get("type") != "decision":
            return
        given = mapping(mapping(entry.get("input")).get("context")).get("exceptions")
        held = {str(e.get("id")): e for e in given if isinstance(e, Mapping)} if isinstance(given, list) else {}
        listed = mapping(entry.get("result")).get("reasons")
        reasons = [r for r in listed if isinstance(r, Mapping)] if isinstance(listed, list) else []
        for reason in reasons:
            if reason.get("code") != "exception_applied":
                continue
            found = str(reason.get("rule", "")).removeprefix("kcp.exceptions.")
            granted = mapping(held.get(found))  # the exception as the gate verified and passed it
            row = self._rows.setdefault(
                found, {"id": found, "waives": [], "grantor": "", "ticket": "", "expires_at": "", "scope": {}}
            )
            waived = {str(r.get("code")) for r in reasons if r.get("waived_by") == found}
            row["waives"] = sorted(waived | set(row["waives"]))
            row["grantor"] = str(granted.get("grantor") or row["grantor"])
            row["ticket"] = str(granted.get("ticket") or row["ticket"])
            row["expires_at"] = str(granted.get("expires_at") or row["expires_at"])
            row["scope"] = dict(mapping(granted.get("scope"))) or row["scope"]
            link = redecision_of(entry)  # a re-decision (at execution, under its own id) is its decision's use
            decision = link[0] if link is not None else entry.get("decision_id")
            self._decisions.setdefault(found, set()).add(str(decision or entry.get("seq")))

    def uses(self, exception_id: str) -> int:
        return len(self._decisions.get(exception_id, ()))

    def rows(self) -> list[ExceptionRow]:
        """One row per exception applied, by id: id, scope, waives, grantor, ticket, expires_at, uses."""
        return [{**self._rows[i], "uses": self.uses(i)} for i in sorted(self._rows)]


EXCEPTION_HEADERS = ["exception", "scope", "codes waived", "grantor", "ticket", "expires_at", "uses"]


def exception_rows(summary: LedgerSummary) -> list[list[object]]:
    """The exceptions applied as the report and the dashboard show them (EXCEPTION_HEADERS);
    the pages escape every value (an exception's text is whatever it was signed with)."""
    return [
        [
            e["id"],
            ", ".join(f"{k}={v}" for k, v in sorted(e["scope"].items())),
            ", ".join(e["waives"]),
            e["grantor"],
            e["ticket"],
            e["expires_at"],
            e["uses"],
        ]
        for e in summary.exceptions
    ]


def _time(text: object) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class LedgerSummary:
    """The counts one report or dashboard shows; every value comes from the ledger's entries."""

    ledger: str
    chain_ok: bool = False
    chain_detail: str = ""
    entries: int = 0
    decisions: int = 0
    by_state: Counter[str] = field(default_factory=Counter)
    by_status: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    by_agent: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)
    by_unit: Counter[str] = field(default_factory=Counter)
    by_tenant: Counter[str] = field(default_factory=Counter)
    over_time: dict[str, Counter[str]] = field(default_factory=dict)
    bucket: str = "day"
    approvals: list[ApprovalRow] = field(default_factory=list)
    overrides: list[ApprovalRow] = field(default_factory=list)
    #: The exceptions decisions applied (AppliedExceptions.rows): overrides granted as data.
    exceptions: list[ExceptionRow] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    refusal_rows: list[RefusalRow] = field(default_factory=list)
    ambiguous: list[JsonDict] = field(default_factory=list)
    #: Execution intents no outcome names (OpenIntents.rows): side effects the ledger has no outcome for.
    unresolved_intents: list[JsonDict] = field(default_factory=list)
    divergences: list[JsonDict] = field(default_factory=list)
    #: Re-decisions, each linked to its original decision (``original_decision_id``), by step.
    redecisions: list[JsonDict] = field(default_factory=list)
    redecisions_by_step: Counter[str] = field(default_factory=Counter)
    #: The bundle revisions the entries name, first seen to last seen (PolicyTimeline.rows).
    policy_timeline: list[TimelineRow] = field(default_factory=list)
    receipts: int = 0
    executions: int = 0
    #: Each decision's last entry as read (service/uipages.py joins its reason_codes unchecked).
    final: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> JsonDict:
        return {
            "ledger": self.ledger,
            "chain": {"ok": self.chain_ok, "detail": self.chain_detail},
            "entries": self.entries,
            "decisions": self.decisions,
            "by_state": dict(self.by_state),
            "by_status": dict(self.by_status),
            "by_reason": dict(self.by_reason),
            "by_agent": dict(self.by_agent),
            "by_model": dict(self.by_model),
            "by_unit": dict(self.by_unit),
            "by_tenant": dict(self.by_tenant),
            "over_time": {bucket: dict(counts) for bucket, counts in self.over_time.items()},
            "bucket": self.bucket,
            "approvals": self.approvals,
            "overrides": self.overrides,
            "exceptions": self.exceptions,
            "refusals": dict(self.refusals),
            "ambiguous_executions": self.ambiguous,
            "unresolved_intents": self.unresolved_intents,
            "engine_divergences": self.divergences,
            "redecisions": self.redecisions,
            "redecisions_by_step": dict(self.redecisions_by_step),
            "policy_timeline": self.policy_timeline,
            "receipts": self.receipts,
            "executions": self.executions,
        }


def _bucket_of(stamps: Iterable[dt.datetime]) -> str:
    """Month buckets for a year's ledger, days for a season's, hours for a day's, minutes for a demo's:
    a chart of at most about a hundred bars, however long the ledger."""
    times = sorted(stamps)
    if not times:
        return "day"
    span = times[-1] - times[0]
    for bucket, longer_than in (("month", 92 * 24), ("day", 48), ("hour", 2)):
        if span > dt.timedelta(hours=longer_than):
            return bucket
    return "minute"


def _label(moment: dt.datetime, bucket: str) -> str:
    return moment.strftime(
        {"month": "%Y-%m", "day": "%Y-%m-%d", "hour": "%Y-%m-%d %H:00", "minute": "%m-%d %H:%M"}[bucket]
    )


def _line(line: int) -> str:
    return f"line {line}"


def summarize(
    ledger: str | Path,
    *,
    registry: TrustRegistry | None = None,
    position: Callable[[int], str] = _line,
    writer: Key | None = None,
    selection: Selection | None = None,
) -> LedgerSummary:
    """Count a ledger (verified first: a broken chain is reported, and still counted, never hidden).

    With ``registry``, each control result names its actor's roles there (approver and role);
    ``position`` names where a problem is (a database dump's line is named by its seq); with
    ``writer`` (the ledger's writer key) every entry must carry its signature, as ``audit verify
    --keyring --writer`` checks. With ``selection`` only its period and decisions are counted (the
    chain is verified whole).
    """
    kid = writer.kid if writer is not None else None
    keyring = Keyring({writer.kid: writer}) if writer is not None else None
    report = verify_ledger(ledger, keyring=keyring, writer=kid)
    summary = LedgerSummary(str(ledger), chain_ok=report.ok)
    if report.ok:
        signed = f", every entry signed by writer {kid}" if report.authenticated else ""
        summary.chain_detail = f"{report.entries} entries, chain intact, head {report.head}{signed}"
    else:
        problem = report.problems[0]
        summary.chain_detail = f"broken at {position(problem.line)}: {problem.message}"
    first_seen: dict[str, dt.datetime] = {}
    first_state: dict[str, str] = {}
    applied, intents, refusals, timeline = AppliedExceptions(), OpenIntents(), Refusals(), PolicyTimeline()
    matching = selection.matching(ledger) if selection is not None else None
    for _, entry in read_entries(ledger):
        if selection is not None and not selection.keeps(entry, matching):
            continue
        summary.entries += 1
        _count(summary, entry, first_seen, first_state, refusals)
        applied.add(entry)
        intents.add(entry)
        timeline.add(entry)
    summary.exceptions = applied.rows()
    summary.unresolved_intents = intents.rows()
    summary.refusals, summary.refusal_rows = refusals.by_code, refusals.rows
    summary.policy_timeline = timeline.rows()
    summary.decisions = len(summary.final)
    for entry in summary.final.values():
        summary.by_state[str(entry.get("decision"))] += 1
        summary.by_status[str(entry.get("authorization_status"))] += 1
        summary.by_reason.update(str(code) for code in items(entry.get("reason_codes")))
        summary.by_agent[entry_agent(entry)] += 1
        summary.by_model[decision_model(entry)] += 1
        summary.by_unit[str(entry.get("kcp_unit_applied") or "(none)")] += 1
        tenant = mapping(mapping(entry.get("input")).get("action")).get("tenant_id")
        summary.by_tenant[str(tenant or "(none)")] += 1
    summary.bucket = _bucket_of(first_seen.values())
    for decision_id, moment in sorted(first_seen.items(), key=lambda item: item[1]):
        label = _label(moment, summary.bucket)
        final_state = str(summary.final[decision_id].get("decision"))
        summary.over_time.setdefault(label, Counter())[final_state or first_state[decision_id]] += 1
    for approval in summary.approvals:
        start, done = first_seen.get(approval["decision_id"]), _time(approval["timestamp"])
        approval["latency_seconds"] = round((done - start).total_seconds(), 3) if start and done else None
        principal = _principal(registry, approval["actor_id"]) if registry is not None else None
        approval["roles"] = list(principal.roles) if principal is not None else []
    return summary


def _principal(registry: TrustRegistry, actor: str) -> Principal | None:
    try:
        return registry.principal(actor)
    except IdentityError:
        return None


def _redecided(summary: LedgerSummary, entry: JsonObject, decision_id: str) -> bool:
    """Count ``entry`` as a re-decision when it is one (True); the desk's, under the decision's own id,
    moves that decision to its new state. A ledger written before re-decisions were linked repeats
    the id: that is a re-decision too (step ``unlinked``)."""
    link = redecision_of(entry) or ((decision_id, "unlinked") if decision_id in summary.final else None)
    if link is None:
        return False
    original, step = link
    summary.redecisions_by_step[step] += 1
    summary.redecisions.append(
        {
            "seq": entry.get("seq"),
            "decision_id": decision_id,
            "original_decision_id": original,
            "step": step,
            "decision": str(entry.get("decision")),
            "authorization_status": str(entry.get("authorization_status")),
            "revision": str(mapping(mapping(entry.get("bundles")).get("kcp-opa")).get("revision") or ""),
            "timestamp": str(entry.get("timestamp")),
        }
    )
    if original == decision_id and decision_id in summary.final:
        summary.final[decision_id] = dict(entry)
    return True


def _count(
    summary: LedgerSummary,
    entry: JsonObject,
    first_seen: dict[str, dt.datetime],
    first_state: dict[str, str],
    refusals: Refusals,
) -> None:
    kind = entry.get("type")
    decision_id = entry_decision_id(entry) or ""
    if kind == "decision" and decision_id:
        if not _redecided(summary, entry, decision_id):
            moment = _time(entry.get("timestamp"))
            if moment is not None and decision_id not in first_seen:
                first_seen[decision_id] = moment
                first_state[decision_id] = str(entry.get("decision"))
            summary.final[decision_id] = dict(entry)
        if "engine_results" in entry:
            summary.divergences.append(
                {
                    "seq": entry.get("seq"),
                    "decision_id": decision_id,
                    "engines": sorted(mapping(entry["engine_results"])),
                }
            )
    elif kind == "control":
        evidence = mapping(entry.get("evidence"))
        control = str(evidence.get("control"))
        row: ApprovalRow = {
            "seq": entry.get("seq"),
            "decision_id": decision_id,
            "control": control,
            "actor_id": str(evidence.get("actor_id")),
            "actor_type": str(evidence.get("actor_type")),
            "issuer": str(evidence.get("issuer")),
            "status": str(evidence.get("status")),
            "timestamp": str(entry.get("timestamp")),
        }
        summary.approvals.append(row)
        if any(marker in control for marker in OVERRIDE_MARKERS):
            summary.overrides.append(row)
    elif kind == "failure":
        code = str(entry.get("code"))
        refused: RefusalRow = {
            "seq": entry.get("seq"),
            "code": code,
            "principal": entry_principal(entry) or str(entry.get("agent_id") or ""),
            "decision_id": decision_id,
            "message": str(entry.get("message") or ""),
            "timestamp": str(entry.get("timestamp")),
        }
        if refusals.add(refused, entry) and code == "execution_ambiguous":
            summary.ambiguous.append({**refused, "idempotency_key": str(entry.get("idempotency_key") or "")})
    elif kind == "receipt":
        summary.receipts += 1
    elif kind == "execution":
        summary.executions += 1


def entries_by_decision(ledger: str | Path, only: Iterable[str] | None = None) -> dict[str, list[JsonDict]]:
    """Every entry that belongs to a decision (its id, or its evidence's; a re-decision's, the decision it
    re-decides), grouped in chain order; with ``only``, of those decisions alone (a page's)."""
    grouped: dict[str, list[JsonDict]] = {}
    wanted = set(only) if only is not None else None
    for _, entry in read_entries(ledger):
        link = redecision_of(entry)
        decision_id = link[0] if link is not None else entry_decision_id(entry)
        if decision_id and (wanted is None or decision_id in wanted):
            grouped.setdefault(decision_id, []).append(dict(entry))
    return grouped
