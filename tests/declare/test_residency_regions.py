"""data_residency read against a country-to-region table: `target.country: DE` is inside `[EU]`,
`NO` inside `[EEA]` but not `[EU]`, an unknown code outside. The table ships in every bundle and
each profile carries the codes its residency admits (the decisions on both engines are in
fixtures/cases/finance.yaml, customer-onboarding.yaml and kcp-governance.yaml)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from kcp_opa.analysis.restricted import inside
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare import regions
from kcp_opa.declare import vocabulary as vocab

DEPLOYMENTS = REPO / "fixtures" / "deployments"
EU_27 = {
    "AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU",
    "IE", "IT", "LT", "LU", "LV", "MT", "NL", "PL", "PT", "RO", "SE", "SI", "SK",
}  # fmt: skip


def _compile(tmp_path: Path, deployment: str) -> Path:
    base = DEPLOYMENTS / deployment
    out = tmp_path / f"{deployment}.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", out)
    return out


def test_the_table_is_the_eu_the_eea_and_the_uk_in_iso_codes() -> None:
    assert set(regions.REGION_COUNTRIES["EU"]) == EU_27 and len(regions.REGION_COUNTRIES["EU"]) == 27
    assert set(regions.REGION_COUNTRIES["EEA"]) == EU_27 | {"IS", "LI", "NO"}
    assert regions.REGION_COUNTRIES["UK"] == ("GB",)
    for region, countries in regions.REGION_COUNTRIES.items():
        assert region in vocab.REGIONS, region  # a manifest naming it gets no unknown_region warning
        assert all(re.fullmatch("[A-Z]{2}", country) for country in countries), region
        assert len(set(countries)) == len(countries), region


@pytest.mark.parametrize(
    ("residency", "inside_", "outside"),
    [
        (["EU"], {"DE", "GR", "EU"}, {"NO", "IS", "GB", "EEA", "EL", "de", "QQ", "US"}),
        (["EEA"], {"DE", "NO", "IS", "LI", "EU", "EEA"}, {"GB", "CH", "QQ"}),
        (["EU", "UK"], {"DE", "GB", "UK"}, {"NO", "CH"}),
        (["EU", "US", "SG"], {"FR", "US", "SG"}, {"NO", "BR"}),
        (["NO"], {"NO"}, {"DE", "EU", "EEA"}),
    ],
)
def test_a_residency_admits_its_codes_and_the_countries_the_table_places_in_them(
    residency: list[str], inside_: set[str], outside: set[str]
) -> None:
    places = regions.residency_places(residency)
    assert all(places.get(code) is True for code in inside_), (residency, places)
    assert not any(code in places for code in outside), residency


def test_every_bundle_ships_the_table_and_each_profile_the_places_its_residency_admits(tmp_path: Path) -> None:
    data = read_bundle(_compile(tmp_path, "customer-onboarding")).data["kcp_data"]
    assert data["deployment"]["regions"] == regions.table()
    with_residency = [p for p in data["profiles"] if isinstance(p["compliance"].get("data_residency"), list)]
    assert with_residency
    for profile in with_residency:
        compliance = profile["compliance"]
        assert compliance["residency_places"] == regions.residency_places(compliance["data_residency"])
    assert {"NO", "DE", "EU"} <= set(with_residency[0]["compliance"]["residency_places"])


def test_the_rego_tests_places_are_what_the_compiler_makes() -> None:
    """policies/kcp/evaluators/residency_test.rego writes the compiled places out by hand."""
    text = (REPO / "policies" / "kcp" / "evaluators" / "residency_test.rego").read_text(encoding="utf-8")
    for name, residency in (("_eea_places", ["EEA"]), ("_eu_places", ["EU"])):
        start = text.index(f"{name} := ") + len(f"{name} := ")
        written = json.loads(re.sub(r",\s*}", "}", text[start : text.index("}", start) + 1]))
        assert written == regions.residency_places(residency), name


def _codes(gate: Gate, action: Mapping[str, Any], now: str) -> set[str]:
    sources, principal = case_sources(action, {"from_action": True}, now)
    prepared = gate.prepare(action, now=now, principal=principal, context=sources)
    _, result = gate.evaluate(prepared)
    assert result is not None
    return set(result["reason_codes"])


def test_a_member_state_is_inside_eu_residency_and_norway_and_unknown_codes_are_not(tmp_path: Path) -> None:
    """The beneficiary register (no-cross-border, data_residency [EU, US, SG]): a target in Germany
    was DENY cross_border_transfer (the policy compared DE with the region names)."""
    gate = Gate(read_bundle(_compile(tmp_path, "finance")), config=GateConfig(preflight=False))
    case = next(c for c in load_cases(REPO / "fixtures" / "cases" / "finance.yaml") if c.case_id.endswith("-abroad"))
    for country, crossed in (("DE", False), ("FR", False), ("SG", False), ("NO", True), ("QQ", True), ("de", True)):
        action = json.loads(json.dumps(case.action))
        action["target"]["country"] = country
        assert ("cross_border_transfer" in _codes(gate, action, case.now)) is crossed, country


@dataclass
class _Chosen:
    """The DimContext `inside` reads: the chosen unit's profile."""

    profile: Mapping[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    ("residency", "country"), [(["EU"], "AT"), (["EEA", "EU"], "AT"), (["UK"], "GB"), (["US"], "US"), (None, None)]
)
def test_prove_names_a_country_inside_the_residency_not_a_region(residency: Any, country: str | None) -> None:
    action: dict[str, Any] = {"target": {"type": "t", "country": "ZZ"}}
    inside(action, _Chosen({"compliance": {"data_residency": residency}}))
    assert action["target"].get("country") == country
    if country is not None:
        assert regions.residency_places(residency).get(country) is True
