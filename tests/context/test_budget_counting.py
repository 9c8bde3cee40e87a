"""Rate limits and velocity counted by the gate from its own history (issue 25), on one store:
each test runs on a SQLite file and on a PostgreSQL database (the ``backend`` fixture).

The window is the gate's decision time (``now`` injected), never a sleep: the fourth read of a
unit limited to three a minute gets the matrix's outcome, and a minute later it is allowed again.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
from budgetkit import T0, compile_budget, parts, pay, payment
from budgetkit import unit_read as read
from conftest import DEPLOYMENTS, POLICIES, vouched_gate
from storekit import Backend
from trustkit import REGISTRY

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import ContextSources
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.errors import StoreError, StoreUnavailableError


@pytest.fixture
def store(backend: Backend) -> str:
    """The store every part of one test shares: a SQLite file, then a PostgreSQL database."""
    return backend.location


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_budget(tmp_path_factory.mktemp("budget") / "budget.tar.gz")


def test_the_request_past_the_limit_gets_the_matrix_outcome_and_the_window_slides(bundle: Path, store: str) -> None:
    gate, _, _ = parts(bundle, store)
    at = [T0, T0 + dt.timedelta(seconds=10), T0 + dt.timedelta(seconds=20), T0 + dt.timedelta(seconds=30)]
    decisions = [gate.decide(read(n), now=moment) for n, moment in enumerate(at)]
    assert [("rate_limited" in d.reason_codes) for d in decisions] == [False, False, False, True]
    assert decisions[3].decision.value == "ESCALATE"  # the matrix's parameters.rate_limits.outcome
    assert decisions[2].decision.value == "HUMAN_APPROVAL"
    # Another principal has its own count. Every request counts, refused or not: at +85 s the
    # minute (+25 s, +85 s] holds +30 s and this one, so the window has slid and it is allowed.
    assert "rate_limited" not in gate.decide(read(7, principal="user_002"), now=at[3]).reason_codes
    slid = gate.decide(read(8), now=T0 + dt.timedelta(seconds=85))
    assert "rate_limited" not in slid.reason_codes and slid.decision.value == "HUMAN_APPROVAL"
    assert "rate_limited" not in gate.decide(read(9), now=T0 + dt.timedelta(seconds=86)).reason_codes
    assert "rate_limited" in gate.decide(read(10), now=T0 + dt.timedelta(seconds=87)).reason_codes


def test_velocity_sum_in_the_window_crossing_the_threshold_raises_the_decision(bundle: Path, store: str) -> None:
    assert pay(bundle, store, payment(1, value=250000))[0] == "executed"
    gate, _, _ = parts(bundle, store)
    crossing = gate.decide(payment(2, value=100000), now=T0 + dt.timedelta(minutes=10))
    assert crossing.decision.value == "ESCALATE" and "velocity_exceeded" in crossing.reason_codes
    assert crossing.risk_level.value == "HIGH"
    below = gate.decide(payment(3, value=50000), now=T0 + dt.timedelta(minutes=10))
    assert "velocity_exceeded" not in below.reason_codes and below.decision.value == "USER_CONFIRMATION"
    slid = gate.decide(payment(4, value=100000), now=T0 + dt.timedelta(seconds=3601))
    assert "velocity_exceeded" not in slid.reason_codes and slid.decision.value == "USER_CONFIRMATION"


def test_a_first_payment_is_high_risk_from_the_history_and_a_second_is_not(bundle: Path, store: str) -> None:
    gate, _, _ = parts(bundle, store)
    stated_low = payment(1, runtime={"risk_level": "low"})
    assert gate.decide(stated_low, now=T0).risk_level.value == "HIGH"
    assert pay(bundle, store, payment(2))[0] == "executed"
    assert gate.decide(payment(3), now=T0).risk_level.value == "MEDIUM"


def test_the_counters_database_down_is_a_fault_never_a_decision(bundle: Path) -> None:
    """A counter store that cannot be reached raises StoreUnavailableError out of Gate.decide: no
    ESCALATE context_missing (a policy answer) is built from the outage."""

    class Unreachable:
        def counters(self, action: Any, *, now: dt.datetime) -> dict[str, Any]:
            raise StoreUnavailableError("postgresql://db/kcp: couldn't get a connection after 1.00 sec")

    gate = vouched_gate(bundle, preflight=False)
    gate.context = ContextSources(counters=Unreachable())
    with pytest.raises(StoreUnavailableError) as raised:
        gate.decide(payment(1, runtime={"budget_state": "within_budget"}), now=T0)
    assert raised.value.code == "store_unavailable"


def test_counters_unavailable_is_context_missing_never_an_allow(bundle: Path, tmp_path: Path) -> None:
    class Down:
        def counters(self, action: Any, *, now: dt.datetime) -> dict[str, Any]:
            raise StoreError("database is locked")

    gate = vouched_gate(bundle, preflight=False)
    gate.context = ContextSources(counters=Down())  # every other fact is vouched: only the counts are missing
    decision = gate.decide(payment(1, runtime={"budget_state": "within_budget"}), now=T0)
    assert decision.decision.value == "ESCALATE" and "context_missing" in decision.reason_codes
    assert {(r.code, r.rule) for r in decision.verdict.reasons if r.code == "context_missing"} == {
        ("context_missing", "budget.counters")
    }


def test_the_counts_are_in_the_archived_input(bundle: Path, store: str) -> None:
    gate, _, _ = parts(bundle, store)
    assert gate.context is not None and isinstance(gate.context.counters, StoreCounters)
    document = gate.prepare(read(1), now=T0).document
    counters = document["context"]["counters"]
    assert counters["source"] == "gate"
    assert counters["rate"] == {
        "unit": "treasury-budget/supplier-payments",
        "principal": "user_001",
        "requests_per_minute": 1,
        "requests_per_hour": 1,
        "requests_per_day": 1,
    }
    assert counters["budgets"]["tenant_daily_usd"] == {"key": "tenant_demo", "spent_minor": 0, "reserved_minor": 0}


def test_a_reloaded_bundle_counts_its_own_budgets(bundle: Path, store: str, tmp_path: Path) -> None:
    """A hot reload that changes the matrix's budgets is counted from its first decision on: the
    gate never keeps counting the budgets of the bundle it started with."""
    base = tmp_path / "deployment"
    shutil.copytree(DEPLOYMENTS / "budget", base)
    matrix = base / "matrix.yaml"
    matrix.write_text(
        matrix.read_text(encoding="utf-8").replace("tenant_daily_usd", "tenant_daily_usd_v2"), encoding="utf-8"
    )
    renamed = tmp_path / "renamed.tar.gz"
    compile_bundle([base / "knowledge.yaml"], matrix, POLICIES, renamed, options=CompileOptions(trust_path=REGISTRY))
    gate, _, _ = parts(bundle, store)
    assert "tenant_daily_usd" in gate.prepare(read(1), now=T0).document["context"]["counters"]["budgets"]
    gate.activate(renamed)
    budgets = gate.prepare(read(2), now=T0).document["context"]["counters"]["budgets"]
    assert "tenant_daily_usd_v2" in budgets and "tenant_daily_usd" not in budgets


def test_a_reservation_is_keyed_by_its_transfer_and_reads_only_what_the_matrix_counts(tmp_path: Path) -> None:
    """The keys a store locks for a reservation (docs/budgets.md): every column the transfer is
    filed under, read where a budget (or a velocity rule, per tenant) counts."""
    from kcp_opa.stores.opening import open_stores

    store = open_stores(str(tmp_path / "s.db")).counters
    assert store is not None
    action = {"tenant_id": "t1", "agent_id": "a1", "action_type": "payment"}
    by_agent = StoreCounters(store, {"budgets": [{"id": "b", "per": "agent"}]})
    keys = {(k.column, k.value): k.reads for k in by_agent.reservation_keys(action)}
    assert keys == {("tenant_id", "t1"): False, ("agent_id", "a1"): True, ("task_type", "payment"): False}
    velocity = StoreCounters(store, {"velocity": [{"id": "v", "per": "beneficiary"}]})
    assert [k.column for k in velocity.reservation_keys(action) if k.reads] == ["tenant_id"]
    assert not any(k.reads for k in StoreCounters(store, {}).reservation_keys(action))
