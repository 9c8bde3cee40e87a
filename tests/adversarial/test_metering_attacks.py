"""Attack class: spend the gate cannot see (issue 25, item 4). An agent run's model and tool cost
reaches the budget only as a spend attestation of a metering issuer (registered for
``metered_spend``). An agent that states a lower spend, a forged attestation, one from an issuer
not registered for the fact, and an expired one: none yields a laxer decision than the genuine
spend. Real bundle, real store, real signatures, regopy and OPA on the same input."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from budgetkit import T0, compile_budget, parts, payment
from trustkit import issuer_key, registry

from kcp_opa.context import ContextSources, SignedAttestations, sign_spend
from kcp_opa.core.signing import generate_ed25519
from kcp_opa.decide.crosscheck import OpaReference
from kcp_opa.decide.engine import DECISION_ENTRYPOINT

ORDER = [
    "ALLOW",
    "USER_CONFIRMATION",
    "STEP_UP_AUTHENTICATION",
    "IDENTITY_VERIFICATION",
    "HUMAN_APPROVAL",
    "ESCALATE",
    "COMPLIANCE_REVIEW",
    "DENY",
]
SPENT = 450000  # of the tenant's 5,000.00 USD day: a 1,000.00 payment on top is past the limit
METER = "metering-service"
STAMP = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_budget(tmp_path_factory.mktemp("budget") / "budget.tar.gz")


def spend(
    amount: int = SPENT,
    *,
    issuer: str = METER,
    key: Any = None,
    issued: dt.timedelta = dt.timedelta(minutes=-5),
    expires: dt.timedelta = dt.timedelta(hours=1),
) -> dict[str, Any]:
    """A spend attestation of the tenant's agent runs in the last two hours (the default: genuine)."""
    fields = {
        "budget": "tenant_daily_usd",
        "subject": "tenant_demo",
        "amount_minor": amount,
        "currency": "USD",
        "period_start": (T0 - dt.timedelta(hours=2)).strftime(STAMP),
        "period_end": (T0 - dt.timedelta(minutes=10)).strftime(STAMP),
        "issued_at": (T0 + issued).strftime(STAMP),
        "expires_at": (T0 + expires).strftime(STAMP),
    }
    return sign_spend(fields, issuer, key or issuer_key(issuer))


def decide(bundle: Path, store: Path, items: list[dict[str, Any]], **extra: Any) -> tuple[str, tuple[str, ...], Any]:
    """(decision, reason codes, archived input) of one payment, on regopy and checked on OPA."""
    metering = SignedAttestations(registry(), None, items)
    gate, _, _ = parts(bundle, store, context=ContextSources(metering=metering))
    prepared = gate.prepare(payment(1, **extra), now=T0)
    decision = gate.decide_prepared(prepared)
    on_opa = OpaReference(gate.bundle, DECISION_ENTRYPOINT).evaluate(prepared.document)
    assert on_opa.value is not None and on_opa.value["decision"] == decision.decision.value
    return decision.decision.value, decision.reason_codes, prepared.document


def _no_laxer(found: tuple[str, tuple[str, ...], Any], genuine: tuple[str, tuple[str, ...], Any]) -> None:
    assert ORDER.index(found[0]) >= ORDER.index(genuine[0]), (found[:2], genuine[:2])


def test_attested_spend_counts_toward_the_budget_with_its_source(bundle: Path, tmp_path: Path) -> None:
    unmetered = decide(bundle, tmp_path / "a.db", [])
    genuine = decide(bundle, tmp_path / "b.db", [spend()])
    assert "budget_exhausted" not in unmetered[1] and ORDER.index(unmetered[0]) < ORDER.index("ESCALATE")
    assert genuine[0] == "ESCALATE" and "budget_exhausted" in genuine[1]
    (metered,) = genuine[2]["context"]["metering"]
    assert metered["amount_minor"] == SPENT and metered["class"] == "attested"
    assert metered["source"] == "attestation:metering-service/metering-service-ed25519-test"


def test_an_agent_stating_a_lower_spend_is_not_believed(bundle: Path, tmp_path: Path) -> None:
    genuine = decide(bundle, tmp_path / "a.db", [spend()])
    own = sign_spend(
        {"budget": "tenant_daily_usd", "subject": "tenant_demo", "amount_minor": 0}, METER, generate_ed25519("x")
    )
    stated = {"budget_state": "within_budget", "spent_minor": 0, "metering": [own], "metered_spend_minor": 0}
    lax = decide(bundle, tmp_path / "b.db", [spend()], runtime=stated)
    assert lax[0] == "ESCALATE" and "budget_exhausted" in lax[1]
    _no_laxer(lax, genuine)


@pytest.mark.parametrize(
    ("attack", "reason"),
    [
        ("forged", "bad_signature"),  # the metering issuer's kid, another key
        ("issuer_not_registered_for_the_fact", "issuer_not_allowed"),  # bank-registry attests other facts
        ("unknown_issuer", "unknown_issuer"),
    ],
)
def test_a_refused_metering_attestation_is_never_counted_and_holds_the_budget(
    bundle: Path, tmp_path: Path, attack: str, reason: str
) -> None:
    """Each attack is a newer attestation of the same period saying nothing was spent: counted, it
    would supersede the genuine one and free the budget."""
    genuine = decide(bundle, tmp_path / "a.db", [spend()])
    if attack == "forged":
        bad = spend(0, key=generate_ed25519("metering-service-ed25519-test"), issued=dt.timedelta(0))
    elif attack == "unknown_issuer":
        bad = spend(0, issuer="rogue-meter", key=generate_ed25519("rogue-meter-ed25519"), issued=dt.timedelta(0))
    else:
        bad = spend(0, issuer="bank-registry", issued=dt.timedelta(0))
    for items in ([spend(), bad], [bad]):
        found = decide(bundle, tmp_path / f"{attack}-{len(items)}.db", items)
        assert found[0] == "ESCALATE" and "context_missing" in found[1], found[:2]
        refused = found[2]["context"]["attestations_refused"]
        assert {"fact": "metered_spend", "reason": reason, "budget": "tenant_daily_usd"} in refused
        assert all(m["amount_minor"] == SPENT for m in found[2]["context"]["metering"])
        _no_laxer(found, genuine)


def test_an_expired_metering_attestation_is_never_counted_and_holds_the_budget(bundle: Path, tmp_path: Path) -> None:
    genuine = decide(bundle, tmp_path / "a.db", [spend()])
    stale = spend(0, issued=dt.timedelta(0), expires=dt.timedelta(seconds=-1))  # newer, says 0, expired
    for n, items in enumerate(([spend(), stale], [stale], [spend(expires=dt.timedelta(0))])):
        found = decide(bundle, tmp_path / f"stale-{n}.db", items)
        assert found[0] == "ESCALATE" and "context_missing" in found[1], found[:2]
        _no_laxer(found, genuine)
