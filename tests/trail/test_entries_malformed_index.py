"""A bundle whose unit index is malformed refuses to write, never writes a no-logging unit's
content in the clear (kcp_opa/trail/entries.py): a unit the trail cannot look up is not "not
found", since "not found" means "no restriction"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.compile.datadoc import leaf_path
from kcp_opa.core.errors import LedgerError
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger

ONBOARDING = DEPLOYMENTS / "customer-onboarding"
#: A unit of the onboarding deployment under ``no-logging``.
ACTION = {"action_id": "act_1", "knowledge": {"project": "customer-onboarding", "unit": "gdpr_data_minimisation"}}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> LoadedBundle:
    out = tmp_path_factory.mktemp("index") / "onboarding.tar.gz"
    compile_bundle([ONBOARDING / "knowledge.yaml"], ONBOARDING / "matrix.yaml", POLICIES, out)
    return read_bundle(out)


def _with_units(bundle: LoadedBundle, units: object) -> LoadedBundle:
    data = dict(bundle.data)
    data["kcp_data"] = {**bundle.data["kcp_data"], "units": units}
    return replace(bundle, data=data)


def _deepened(index: dict[str, Any]) -> dict[str, Any]:
    """The same units in an index one level deeper (16 slots), as a larger deployment compiles."""
    assert index["depth"] == 0
    slots: list[dict[str, Any]] = [{} for _ in range(16)]
    for project, units in index["slots"].items():
        for unit_id, unit in units.items():
            slots[leaf_path([project, unit_id], 1)[0]].setdefault(project, {})[unit_id] = unit
    return {**index, "depth": 1, "slots": slots}


def _malformed(index: dict[str, Any]) -> dict[str, object]:
    deep, leaf = _deepened(index), index["slots"]
    unit = leaf["customer-onboarding"]["gdpr_data_minimisation"]
    return {
        "index a list": [index],
        "depth a string": {**deep, "depth": "1"},
        "slots an object": {**deep, "slots": dict(enumerate(deep["slots"]))},
        "slots too short": {**deep, "slots": []},
        "a leaf a list": {**index, "slots": [leaf]},
        "a project a list": {**index, "slots": {"customer-onboarding": [leaf["customer-onboarding"]]}},
        "the unit a list": {**index, "slots": {"customer-onboarding": {"gdpr_data_minimisation": [unit]}}},
        "its profile out of range": {
            **index,
            "slots": {"customer-onboarding": {"gdpr_data_minimisation": {**unit, "profile": 99}}},
        },
    }


SHAPES = sorted(_malformed({"depth": 0, "slots": {"customer-onboarding": {"gdpr_data_minimisation": {}}}}))


def test_the_unit_index_as_compiled_finds_the_no_logging_unit(bundle: LoadedBundle, tmp_path: Path) -> None:
    assert AuditTrail(AuditLedger(tmp_path / "l.jsonl"), bundle).no_logging(ACTION) is True
    deep = _with_units(bundle, _deepened(dict(bundle.data["kcp_data"]["units"])))
    assert AuditTrail(AuditLedger(tmp_path / "d.jsonl"), deep).no_logging(ACTION) is True


@pytest.mark.parametrize("shape", SHAPES)
def test_a_malformed_unit_index_is_refused_not_a_unit_without_restrictions(
    bundle: LoadedBundle, tmp_path: Path, shape: str
) -> None:
    """Read leniently, each shape made the unit "not found": no_logging() was False and its
    content went to the ledger unredacted. A LedgerError is what the gate turns into a DENY."""
    units = _malformed(dict(bundle.data["kcp_data"]["units"]))[shape]
    ledger = tmp_path / "l.jsonl"
    trail = AuditTrail(AuditLedger(ledger), _with_units(bundle, units))
    with pytest.raises(LedgerError, match="unit index"):
        trail.no_logging(ACTION)
    with pytest.raises(LedgerError, match="unit index"):
        trail.event("note", ACTION, None, detail="content")
    assert not ledger.exists() or "content" not in ledger.read_text()
