"""The matrix parameters are one typed document (kcp_opa/declare/parameters.py): read once with
defaults applied in one place, written back key for key as the bundle carries them, and a
present field of the wrong type is refused, never read as absent (a lifetime, a role or a
threshold read as absent takes the default, or drops out of what ``prove`` generates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS

from kcp_opa.analysis.spacedims import DimContext
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.compile.datadoc import build_data
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import BundleError
from kcp_opa.declare.manifest import load_manifest
from kcp_opa.declare.matrix import load_matrix
from kcp_opa.declare.parameters import MatrixParameters, ParametersError

DEPLOYMENT_NAMES = sorted(p.name for p in DEPLOYMENTS.iterdir() if (p / "matrix.yaml").is_file())


def _carried(name: str) -> object:
    """The parameters as ``compile`` writes them into the bundle (JSON, as read back)."""
    folder = DEPLOYMENTS / name
    data = build_data([load_manifest(folder / "knowledge.yaml")], load_matrix(folder / "matrix.yaml"))
    matrix = data["kcp_data/matrix"]
    assert isinstance(matrix, dict)
    return json.loads(canonical_json(matrix["parameters"]))


def _bundle(parameters: object) -> LoadedBundle:
    data = {"kcp_data": {"matrix": {"parameters": parameters}}}
    return LoadedBundle(source="bundle.tar.gz", manifest={}, data=data, modules={}, sha256="")


@pytest.mark.parametrize("name", DEPLOYMENT_NAMES)
def test_every_deployments_parameters_read_back_to_the_bundles_json(name: str) -> None:
    carried = _carried(name)
    typed = MatrixParameters.from_dict(carried, "kcp_data/matrix/parameters")
    assert typed.to_dict() == carried
    assert canonical_json(typed.to_dict()) == canonical_json(carried)
    assert _bundle(carried).parameters == typed


def test_absent_parameters_take_the_defaults() -> None:
    typed = MatrixParameters.from_dict(None)
    assert typed == MatrixParameters.from_dict({}) == _bundle(None).parameters
    assert (typed.receipt_ttl_seconds, typed.max_exception_lifetime_seconds) == (300, 30 * 86400)
    assert typed.approver_roles.for_task("refund") == "compliance_officer"
    assert typed.sender_roles == ("support_agent",) and typed.context.knowledge_bound("refund")
    assert typed.to_dict()["money_moving_task_types"] == "undeclared"


WRONG_TYPES: dict[str, dict[str, object]] = {
    "receipt_ttl_seconds a string": {"receipt_ttl_seconds": "300"},
    "receipt_ttl_seconds true": {"receipt_ttl_seconds": True},
    "approver default a number": {"approver_roles": {"default": 5}},
    "approver by_task_type role a number": {"approver_roles": {"by_task_type": {"refund": 7}}},
    "approver_roles a string": {"approver_roles": "manager"},
    "exception lifetime a string": {"exceptions": {"max_lifetime_seconds": "30d"}},
    "action age a float": {"context": {"max_action_age_seconds": 60.5}},
    "knowledge_bound a number": {"context": {"knowledge_bound_task_types": 3}},
    "sender_roles a string": {"sender_roles": "support_agent"},
    "a high-value threshold a string": {"money": {"high_value_minor": {"EUR": "100000"}}},
    "money a list": {"money": [{"high_value_minor": {}}]},
    "budgets an object": {"budgets": {"daily": {"id": "daily"}}},
    "a budget without an id": {"budgets": [{"per": "tenant"}]},
    "a budget's task_types a string": {"budgets": [{"id": "daily", "task_types": "refund"}]},
    "a velocity rule a string": {"velocity": ["burst"]},
    "rate_limits outcome a number": {"rate_limits": {"outcome": 1}},
    "money_moving_task_types a string": {"money_moving_task_types": "refund"},
    "a control set a number": {"money_controls_by_task_type": {"refund": {"high_value": 3}}},
}


@pytest.mark.parametrize("shape", sorted(WRONG_TYPES))
def test_a_field_of_the_wrong_type_is_refused_not_read_as_absent(shape: str) -> None:
    with pytest.raises(ParametersError, match="is not"):
        MatrixParameters.from_dict(WRONG_TYPES[shape])
    with pytest.raises(BundleError, match=r"^bundle\.tar\.gz: kcp_data/matrix/parameters/.* is not"):
        _ = _bundle(WRONG_TYPES[shape]).parameters


def test_a_bundles_parameters_part_of_the_wrong_shape_is_a_bundle_error() -> None:
    for data in ({"kcp_data": []}, {"kcp_data": {"matrix": "m"}}, {"kcp_data": {"matrix": {"parameters": [1]}}}):
        bundle = LoadedBundle(source="b", manifest={}, data=data, modules={}, sha256="")
        with pytest.raises(BundleError, match="not an object"):
            _ = bundle.parameters


def test_prove_refuses_a_threshold_it_would_have_dropped(tmp_path: Path) -> None:
    """Read by hand, a high-value threshold that is not an integer was passed over: ``prove``
    generated no amount at it and still said PROVED about the thresholds it did not test."""
    carried = _carried("finance")
    assert isinstance(carried, dict)
    carried["money"]["high_value_minor"]["EUR"] = "100000"
    with pytest.raises(BundleError, match="high_value_minor is not an object of integers"):
        DimContext.from_bundle(_bundle(carried), set(), [])
