"""The bounded, derandomized slice of the differential fuzzer that `make test` runs (issue 13).

A few hundred mutated decision cases per run across four reference deployments (the budget one with the gate's
counts and attested spend drawn beside each action), on regopy
and OPA, compared as whole decision documents; `make fuzz` runs >= 20,000 over fixed seeds.
A divergence fails here with hypothesis's shrunk example: pin it as a decision case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from differential import Deployment, Tally, compare, load_world, mutated_actions
from hypothesis import HealthCheck, Phase, given, settings

EXAMPLES = 100


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Deployment]:
    loaded = load_world(Path(tmp_path_factory.mktemp("fuzz")))
    for deployment in loaded.values():
        deployment.engines()
    return loaded


@pytest.mark.parametrize("name", ["budget", "customer-onboarding", "finance", "support-desk"])
def test_engines_agree_on_mutated_cases(world: dict[str, Deployment], name: str) -> None:
    deployment = world[name]
    tally = Tally()

    @settings(
        max_examples=EXAMPLES * (3 if name == "budget" else 1),
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=mutated_actions(deployment).hyp())
    def agree(drawn: tuple[str, dict[str, Any], str, list[str]]) -> None:
        problem = compare(deployment, *drawn, tally)
        assert problem is None, f"{problem}: {tally.divergences[-1] if tally.divergences else tally.crashes[-1]}"

    agree()
    assert tally.decisions > EXAMPLES // 2, "most mutated actions must pass the contract and be decided"
    if name == "budget":  # the gate's own counts and attested spend are drawn, not only the action
        assert tally.drawn["counters"] and tally.drawn["metering"], tally.drawn
        reached = {"budget_exhausted", "budget_approval_required", "velocity_exceeded", "rate_limited"}
        assert reached <= set(tally.reason_codes), sorted(tally.reason_codes)


def test_mutated_declarations_are_refused_or_decided_alike(tmp_path: Path) -> None:
    """A few mutated manifests, matrices and registries per deployment (tests/fuzz/declarations.py):
    refused by validate/compile, or every case of the world decided alike on both engines."""
    from declarations import DeclarationTally, case_sweep, mutated_deployment
    from differential import cases_by_deployment

    declared, tally = DeclarationTally(), Tally()
    for name, cases in sorted(cases_by_deployment().items()):
        for index in range(3):
            deployment = mutated_deployment(name, cases, 0, index, tmp_path, declared)
            if deployment is None:
                continue
            for drawn in case_sweep(deployment):
                problem = compare(deployment, *drawn, tally)
                assert problem is None, (declared.worlds[deployment.name], tally.divergences[-1:])
            deployment.opa.close()
    assert not declared.crashes, declared.crashes
    assert declared.refused and declared.mutated > declared.refused, declared.to_dict()
