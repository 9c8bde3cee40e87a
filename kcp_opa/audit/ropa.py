"""GDPR Article 30 records of processing, built from KCP manifests.

One record per unit that declares personal-data categories (or declares none at all: such a
unit gets "not declared" values and a warning, never a silent gap). Purpose from ``intent``,
legal basis with its Article 6 (or 9) label, recipients from ``access`` and ``audience``,
residency and whether it implies a transfer outside the EU/EEA, risk from sensitivity and
special categories, security measures from restrictions, trust and delegation; and the
exceptions (signed waivers) in force that may apply to the unit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TypedDict

from kcp_opa.core.jsonread import JsonObject, items, mapping
from kcp_opa.declare.effective import DEFAULT, EffectiveUnit, effective_units
from kcp_opa.declare.exceptionfile import GrantedException, epoch
from kcp_opa.declare.manifest import Manifest
from kcp_opa.declare.regions import residency_places

NOT_DECLARED = "not declared"
PERSONAL_CATEGORIES = frozenset(
    {"personal", "contact", "financial", "health", "biometric", "genetic", "location", "special_category", "children"}
)
SPECIAL_CATEGORIES = frozenset({"health", "biometric", "genetic", "special_category"})
#: Places inside the EU/EEA (the region table's EEA: its countries, the EU and the EEA itself);
#: anything else (a country outside it, "global") is a third-country transfer.
EEA = frozenset(residency_places(["EEA"]))
ARTICLE_6 = {
    "consent": "Art. 6(1)(a) consent",
    "explicit_consent": "Art. 9(2)(a) explicit consent",
    "contract": "Art. 6(1)(b) performance of a contract",
    "legal_obligation": "Art. 6(1)(c) legal obligation",
    "vital_interests": "Art. 6(1)(d) vital interests",
    "public_task": "Art. 6(1)(e) public task",
    "legitimate_interests": "Art. 6(1)(f) legitimate interests",
}
RISK_BY_SENSITIVITY = {"public": "low", "internal": "low", "confidential": "medium", "restricted": "high"}
#: The Article 9(2) conditions, by the value of ``compliance.article_9_condition``; special
#: categories need one on top of the Art. 6 basis. ``legal_basis: explicit_consent`` carries (a).
ARTICLE_9 = {
    "explicit_consent": "Art. 9(2)(a) explicit consent",
    "employment_social_security": "Art. 9(2)(b) employment, social security and social protection law",
    "vital_interests": "Art. 9(2)(c) vital interests, data subject incapable of consent",
    "not_for_profit_body": "Art. 9(2)(d) legitimate activities of a not-for-profit body",
    "made_public_by_data_subject": "Art. 9(2)(e) manifestly made public by the data subject",
    "legal_claims": "Art. 9(2)(f) legal claims or judicial acts",
    "substantial_public_interest": "Art. 9(2)(g) substantial public interest",
    "health_or_social_care": "Art. 9(2)(h) preventive or occupational medicine, health or social care",
    "public_health": "Art. 9(2)(i) public health",
    "archiving_research_statistics": "Art. 9(2)(j) archiving, scientific or historical research, statistics",
}
NOT_APPLICABLE = "not applicable (no special categories)"


class ActiveException(TypedDict):
    id: str
    scope: dict[str, str]
    waives: list[str]
    grantor: str
    ticket: str
    reason: str
    expires_at: str


class Source(TypedDict):
    manifest: str
    path: object
    validated: object


class Record(TypedDict):
    """One record of processing; a value the manifest did not type (its purpose, residency...) is ``object``."""

    activity: str
    controller: object
    purpose: object
    personal_data_categories: list[str] | str
    special_categories: bool
    legal_basis: object
    legal_basis_article: str
    article_9_condition: str
    recipients: list[str]
    data_residency: object
    third_country_transfer: bool | str
    risk: str
    security_measures: list[str]
    regulations: object
    audit_logged: bool
    active_exceptions: list[ActiveException]
    source: Source


class Ropa(TypedDict):
    records: list[Record]
    summary: dict[str, int | list[str]]
    warnings: list[str]


def _recipients(effective: EffectiveUnit) -> list[str]:
    """Who may receive the data, from ``access``; an access left to KCP's default is not declared.

    KCP defaults ``access`` to public, but a record of processing that says "anyone" for a unit
    whose author never said so would misstate it: the default is reported as such.
    """
    unit = effective.to_data()
    if effective.fields["access"].source == DEFAULT:
        return [f"{NOT_DECLARED} (access left to the KCP default, public)", *_audience(unit)]
    access = unit.get("access")
    who = {
        "public": "anyone (public access)",
        "authenticated": "authenticated users",
        "restricted": f"restricted ({unit.get('auth_scope') or 'scope not declared'})",
    }.get(str(access), NOT_DECLARED)
    return [who, *_audience(unit)]


def _audience(unit: JsonObject) -> list[str]:
    return [f"audience: {a}" for a in items(unit.get("audience"))]


def _measures(unit: JsonObject) -> list[str]:
    compliance, trust = mapping(unit.get("compliance")), mapping(unit.get("trust"))
    delegation = mapping(unit.get("delegation"))
    measures = [f"restriction: {r}" for r in items(compliance.get("restrictions"))]
    if trust.get("agent_must_log"):
        measures.append("every agent access is logged (trust.audit.agent_must_log)")
    if trust.get("require_trace_context"):
        measures.append("W3C trace context required on every access")
    if mapping(delegation.get("human_in_the_loop")).get("required"):
        measures.append("human approval before use (delegation.human_in_the_loop)")
    if isinstance(delegation.get("max_depth"), int):
        measures.append(f"agent delegation limited to depth {delegation['max_depth']}")
    if compliance.get("declared_fields"):
        measures.append("field-level minimisation (declared_fields enforced by the gate)")
    return measures or [NOT_DECLARED]


def active_exceptions(held: Sequence[GrantedException], activity: str, now: dt.datetime) -> list[ActiveException]:
    """The exceptions in force at ``now`` that may apply to ``activity`` (``project/unit``): those
    scoped to that unit and those with no unit in their scope (a tenant's, an agent's)."""
    moment = int(now.timestamp())
    return [
        {
            "id": item.id,
            "scope": dict(item.scope),
            "waives": list(item.waives),
            "grantor": item.grantor,
            "ticket": item.ticket,
            "reason": item.reason,
            "expires_at": item.expires_at,
        }
        for item in held
        if epoch(item.issued_at) <= moment < epoch(item.expires_at) and item.scope.get("unit", activity) == activity
    ]


def build_ropa(
    manifests: Sequence[Manifest],
    exceptions: Sequence[GrantedException] = (),
    *,
    now: dt.datetime | None = None,
) -> Ropa:
    """The records, a summary and the warnings for every unit that lacks what a record needs.

    ``exceptions``: the waivers granted (kind kcp-opa/exceptions); each record lists those in
    force at ``now`` (default: the current time) that may apply to its unit.
    """
    moment = now or dt.datetime.now(dt.UTC)
    records: list[Record] = []
    warnings: list[str] = []
    without_personal: list[str] = []
    for manifest in manifests:
        for effective in effective_units(manifest):
            unit = effective.to_data()
            compliance = unit.get("compliance") or {}
            categories = compliance.get("data_categories")
            where = f"{manifest.project}/{unit['id']}"
            if not categories:
                warnings.append(f"{where}: no data_categories declared; recorded as '{NOT_DECLARED}'")
                personal: list[str] | str = NOT_DECLARED
            else:
                personal = sorted(set(categories) & PERSONAL_CATEGORIES)
                if not personal:
                    without_personal.append(where)
                    continue
            basis = compliance.get("legal_basis")
            if not basis:
                warnings.append(f"{where}: no legal_basis declared")
            residency = compliance.get("data_residency")
            if residency is None:
                warnings.append(f"{where}: no data_residency declared; third-country transfer unknown")
            transfer: bool | str = NOT_DECLARED if residency is None else any(r not in EEA for r in residency)
            special = isinstance(personal, list) and bool(set(personal) & SPECIAL_CATEGORIES)
            risk = "high" if special else RISK_BY_SENSITIVITY.get(str(unit.get("sensitivity")), NOT_DECLARED)
            condition = compliance.get("article_9_condition") or (basis if basis == "explicit_consent" else None)
            article_9 = ARTICLE_9.get(str(condition), NOT_DECLARED) if special else NOT_APPLICABLE
            if article_9 == NOT_DECLARED:
                warnings.append(
                    f"{where}: special categories ({', '.join(sorted(set(personal) & SPECIAL_CATEGORIES))}) under "
                    f"legal basis {basis or NOT_DECLARED!r} with no Article 9(2) condition "
                    "(declare compliance.article_9_condition, e.g. employment_social_security for 9(2)(b))"
                )
            controller = ((unit.get("trust") or {}).get("provenance") or {}).get("publisher")
            if not controller:
                warnings.append(f"{where}: no controller: declare trust.provenance.publisher in the manifest")
            if effective.fields["access"].source == DEFAULT:
                warnings.append(f"{where}: access not declared; recipients recorded as '{NOT_DECLARED}'")
            records.append(
                {
                    "activity": where,
                    "controller": controller or NOT_DECLARED,
                    "purpose": unit.get("intent") or NOT_DECLARED,
                    "personal_data_categories": personal,
                    "special_categories": special,
                    "legal_basis": basis or NOT_DECLARED,
                    "legal_basis_article": ARTICLE_6.get(str(basis), NOT_DECLARED),
                    "article_9_condition": article_9,
                    "recipients": _recipients(effective),
                    "data_residency": residency if residency is not None else NOT_DECLARED,
                    "third_country_transfer": transfer,
                    "risk": risk,
                    "security_measures": _measures(unit),
                    "regulations": compliance.get("regulations") or [],
                    "audit_logged": bool((unit.get("trust") or {}).get("agent_must_log"))
                    or "audit-required" in (compliance.get("restrictions") or []),
                    "active_exceptions": active_exceptions(exceptions, where, moment),
                    "source": {"manifest": manifest.file, "path": unit.get("path"), "validated": unit.get("validated")},
                }
            )
    summary: dict[str, int | list[str]] = {
        "activities": len(records),
        "high_risk": sum(1 for r in records if r["risk"] == "high"),
        "third_country_transfers": sum(1 for r in records if r["third_country_transfer"] is True),
        "audit_logged": sum(1 for r in records if r["audit_logged"]),
        "with_active_exceptions": sum(1 for r in records if r["active_exceptions"]),
        "not_declared": sum(1 for r in records if NOT_DECLARED in (r["personal_data_categories"], r["legal_basis"])),
        "units_without_personal_data": without_personal,
    }
    return {"records": records, "summary": summary, "warnings": warnings}


def to_markdown(ropa: Ropa) -> str:
    summary = ropa["summary"]
    lines = [
        "# Records of processing activities (GDPR Art. 30)",
        "",
        f"{summary['activities']} activities; {summary['high_risk']} high risk; "
        f"{summary['third_country_transfers']} with third-country transfers; {summary['audit_logged']} audit-logged.",
        "",
    ]
    for warning in ropa["warnings"]:
        lines.append(f"> warning: {warning}")
    for record in ropa["records"]:
        categories = record["personal_data_categories"]
        lines += [
            "",
            f"## {record['activity']}",
            "",
            "| field | value |",
            "|---|---|",
            f"| controller | {record['controller']} |",
            f"| purpose | {record['purpose']} |",
            f"| personal data | {', '.join(categories) if isinstance(categories, list) else categories} |",
            f"| legal basis | {record['legal_basis']} ({record['legal_basis_article']}) |",
            f"| Article 9 condition | {record['article_9_condition']} |",
            f"| recipients | {'; '.join(record['recipients'])} |",
            f"| residency | {', '.join(record['data_residency']) if isinstance(record['data_residency'], list) else record['data_residency']} |",  # noqa: E501
            f"| third-country transfer | {_shown(record['third_country_transfer'])} |",
            f"| risk | {record['risk']} |",
            f"| security measures | {'; '.join(record['security_measures'])} |",
            f"| active exceptions | {'; '.join(_exception(e) for e in record['active_exceptions']) or 'none'} |",
        ]
    return "\n".join(lines) + "\n"


def to_text(ropa: Ropa) -> str:
    """Plain text for a terminal or a ticket: one block per record, every value whole (never cut)."""
    summary = ropa["summary"]
    lines = [
        f"Records of processing activities (GDPR Art. 30): {summary['activities']} activities, "
        f"{summary['high_risk']} high risk, {summary['third_country_transfers']} with third-country transfers, "
        f"{summary['audit_logged']} audit-logged"
    ]
    lines += [f"warning: {warning}" for warning in ropa["warnings"]]
    for record in ropa["records"]:
        lines += ["", record["activity"]]
        for key, value in record.items():
            if key in ("activity", "source"):
                continue
            if key == "active_exceptions":
                value = [_exception(e) for e in record["active_exceptions"]] or ["none"]
            shown = "; ".join(_shown(v) for v in value) if isinstance(value, list) else _shown(value)
            lines.append(f"  {key.replace('_', ' '):<26} {shown}")
        lines.append(f"  {'source':<26} {record['source']['manifest']}: {record['source']['path']}")
    return "\n".join(lines) + "\n"


def _exception(item: ActiveException) -> str:
    """One waiver as a record of processing states it: what, for whom, by whom, until when."""
    scope = ", ".join(f"{k}={v}" for k, v in sorted(item["scope"].items()))
    return (
        f"{item['id']} waives {', '.join(item['waives'])} for {scope}, granted by {item['grantor']}"
        f" ({item['ticket']}) until {item['expires_at']}"
    )


def _shown(value: object) -> str:
    """A value as a reader writes it: yes/no, never Python's True/False."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
