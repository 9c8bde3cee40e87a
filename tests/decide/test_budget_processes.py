"""Budgets under concurrency, in real processes on one store (issue 25): a SQLite file, then a
PostgreSQL database (the ``backend`` fixture; the PostgreSQL runs are marked ``postgres``).

A budget is reserved when a receipt is issued (under the store's write lock, on fresh counts),
committed in the consume's transaction, released when the execution fails, loses its claim or
its receipt expires unused. These tests race separate processes (spawned, each with its own
gate, desk, executor and store connections) and kill them with SIGKILL mid-way.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from budgetkit import KEY, T0, approve, compile_budget, parts, pay, payment, rows
from conftest import REPO
from storekit import Backend

from kcp_opa.core.errors import ReceiptIssueError, ReceiptVerificationError

AMOUNT = 100000  # 1,000.00 USD; the day's budget is 5,000.00: five fit
ONE_SPENT_ONE_RELEASED = {
    "committed_count": 1,
    "committed_minor": AMOUNT,
    "released_count": 1,
    "released_minor": AMOUNT,
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_budget(tmp_path_factory.mktemp("budget") / "budget.tar.gz")


@pytest.fixture
def store(backend: Backend) -> str:
    """The one store every process of a test shares: a SQLite file, then a PostgreSQL database."""
    return backend.location


def _spent(store: str) -> dict[str, int]:
    found = rows(store, "SELECT state, count(*), sum(amount_minor) FROM transfers GROUP BY state")
    return {f"{state}_count": int(n) for state, n, _ in found} | {f"{state}_minor": int(s) for state, _, s in found}


def _racer(bundle: str, store: str, cache: str, n: int, barrier: Any, results: Any) -> None:
    _, desk, executor = parts(Path(bundle), store, plan_cache=Path(cache))
    action = payment(n, beneficiary=f"supplier_{n}")
    try:
        record = approve(desk, action, T0)
        barrier.wait(timeout=300)
        receipt = desk.issue(record, KEY, now=T0)
        executor.execute_authorized_action(action, receipt, lambda a: {"paid": a["action_id"]}, now=T0)
        results.put((n, "executed", ""))
    except ReceiptIssueError as exc:
        results.put((n, "refused", exc.code))
    except Exception as exc:  # reported, so the test names it instead of hanging
        results.put((n, "error", f"{type(exc).__name__}: {exc}"))


def test_sixteen_processes_against_a_budget_for_five_execute_exactly_five(
    bundle: Path, store: str, tmp_path: Path
) -> None:
    """On PostgreSQL this fails when the reservation's head-row lock is taken out (checked)."""
    cache = tmp_path / "plans"
    parts(bundle, store, plan_cache=cache)  # the schema and the rego-cpp plan, made once
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(16), context.Queue()
    racers = [
        context.Process(target=_racer, args=(str(bundle), str(store), str(cache), n, barrier, results))
        for n in range(16)
    ]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=600) for _ in racers]
    for racer in racers:
        racer.join(timeout=60)
    executed = [n for n, what, _ in outcomes if what == "executed"]
    refused = [code for _, what, code in outcomes if what == "refused"]
    assert not [o for o in outcomes if o[1] == "error"], outcomes
    assert len(executed) == 5 and refused == ["budget_exhausted"] * 11, outcomes
    assert _spent(store) == {"committed_count": 5, "committed_minor": 5 * AMOUNT}
    assert rows(store, "SELECT count(*) FROM executions WHERE state = 'succeeded'") == [(5,)]


def test_an_expired_receipt_releases_its_reservation(bundle: Path, store: str) -> None:
    _, desk, executor = parts(bundle, store)
    receipts = []
    for n in range(5):  # five receipts reserve the whole budget, none is used
        action = payment(n, beneficiary=f"supplier_{n}")
        receipts.append((action, desk.issue(approve(desk, action, T0), KEY, now=T0)))
    assert _spent(store) == {"reserved_count": 5, "reserved_minor": 5 * AMOUNT}
    late = payment(9, beneficiary="supplier_9")
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(approve(desk, late, T0), KEY, now=T0 + dt.timedelta(seconds=299))
    assert caught.value.code == "budget_exhausted"
    after = T0 + dt.timedelta(seconds=301)  # the receipts (ttl 300 s) have expired: nothing is held
    assert pay(bundle, store, late, now=after)[0] == "executed"
    expired_action, expired = receipts[0]
    with pytest.raises(ReceiptVerificationError) as refused:
        executor.execute_authorized_action(expired_action, expired, lambda a: None, now=after)
    assert refused.value.code == "expired"
    assert _spent(store)["committed_minor"] == AMOUNT


