"""Fail closed on the database, recover by itself: a real server stopped, started, made read-only.

While PostgreSQL is down (``postgres.stop()``) or read-only, every store call raises StoreError
(``store_unavailable``) within seconds, the executor refuses and never runs the handler; once
the server is back the SAME store objects work again (no restart of the gate), and nothing
acknowledged before the outage is lost (a nonce consumed before is still consumed).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO, receipt_for

from kcp_opa.core.errors import StoreError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.opening import open_stores

pytestmark = pytest.mark.postgres
SECRET = b"outage-executor-secret-0123456789abcdef"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


def _receipt(decision_id: str) -> dict[str, Any]:
    decision = {
        "decision_id": decision_id,
        "action_hash": action_hash(ACTION),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    return receipt_for(decision, ACTION, hmac_key("kya-1", SECRET))


@contextlib.contextmanager
def _outage(server: Any) -> Iterator[None]:
    if not server.port:
        pytest.skip("an external server (KCP_OPA_TEST_POSTGRES) is not stopped by the tests")
    server.stop()
    try:
        yield
    finally:
        server.start()


def _refused(call: Any) -> float:
    started = time.monotonic()
    with pytest.raises(StoreError) as failed:
        call()
    assert failed.value.code == "store_unavailable"
    assert "password" not in str(failed.value).lower()
    return time.monotonic() - started


def test_a_stopped_database_refuses_everything_then_recovers_by_itself(postgres: Any) -> None:
    stores = open_stores(postgres.database("kcp_outage_stores"))
    store = stores.executions
    assert store.consume("before", "r-before", "x") is True
    assert store.claim_execution("k-before", "h", "r-before") is None
    with _outage(postgres):
        for call in (
            lambda: store.consume("during", "r-during", "x"),
            lambda: store.claim_execution("k-during", "h", "r-during"),
            lambda: store.consume_and_claim("d2", "r-d2", "x", idempotency_key="k2", action_hash="h"),
            lambda: stores.handoffs.take("before", "r-before", "a"),
            lambda: stores.decisions.get("dec_x"),
        ):
            assert _refused(call) < 20  # an answer in seconds, never a hang
        assert stores.challenges.healthy() is False
    deadline = time.monotonic() + 60
    while not stores.challenges.healthy():  # the pool reconnects on its own
        assert time.monotonic() < deadline, "the stores did not recover after the database came back"
        time.sleep(0.2)
    assert store.consume("before", "r-before", "x") is False  # acknowledged before the outage: kept
    assert store.consume("during", "r-during", "x") is True  # refused during it: never consumed
    record = store.execution("k-before")
    assert record is not None and record.state == "running"
    assert store.execution("k-during") is None


def test_the_executor_refuses_during_an_outage_and_runs_once_after(postgres: Any) -> None:
    stores = open_stores(postgres.database("kcp_outage_executor"))
    key = hmac_key("kya-1", SECRET)
    executor = Executor(keyring=Keyring({"kya-1": key}, "kya-1"), policy_versions={"0.1.0"}, store=stores.executions)
    receipt, ran = _receipt("dec_outage_1"), []

    def handler(action: Any) -> Any:
        ran.append(1)
        return {"paid": True}

    with _outage(postgres):
        _refused(lambda: executor.execute_authorized_action(ACTION, receipt, handler))
    assert ran == []
    deadline = time.monotonic() + 30
    while True:
        try:
            result = executor.execute_authorized_action(ACTION, receipt, handler)
            break
        except StoreError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert result.replayed is False and ran == [1]


def test_a_read_only_database_refuses_writes_then_recovers(postgres: Any) -> None:
    import psycopg

    dsn = postgres.database("kcp_outage_readonly")
    stores = open_stores(dsn)
    store = stores.executions

    def set_read_only(on: bool) -> None:
        with psycopg.connect(postgres.dsn, autocommit=True) as admin:
            admin.execute(
                f"ALTER DATABASE kcp_outage_readonly SET default_transaction_read_only = {'on' if on else 'off'}"
            )
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = 'kcp_outage_readonly' AND pid <> pg_backend_pid()"
            )

    set_read_only(True)
    try:
        _refused(lambda: store.consume("ro", "r-ro", "x"))
        _refused(lambda: store.claim_execution("k-ro", "h", "r-ro"))
    finally:
        set_read_only(False)
    deadline = time.monotonic() + 30
    while True:  # the pool replaces the terminated connections by itself, within seconds
        try:
            assert store.consume("ro", "r-ro", "x") is True  # refused while read-only: never consumed
            break
        except StoreError:
            assert time.monotonic() < deadline, "the store did not recover after the database turned writable"
            time.sleep(0.2)
