"""Attack class: stating one's own budget and risk (issue 25, items 4 and 5). An agent that has
spent its budget states ``budget_state: within_budget``; one paying a beneficiary for the first
time, or past a velocity rule, states ``risk_level: low``. The gate counts its own history, so
the laxest statement gets a decision no weaker than the strictest. Real bundle, real store,
real regopy gate (and OPA on the same input)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from budgetkit import T0, compile_budget, parts, pay, payment

from kcp_opa.decide.crosscheck import OpaReference
from kcp_opa.decide.engine import DECISION_ENTRYPOINT

# The contract's routing order, most lenient first (docs/contract.md).
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
RISK = ["LOW", "MEDIUM", "HIGH", "CRITICAL"]
LAX = {"budget_state": "within_budget", "risk_level": "low"}
STRICT = {"budget_state": "exhausted", "risk_level": "critical"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_budget(tmp_path_factory.mktemp("budget") / "budget.tar.gz")


def _both(gate: Any, action: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    prepared = gate.prepare(action, now=T0)
    decision = gate.decide_prepared(prepared)
    on_opa = OpaReference(gate.bundle, DECISION_ENTRYPOINT).evaluate(prepared.document)
    assert on_opa.value is not None and on_opa.value["decision"] == decision.decision.value
    return decision.decision.value, decision.risk_level.value, decision.reason_codes


def _spend_the_budget(bundle: Path, store: Path) -> None:
    for n in range(5):
        assert pay(bundle, store, payment(100 + n, beneficiary=f"supplier_{n}"))[0] == "executed"


def test_an_agent_with_a_spent_budget_stating_within_budget_is_still_held(bundle: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    _spend_the_budget(bundle, store)
    gate, _, _ = parts(bundle, store)
    lax = _both(gate, payment(1, beneficiary="supplier_0", runtime=LAX))
    strict = _both(gate, payment(2, beneficiary="supplier_0", runtime=STRICT))
    assert lax[0] == "ESCALATE" and "budget_exhausted" in lax[2]
    assert ORDER.index(lax[0]) >= ORDER.index(strict[0]) and RISK.index(lax[1]) >= RISK.index("MEDIUM")


@pytest.mark.parametrize(
    ("history", "why"),
    [
        ("first_payment", "first_payment_to_beneficiary"),
        ("velocity", "velocity_exceeded"),
    ],
)
def test_a_stated_low_risk_never_lowers_the_computed_one(bundle: Path, tmp_path: Path, history: str, why: str) -> None:
    store = tmp_path / "store.db"
    if history == "velocity":
        assert pay(bundle, store, payment(1, value=250000, beneficiary="supplier_v"))[0] == "executed"
    gate, _, _ = parts(bundle, store)
    beneficiary = "supplier_new" if history == "first_payment" else "supplier_v"
    lax = _both(gate, payment(2, beneficiary=beneficiary, runtime={"risk_level": "low"}))
    quiet = _both(gate, payment(3, beneficiary=beneficiary))
    assert RISK.index(lax[1]) >= RISK.index("HIGH"), (why, lax)
    assert lax[:2] == quiet[:2]  # stating low changed nothing
    assert ORDER.index(lax[0]) >= ORDER.index(quiet[0])


def test_the_laxest_statement_is_never_weaker_than_the_strictest_on_the_gates_facts(
    bundle: Path, tmp_path: Path
) -> None:
    """Pairs of the same payment: the decision under the laxest statement is at least as strict as
    what the gate's own facts demand (the decision with no statement at all)."""
    store = tmp_path / "store.db"
    _spend_the_budget(bundle, store)
    gate, _, _ = parts(bundle, store)
    for n, target in enumerate(["supplier_0", "supplier_new"]):
        silent = _both(gate, payment(10 + n, beneficiary=target))
        lax = _both(gate, payment(20 + n, beneficiary=target, runtime=LAX))
        strict = _both(gate, payment(30 + n, beneficiary=target, runtime=STRICT))
        assert ORDER.index(lax[0]) >= ORDER.index(silent[0]) and RISK.index(lax[1]) >= RISK.index(silent[1])
        assert ORDER.index(strict[0]) >= ORDER.index(lax[0]) and RISK.index(strict[1]) >= RISK.index(lax[1])
