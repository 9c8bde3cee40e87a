"""Budgets and velocity rules of the wrong shape are refused, never counted as none
(kcp_opa/context/counting.py): a budget that is not counted is one the policy cannot hold an
action to. Absent parameters still count nothing."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
from budgetkit import compile_budget

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.errors import BundleError
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.stores.sqlite.counters import SQLiteCounterStore

BUDGET = {"id": "daily", "per": "tenant", "currency": "EUR", "limit_minor": 100, "window_seconds": 86400}
VELOCITY = {"id": "burst", "per": "beneficiary", "currency": "EUR", "max_count": 3, "window_seconds": 3600}


def _data(parameters: object) -> dict[str, object]:
    return {"kcp_data": {"matrix": {"parameters": parameters}}}


MALFORMED = {
    "kcp_data a list": {"kcp_data": [{"matrix": {"parameters": {"budgets": [BUDGET]}}}]},
    "matrix a string": {"kcp_data": {"matrix": "matrix"}},
    "parameters a list": _data([{"budgets": [BUDGET]}]),
    "budgets an object": _data({"budgets": {"daily": BUDGET}}),
    "velocity a string": _data({"budgets": [BUDGET], "velocity": "burst"}),
    "a budget a string": _data({"budgets": [BUDGET, "weekly"]}),
    "a velocity rule a list": _data({"velocity": [VELOCITY, [VELOCITY]]}),
}


@pytest.fixture
def store(tmp_path: Path) -> SQLiteCounterStore:
    return SQLiteCounterStore(tmp_path / "counters.db")


def test_absent_parameters_count_nothing_and_present_ones_are_counted(store: SQLiteCounterStore) -> None:
    for absent in ({}, {"kcp_data": {}}, {"kcp_data": {"matrix": {}}}, _data({}), _data(None)):
        counters = StoreCounters.for_bundle(store, absent)
        assert (counters.budgets, counters.velocity) == ([], [])
    counters = StoreCounters.for_bundle(store, _data({"budgets": [BUDGET], "velocity": [VELOCITY]}))
    # Read as the bundle carries them: a budget over every task type, a velocity rule's outcome.
    assert counters.budgets == [{**BUDGET, "task_types": "all"}]
    assert counters.velocity == [{"outcome": "HUMAN_APPROVAL", **VELOCITY}]


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_parameters_of_the_wrong_shape_are_refused_not_counted_as_none(store: SQLiteCounterStore, shape: str) -> None:
    """Read leniently, each shape gave no budget and no velocity rule: nothing counted."""
    with pytest.raises(BundleError, match="not"):
        StoreCounters.for_bundle(store, MALFORMED[shape])


def test_a_gate_refuses_at_load_a_bundle_whose_budgets_cannot_be_counted_naming_the_bundle(tmp_path: Path) -> None:
    """The gate counts from the bundle's typed parameters (read once, cached): budgets of the
    wrong shape stop the load with the bundle's own BundleError, never a gate counting nothing."""
    compiled = read_bundle(compile_budget(tmp_path / "budget.tar.gz"))
    data = copy.deepcopy(dict(compiled.data))
    data["kcp_data"]["matrix"]["parameters"]["budgets"] = {"daily": BUDGET}
    with pytest.raises(BundleError, match=r"budget\.tar\.gz: kcp_data/matrix/parameters/budgets is not a list: \{"):
        Gate(replace(compiled, data=data), config=GateConfig(preflight=False))
