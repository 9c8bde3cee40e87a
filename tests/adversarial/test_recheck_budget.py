"""Attack class: the budget at execution, counted once and not forgotten.

The executor re-decides every receipt on the gate's counts immediately before consuming it.
Those counts hold the reservation made when this very receipt was issued: counted beside the
amount being decided, the last transfer that fits the budget is refused at execution. And the
other way round, leaving out only this receipt's own reservation must not leave out anyone
else's spend: when another execution spent the budget meanwhile (here: a replica still on the
bundle with the larger budget, during a rolling reload), the receipt is refused
``policy_changed``. Real SQLite store, real gates and desks on one file.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from budgetkit import KEY, T0, approve, compile_budget, payment, unit_read
from conftest import DEPLOYMENTS, POLICIES, vouched_gate
from trustkit import REGISTRY, make_desk

from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import ContextSources
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.errors import ReceiptVerificationError
from kcp_opa.core.signing import Keyring
from kcp_opa.decide.gate import Gate
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite import SQLiteCounterStore, SQLiteStore
from kcp_opa.trail.ledger import AuditLedger, read_entries

AMOUNT = 100000  # 1,000.00 USD; the budget deployment's tenant_daily_usd is 5,000.00: five fit


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The budget deployment (5 payments a day), and the same with a budget for ten."""
    work = tmp_path_factory.mktemp("recheck-budget")
    five = compile_budget(work / "five.tar.gz")
    base = DEPLOYMENTS / "budget"
    matrix = yaml.safe_load((base / "matrix.yaml").read_text())
    for budget in matrix["parameters"]["budgets"]:
        if budget["id"] == "tenant_daily_usd":
            budget["limit_minor"] = 10 * AMOUNT
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    ten = work / "ten.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], work / "matrix.yaml", POLICIES, ten, options=CompileOptions(trust_path=REGISTRY)
    )
    return five, ten


def _rechecking(bundle: Path, store: Path, ledger: Path) -> tuple[Gate, ControlDesk, Executor]:
    """A gate counting on ``store``, its desk, and an executor that re-decides on that gate."""
    gate = vouched_gate(bundle, preflight=False, ledger=AuditLedger(ledger))
    gate.context = ContextSources(counters=StoreCounters.for_bundle(SQLiteCounterStore(store), gate.bundle.data))
    executor = Executor(
        keyring=Keyring({KEY.kid: KEY}, KEY.kid),
        policy_versions=[gate.policy_version],
        store=SQLiteStore(store),
        audit=gate.audit,
        gate=gate,
    )
    return gate, make_desk(gate), executor


