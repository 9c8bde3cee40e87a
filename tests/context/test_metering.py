"""Spend attestations of metering issuers (kcp_opa/context/metering.py): what the context stage
verifies and keeps, with real registry entries and real Ed25519 signatures."""

from __future__ import annotations

import datetime as dt
from typing import Any

from trustkit import issuer_key, registry

from kcp_opa.context import METERED_SPEND, ContextSources, SignedAttestations, build_context, sign_fact, sign_spend

NOW = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
ACTION = {"tenant_id": "tenant_demo", "agent_id": "agent_payments_001", "action_type": "payment", "subject_id": "u1"}
FIELDS = {
    "budget": "tenant_daily_usd",
    "subject": "tenant_demo",
    "amount_minor": 1200,
    "currency": "USD",
    "period_start": "2026-11-29T08:00:00Z",
    "period_end": "2026-11-29T09:00:00Z",
    "issued_at": "2026-11-29T09:01:00Z",
    "expires_at": "2026-11-29T11:00:00Z",
}


def spend(**changes: Any) -> dict[str, Any]:
    return sign_spend({**FIELDS, **changes}, "metering-service", issuer_key("metering-service"))


def built(items: list[Any]) -> dict[str, Any]:
    sources = ContextSources(attestations=None, metering=SignedAttestations(registry(), None, items))
    return build_context(sources, ACTION, principal=None, action_hash="sha256:00", now=NOW)


def test_a_verified_spend_is_kept_with_its_times_class_and_source() -> None:
    context = built([spend()])
    assert context["metering"] == [
        {
            "budget": "tenant_daily_usd",
            "subject": "tenant_demo",
            "amount_minor": 1200,
            "currency": "USD",
            "period_start_epoch_seconds": 1795939200,
            "period_end_epoch_seconds": 1795942800,
            "issued_epoch_seconds": 1795942860,
            "expires_epoch_seconds": 1795950000,
            "class": "attested",
            "source": "attestation:metering-service/metering-service-ed25519-test",
        }
    ]
    assert "attestations_refused" not in context
    assert built([])["metering"] == []  # a source, nothing attested: an empty list (not absent)


def test_spends_of_other_subjects_are_not_this_decisions_business() -> None:
    context = built([spend(subject="tenant_other"), spend(subject="agent_payments_001"), spend(subject="payment")])
    assert sorted(m["subject"] for m in context["metering"]) == ["agent_payments_001", "payment"]


def test_a_changed_amount_breaks_the_signature() -> None:
    tampered = {**spend(), "amount_minor": 1}
    context = built([tampered])
    assert context["metering"] == []
    assert context["attestations_refused"] == [
        {"fact": METERED_SPEND, "reason": "bad_signature", "budget": "tenant_daily_usd"}
    ]


def test_malformed_spends_are_refused_whoever_signed_them() -> None:
    cases = [
        spend(amount_minor=-1),
        spend(amount_minor=True),
        spend(amount_minor=12.5),
        spend(period_start="yesterday"),
        spend(period_start="2026-11-29T10:00:00Z"),  # starts after it ends
        {k: v for k, v in spend().items() if k != "currency"},
        {**{k: v for k, v in spend().items() if k != "signature"}},
    ]
    context = built(cases)
    assert context["metering"] == []
    reasons = [r["reason"] for r in context["attestations_refused"]]
    assert reasons == ["malformed"] * 6 + ["unsigned"]


def test_an_issuer_must_be_registered_for_metered_spend() -> None:
    by_registry = sign_spend(FIELDS, "bank-registry", issuer_key("bank-registry"))  # registered for other facts
    context = built([by_registry])
    assert context["metering"] == [] and context["attestations_refused"][0]["reason"] == "issuer_not_allowed"


def test_the_newest_spend_of_one_period_speaks() -> None:
    older, newer = spend(amount_minor=900), spend(amount_minor=1500, issued_at="2026-11-29T09:30:00Z")
    assert [m["amount_minor"] for m in built([newer, older])["metering"]] == [1500]
    other_period = spend(period_start="2026-11-29T07:00:00Z", period_end="2026-11-29T07:30:00Z")
    assert sorted(m["amount_minor"] for m in built([older, other_period])["metering"]) == [900, 1200]


def test_a_spend_is_not_a_fact_and_a_fact_is_not_a_spend() -> None:
    fact = sign_fact(
        {
            "fact": "evidence_status",
            "value": "present",
            "subject_id": "u1",
            "issued_at": FIELDS["issued_at"],
            "expires_at": FIELDS["expires_at"],
        },
        "bank-idp",
        issuer_key("bank-idp"),
    )
    signed = SignedAttestations(registry(), None, [fact, spend()])
    sources = ContextSources(attestations=signed, metering=signed)
    context = build_context(sources, ACTION, principal=None, action_hash="sha256:00", now=NOW)
    assert set(context["facts"]) == {"evidence_status"} and len(context["metering"]) == 1
    assert "attestations_refused" not in context
    assert sources.describe()["metering"] == {"kind": "attestations", "registry": "finance-reference", "held": 2}
