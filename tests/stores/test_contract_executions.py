"""The executor store's contract, the same tests on SQLite and on PostgreSQL (``backend``).

Consumed once (also by racing processes), claimed once, leases that expire into ``ambiguous``,
reconciliation on evidence only, the consume and the claim in one transaction, and the two undo
steps of an execution the ledger could not audit: a claim released with its consume (the intent
was not written) and a claim marked unrecorded (the outcome was not written).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import pytest
from storekit import Backend

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.opening import open_executor_store
from kcp_opa.stores.storedtypes import AMBIGUOUS, Transfer

PROCESSES = 6
NONCES = 25


def test_a_nonce_or_a_receipt_id_is_consumed_once(backend: Backend) -> None:
    store = backend.open().executions
    assert store.consume("n1", "r1", "2030-01-01T00:00:00Z") is True
    assert store.consume("n1", "r2", "2030-01-01T00:00:00Z") is False  # same nonce, other receipt
    assert store.consume("n2", "r1", "2030-01-01T00:00:00Z") is False  # same receipt, other nonce
    assert backend.open().executions.consume("n1", "r1", "x") is False  # another opener sees it too


def _race_consumes(location: str, barrier: Any, answers: Any) -> None:
    try:
        store = open_executor_store(location)
        barrier.wait(timeout=60)
        won = [store.consume(f"n{i}", f"r{i}", "2030") for i in range(NONCES)]
        claims = [
            store.consume_and_claim(
                f"k-{os.getpid()}-{i}", f"kr-{os.getpid()}-{i}", "2030", idempotency_key=f"key{i}", action_hash="h"
            )
            for i in range(NONCES)
        ]
        answers.put((sum(won), sum(1 for consumed, existing in claims if consumed and existing is None)))
    except BaseException as exc:  # every failure goes to the parent, whatever it is
        answers.put(f"{type(exc).__name__}: {exc}")


def test_racing_processes_consume_each_nonce_once_and_claim_each_key_once(backend: Backend) -> None:
    backend.open()  # the schema exists; the race is on the rows
    context = multiprocessing.get_context("fork")
    barrier, answers = context.Barrier(PROCESSES), context.Queue()
    workers = [
        context.Process(target=_race_consumes, args=(backend.location, barrier, answers)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(isinstance(r, tuple) for r in results), results
    assert sum(r[0] for r in results) == NONCES  # each nonce consumed by exactly one process
    assert sum(r[1] for r in results) == NONCES  # each key claimed by exactly one process
    store = backend.open().executions
    assert store.count("consumed_receipts") == NONCES + PROCESSES * NONCES
    assert store.count("executions") == NONCES


def test_a_key_is_claimed_once_and_its_outcome_recorded(backend: Backend) -> None:
    store = backend.open().executions
    assert store.claim_execution("k", "h", "r1") is None
    again = store.claim_execution("k", "h", "r2")
    assert again is not None and again.state == "running" and again.receipt_id == "r1"
    assert store.finish_execution("k", outcome={"paid": 1}) is True
    assert store.finish_execution("k", outcome={"paid": 2}) is False  # no longer running
    record = store.execution("k")
    assert record is not None and record.state == "succeeded" and record.outcome == {"paid": 1}
    assert store.claim_execution("k2", "h", "r3") is None
    assert store.finish_execution("k2", error="boom") is True
    failed = store.execution("k2")
    assert failed is not None and failed.state == "failed" and failed.error == "boom"
    assert store.execution("nothing") is None


def test_consume_and_claim_is_one_step(backend: Backend) -> None:
    store = backend.open().executions
    assert store.consume_and_claim("n1", "r1", "x", idempotency_key="k", action_hash="h") == (True, None)
    # a replayed receipt claims nothing, even for a fresh key
    assert store.consume_and_claim("n1", "r1", "x", idempotency_key="fresh", action_hash="h") == (False, None)
    assert store.execution("fresh") is None
    # another receipt for a claimed key is consumed and gets the existing record
    consumed, existing = store.consume_and_claim("n2", "r2", "x", idempotency_key="k", action_hash="h")
    assert consumed is True and existing is not None and existing.receipt_id == "r1"


def test_a_lease_expires_into_ambiguous_and_only_evidence_resolves_it(backend: Backend) -> None:
    store = backend.open().executions
    assert store.claim_execution("slow", "h", "r1", lease_seconds=0.3) is None
    assert store.claim_execution("held", "h", "r2", lease_seconds=600) is None
    record = store.execution("slow")
    assert record is not None and record.state == "running" and record.lease_expires_at
    assert store.ambiguous_executions() == []
    time.sleep(0.6)
    record = store.execution("slow")
    assert record is not None and record.state == AMBIGUOUS
    assert [r.idempotency_key for r in store.ambiguous_executions()] == ["slow"]
    for outcome, evidence, code in [("maybe", "x", "bad_outcome"), ("succeeded", "  ", "no_evidence")]:
        with pytest.raises(StoreError) as refused:
            store.reconcile("slow", outcome, evidence)
        assert refused.value.code == code
    with pytest.raises(StoreError) as unknown:
        store.reconcile("nobody", "failed", "ticket")
    assert unknown.value.code == "unknown_key"
    with pytest.raises(StoreError) as held:
        store.reconcile("held", "failed", "ticket")
    assert held.value.code == "not_ambiguous"
    resolved = store.reconcile("slow", "succeeded", "bank statement 7")
    assert resolved.state == "succeeded" and resolved.outcome == {
        "reconciled": "succeeded",
        "evidence": "bank statement 7",
    }
    assert store.finish_execution("slow", outcome={"late": True}) is False  # the late outcome does not overwrite
    assert store.ambiguous_executions() == []
    assert store.count("reconciliations") == 1
    with pytest.raises(StoreError) as twice:
        store.reconcile("slow", "failed", "again")
    assert twice.value.code == "not_ambiguous"


def test_a_released_claim_unconsumes_its_receipt_and_reserves_its_budget_again(backend: Backend) -> None:
    stores = backend.open()
    store, counters = stores.executions, stores.counters
    assert counters is not None
    counters.reserving(
        lambda view: (
            None,
            Transfer(
                "r1", "t", "a", "payment", "b", "USD", 100, "2026-11-29T10:00:00.000000Z", "2030-01-01T00:00:00.000000Z"
            ),
        )
    )
    assert store.consume_and_claim("n1", "r1", "2030", idempotency_key="k", action_hash="h") == (True, None)
    assert counters.transfer_state("r1") == "committed"
    assert store.release_claim("k", "r2", nonce="n1") is False  # another receipt's claim is not released
    assert store.release_claim("k", "r1", nonce="n1") is True
    assert store.execution("k") is None and store.count("consumed_receipts") == 0
    assert counters.transfer_state("r1") == "reserved"
    assert store.release_claim("k", "r1", nonce="n1") is False  # nothing left to release
    # the same receipt consumes and claims again, once
    assert store.consume_and_claim("n1", "r1", "2030", idempotency_key="k", action_hash="h") == (True, None)
    assert counters.transfer_state("r1") == "committed"
    assert store.finish_execution("k", outcome="paid") is True
    assert store.release_claim("k", "r1", nonce="n1") is False  # a finished execution is never released
    assert store.execution("k").state == "succeeded"  # type: ignore[union-attr]
    # without a nonce (a hand-off: consumed before the claim) only the claim goes
    assert store.consume("n3", "r3", "2030") is True
    assert store.claim_execution("k3", "h", "r3") is None
    assert store.release_claim("k3", "r3") is True
    assert store.execution("k3") is None and store.consume("n3", "r3", "2030") is False


def test_an_unrecorded_outcome_reads_as_ambiguous_until_reconciled(backend: Backend) -> None:
    store = backend.open().executions
    assert store.claim_execution("k", "h", "r1", lease_seconds=600) is None
    assert store.mark_unrecorded("k", "r2", outcome={"paid": 1}, note="x") is False  # not its claim
    assert store.mark_unrecorded("k", "r1", outcome={"paid": 1}, note="outcome_unrecorded: ledger full") is True
    record = store.execution("k")
    assert record is not None and record.state == AMBIGUOUS  # at once, not when the lease would have ended
    assert record.outcome == {"paid": 1} and record.error == "outcome_unrecorded: ledger full"
    assert [r.idempotency_key for r in store.ambiguous_executions()] == ["k"]
    assert store.claim_execution("k", "h", "r9") is not None  # never claimed (run) again
    resolved = store.reconcile("k", "succeeded", "bank statement 9")
    assert resolved.state == "succeeded" and resolved.error is None
    assert store.mark_unrecorded("k", "r1", outcome=None, note="late") is False  # only a running claim


def test_a_hand_off_given_back_is_taken_once_more(backend: Backend) -> None:
    handoffs = backend.open().handoffs
    handoffs.hand_off("n1", "r1", "alice")
    assert handoffs.give_back("n1", "r1", "alice") is False  # not taken yet
    assert handoffs.take("n1", "r1", "alice") is True and handoffs.take("n1", "r1", "alice") is False
    assert handoffs.give_back("n1", "r1", "mallory") is False  # only its principal's
    assert handoffs.give_back("n1", "r1", "alice") is True
    assert handoffs.take("n1", "r1", "mallory") is False and handoffs.take("n1", "r1", "alice") is True


def test_refusals_are_kept(backend: Backend) -> None:
    store = backend.open().executions
    store.record_refusal("replay", "seen before", receipt_id="r1", action_hash="h")
    store.record_refusal("bad_signature", "no", receipt_id=None, action_hash=None)
    assert store.count("refusals") == 2


def test_a_newer_schema_is_refused(backend: Backend) -> None:
    backend.open()
    backend.set_schema_version("executions", 99)
    with pytest.raises(StoreError) as newer:
        backend.open()
    assert newer.value.code == "schema_newer"
    assert "99" in str(newer.value)