def _issue(desk: ControlDesk, n: int, at: dt.datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    action = payment(n, value=AMOUNT, beneficiary=f"supplier_{n}")  # one each: no velocity rule trips
    receipt = desk.issue(approve(desk, action, at), KEY, now=at)
    return action, receipt.to_dict()


def _paid(action: Any) -> dict[str, str]:
    return {"paid": str(action["action_id"])}


def test_the_last_transfer_that_fits_the_budget_executes(bundles: tuple[Path, Path], tmp_path: Path) -> None:
    five, _ = bundles
    _, desk, executor = _rechecking(five, tmp_path / "store.db", tmp_path / "ledger.jsonl")
    for n in range(5):  # issued and executed one after the other: the fifth fills the budget exactly
        at = T0 + dt.timedelta(seconds=10 * n)
        action, receipt = _issue(desk, n, at)
        done = executor.execute_authorized_action(action, receipt, _paid, now=at + dt.timedelta(seconds=1))
        assert done.outcome == {"paid": action["action_id"]} and not done.replayed


def test_receipts_issued_up_to_the_budget_all_execute(bundles: tuple[Path, Path], tmp_path: Path) -> None:
    five, _ = bundles
    _, desk, executor = _rechecking(five, tmp_path / "store.db", tmp_path / "ledger.jsonl")
    issued = [_issue(desk, n, T0 + dt.timedelta(seconds=n)) for n in range(5)]  # five reservations: budget full
    later = T0 + dt.timedelta(seconds=30)
    for action, receipt in issued:
        assert executor.execute_authorized_action(action, receipt, _paid, now=later).outcome == _paid(action)
    sixth = desk.open(payment(5, value=AMOUNT, beneficiary="supplier_5"), now=later)  # and the budget holds
    assert "budget_exhausted" in sixth.decision.reason_codes and not sixth.decision.verdict.execution_allowed


def test_a_budget_spent_by_another_execution_meanwhile_is_refused(bundles: tuple[Path, Path], tmp_path: Path) -> None:
    five, ten = bundles
    store, ledger = tmp_path / "store.db", tmp_path / "ledger.jsonl"
    _, desk, executor = _rechecking(five, store, ledger)
    action, receipt = _issue(desk, 0, T0)  # reserved: 1,000 of 5,000
    # A replica still on the older bundle (a budget of 10,000) spends 5,000 on the same store.
    _, old_desk, old_executor = _rechecking(ten, store, tmp_path / "replica.jsonl")
    for n in range(1, 6):
        other, other_receipt = _issue(old_desk, n, T0 + dt.timedelta(seconds=n))
        old_executor.execute_authorized_action(other, other_receipt, _paid, now=T0 + dt.timedelta(seconds=n))
    calls: list[Any] = []
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(action, receipt, calls.append, now=T0 + dt.timedelta(seconds=20))
    assert caught.value.code == "policy_changed" and calls == []
    assert "budget_exhausted" in str(caught.value) and receipt["decision_id"] in str(caught.value)
    assert executor.store.execution(action["idempotency_key"]) is None  # not claimed, not consumed
    decisions = [e for _, e in read_entries(ledger) if e.get("type") == "decision"]
    mine = [e for e in decisions if e.get("action_hash") == receipt["action_hash"]]
    assert {e["decision_id"] for e in mine[:-1]} == {receipt["decision_id"]}  # opened, then its controls recorded
    assert mine[-2]["result"]["execution_allowed"] and not mine[-1]["result"]["execution_allowed"]
    redecided = mine[-1]
    assert (
        redecided["decision_id"] != receipt["decision_id"] and "budget_exhausted" in redecided["result"]["reason_codes"]
    )
    counted = redecided["input"]["context"]["counters"]["budgets"]["tenant_daily_usd"]
    assert counted["spent_minor"] == 5 * AMOUNT and counted["reserved_minor"] == 0  # its own reservation left out


def test_receipts_gathered_over_windows_cannot_execute_past_the_rate_limit_at_once(
    bundles: tuple[Path, Path], tmp_path: Path
) -> None:
    """The execution is a request on the unit too: an agent that gathers receipts for reads
    decided three a minute over two minutes (each decision within the limit) and presents them
    all at once gets three executed in that minute, not six; the rest are refused
    ``policy_changed`` ``rate_limited``, their receipts unconsumed. (The price, near a limit:
    an execution counts beside its own decision, so it can be refused; never an allow.)"""
    five, _ = bundles
    _, desk, executor = _rechecking(five, tmp_path / "store.db", tmp_path / "ledger.jsonl")
    issued = []
    for n, second in enumerate((0, 1, 2, 61, 62, 63)):
        at = T0 + dt.timedelta(seconds=second)
        action = unit_read(n)
        record = approve(desk, action, at)
        assert "rate_limited" not in record.decision.reason_codes and record.decision.verdict.execution_allowed
        issued.append((action, desk.issue(record, KEY, now=at).to_dict()))
    burst = T0 + dt.timedelta(seconds=125)  # the minute (65 s, 125 s] holds none of the decisions
    outcomes = []
    for action, receipt in issued:
        try:
            executor.execute_authorized_action(action, receipt, _paid, now=burst)
            outcomes.append("executed")
        except ReceiptVerificationError as exc:
            assert exc.code == "policy_changed" and "rate_limited" in str(exc), str(exc)
            assert executor.store.execution(action["idempotency_key"]) is None  # not consumed
            outcomes.append("refused")
    assert outcomes == ["executed"] * 3 + ["refused"] * 3