_CHILD = """
import json, os, signal, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from budgetkit import KEY, T0, approve, parts, payment
_, desk, executor = parts(Path({bundle!r}), {store!r})
action = payment(1)
receipt = desk.issue(approve(desk, action, T0), KEY, now=T0)
Path({out!r}).write_text(json.dumps(receipt.to_dict()))
if {stage!r} == "after_reservation":
    os.kill(os.getpid(), signal.SIGKILL)
def handler(a):
    os.kill(os.getpid(), signal.SIGKILL)  # the side effect may have happened: nobody knows
executor.execute_authorized_action(action, receipt, handler, now=T0)
"""


def _killed_child(bundle: Path, store: str, tmp: Path, stage: str) -> dict[str, Any]:
    out = tmp / f"receipt-{stage}.json"
    code = _CHILD.format(tests=str(REPO / "tests"), bundle=str(bundle), store=str(store), out=str(out), stage=stage)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    receipt: dict[str, Any] = json.loads(out.read_text())
    return receipt


def test_kill_9_between_reservation_and_execution_never_spends_twice(bundle: Path, store: str, tmp_path: Path) -> None:
    receipt = _killed_child(bundle, store, tmp_path, "after_reservation")
    assert _spent(store) == {"reserved_count": 1, "reserved_minor": AMOUNT}  # held, not spent
    _, desk, executor = parts(bundle, store)
    action = payment(1)
    executor.execute_authorized_action(action, receipt, lambda a: {"paid": 1}, now=T0)
    with pytest.raises(ReceiptVerificationError) as replay:
        executor.execute_authorized_action(action, receipt, lambda a: {"paid": 2}, now=T0)
    assert replay.value.code == "replay"
    # A second receipt for the same payment (same idempotency key) reserves, then loses the
    # claim and gives its reservation back: the handler ran once, the budget is spent once.
    again = desk.issue(approve(desk, action, T0), KEY, now=T0)
    result = executor.execute_authorized_action(action, again, lambda a: {"paid": 3}, now=T0)
    assert result.replayed and result.outcome == {"paid": 1}
    assert _spent(store) == {
        "committed_count": 1,
        "committed_minor": AMOUNT,
        "released_count": 1,
        "released_minor": AMOUNT,
    }


def test_kill_9_inside_the_handler_spends_once_and_a_retry_releases(bundle: Path, store: str, tmp_path: Path) -> None:
    _killed_child(bundle, store, tmp_path, "in_handler")
    assert _spent(store) == {"committed_count": 1, "committed_minor": AMOUNT}  # consumed: committed with it
    _, desk, executor = parts(bundle, store)
    action = payment(1)
    retry = desk.issue(approve(desk, action, T0), KEY, now=T0)
    from kcp_opa.core.errors import ExecutionError

    with pytest.raises(ExecutionError) as caught:
        executor.execute_authorized_action(action, retry, lambda a: {"paid": "twice"}, now=T0)
    assert caught.value.code in {"in_progress", "ambiguous"}
    assert _spent(store) == {
        "committed_count": 1,
        "committed_minor": AMOUNT,
        "released_count": 1,
        "released_minor": AMOUNT,
    }


def test_a_failed_execution_releases_its_reservation(bundle: Path, store: str) -> None:

    def boom(action: Any) -> Any:
        raise RuntimeError("bank down")

    assert pay(bundle, store, payment(1), handler=boom) == ("failed", "handler_failed")
    assert _spent(store) == {"released_count": 1, "released_minor": AMOUNT}
    for n in range(2, 7):  # the whole budget is still there
        assert pay(bundle, store, payment(n, beneficiary=f"supplier_{n}"))[0] == "executed"
    assert pay(bundle, store, payment(7, beneficiary="supplier_7")) == ("refused", "budget_exhausted")
