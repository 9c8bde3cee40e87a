"""The counter store's contract (issue 25), the same tests on SQLite and on PostgreSQL (``backend``).

Requests counted per unit and principal (the k-th of N concurrent requests sees exactly k),
reservations under the store's lock (N racing reservers never over-reserve a limit), the
reservation committed with the consume, released by a failure, a lost claim or expiry, and the
counter schema migrated and versioned like every store's.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest
from storekit import Backend

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.opening import migrate, open_stores
from kcp_opa.stores.protocols import CounterStore, CounterView
from kcp_opa.stores.storedtypes import ReservationKey, Transfer

PROCESSES = 6
REQUESTS = 8
RESERVERS = 8
LIMIT = 3  # three of the racing reservers fit
T0 = "2026-11-29T10:00:00.000000Z"


def _at(seconds: int) -> str:
    return f"2026-11-29T10:{seconds // 60:02d}:{seconds % 60:02d}.000000Z"


def _transfer(receipt: str, *, amount: int = 100, beneficiary: str = "b1", expires: str = _at(300)) -> Transfer:
    return Transfer(receipt, "tenant_a", "agent_a", "payment", beneficiary, "USD", amount, T0, expires)


def _reserve(store: CounterStore, transfer: Transfer) -> None:
    store.reserving(lambda view: (None, transfer))


def _totals(store: CounterStore, now: str = _at(1)) -> tuple[int, int, int]:
    totals = store.read(
        lambda view: view.transfers(currency="USD", since="2026-11-29T09:00:00.000000Z", now=now, where=[])
    )
    return totals.count, totals.committed_minor, totals.reserved_minor


def _counters(backend: Backend) -> CounterStore:
    counters = backend.open().counters
    assert counters is not None, f"{backend.name} opens no counter store"
    return counters


def test_requests_are_counted_per_unit_principal_and_window(backend: Backend) -> None:
    counters = _counters(backend)
    starts = [_at(0), "2026-11-29T09:59:59.999999Z"]
    assert counters.count_request("p/u", "alice", _at(10), starts) == [1, 1]
    assert counters.count_request("p/u", "alice", _at(20), starts) == [2, 2]
    assert counters.count_request("p/u", "bob", _at(20), starts) == [1, 1]  # another principal
    assert counters.count_request("p/other", "alice", _at(20), starts) == [1, 1]  # another unit
    # a window that starts after the first request no longer holds it
    assert counters.count_request("p/u", "alice", _at(30), [_at(15), _at(0)]) == [2, 3]


def _race_requests(location: str, barrier: Any, answers: Any) -> None:
    try:
        counters = open_stores(location).counters
        assert counters is not None
        barrier.wait(timeout=60)
        seen = [counters.count_request("p/u", "alice", _at(5), [_at(0)])[0] for _ in range(REQUESTS)]
        answers.put(seen)
    except BaseException as exc:  # every failure goes to the parent
        answers.put(f"{type(exc).__name__}: {exc}")


def test_of_n_concurrent_requests_the_kth_sees_exactly_k(backend: Backend) -> None:
    _counters(backend)  # the schema exists; the race is on the rows
    context = multiprocessing.get_context("fork")
    barrier, answers = context.Barrier(PROCESSES), context.Queue()
    workers = [
        context.Process(target=_race_requests, args=(backend.location, barrier, answers)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(isinstance(r, list) for r in results), results
    seen = sorted(n for r in results for n in r)
    assert seen == list(range(1, PROCESSES * REQUESTS + 1))  # no count seen twice, none skipped


def _race_reservations(location: str, n: int, barrier: Any, answers: Any) -> None:
    try:
        counters = open_stores(location).counters
        assert counters is not None

        def work(view: CounterView) -> tuple[bool, Transfer | None]:
            held = view.transfers(currency="USD", since="2026-11-29T09:00:00.000000Z", now=_at(1))
            time.sleep(0.05)  # a decision takes time: without the lock every reserver reads the same counts
            if held.committed_minor + held.reserved_minor + 100 > LIMIT * 100:
                return False, None
            return True, _transfer(f"r{n}")

        barrier.wait(timeout=60)
        answers.put(counters.reserving(work))
    except BaseException as exc:  # every failure goes to the parent
        answers.put(f"{type(exc).__name__}: {exc}")


def test_racing_reservers_in_many_processes_never_over_reserve(backend: Backend) -> None:
    """Fails when the reservation's lock is taken out (checked: every reserver then reserves)."""
    counters = _counters(backend)
    context = multiprocessing.get_context("fork")
    barrier, answers = context.Barrier(RESERVERS), context.Queue()
    workers = [
        context.Process(target=_race_reservations, args=(backend.location, n, barrier, answers))
        for n in range(RESERVERS)
    ]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(isinstance(r, bool) for r in results), results
    assert results.count(True) == LIMIT
    assert _totals(counters) == (LIMIT, 0, LIMIT * 100)


def _keys(*, reads: str) -> list[ReservationKey]:
    """The keys of a tenant_a/agent_a/payment transfer, reading counts under the column ``reads``."""
    values = {"tenant_id": "tenant_a", "agent_id": "agent_a", "task_type": "payment"}
    return [ReservationKey(column, value, column == reads) for column, value in values.items()]


def _race_keyed(location: str, n: int, barrier: Any, answers: Any) -> None:
    try:
        counters = open_stores(location).counters
        assert counters is not None
        # Half count per tenant, half per agent (two bundles, as during a reload): one total either way.
        column = "tenant_id" if n % 2 else "agent_id"

        def work(view: CounterView) -> tuple[bool, Transfer | None]:
            held = view.transfers(currency="USD", since="2026-11-29T09:00:00.000000Z", now=_at(1),
                                  where=[(column, "tenant_a" if n % 2 else "agent_a")])  # fmt: skip
            time.sleep(0.05)
            if held.committed_minor + held.reserved_minor + 100 > LIMIT * 100:
                return False, None
            return True, _transfer(f"r{n}")

        barrier.wait(timeout=60)
        answers.put(counters.reserving(work, _keys(reads=column)))
    except BaseException as exc:  # every failure goes to the parent
        answers.put(f"{type(exc).__name__}: {exc}")


def test_reservers_counting_under_different_keys_of_one_transfer_never_over_reserve(backend: Backend) -> None:
    """A reserver locks every key its transfer is filed under, not only those it counts under:
    fails when the keys it only writes under are left unlocked (checked: over-reserves)."""
    counters = _counters(backend)
    context = multiprocessing.get_context("fork")
    barrier, answers = context.Barrier(RESERVERS), context.Queue()
    workers = [
        context.Process(target=_race_keyed, args=(backend.location, n, barrier, answers)) for n in range(RESERVERS)
    ]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(isinstance(r, bool) for r in results), results
    assert results.count(True) == LIMIT
    assert _totals(counters) == (LIMIT, 0, LIMIT * 100)


def test_reservations_wait_only_for_a_key_one_of_them_counts_under(backend: Backend) -> None:
    """PostgreSQL locks per key: another tenant reserves while one tenant's reservation is open;
    the same tenant waits for it. (SQLite has one writer: every reservation waits.)"""
    if backend.name != "postgres":
        pytest.skip("SQLite serializes every reservation by design")
    counters = _counters(backend)
    inside, release = threading.Event(), threading.Event()

    def held_open(view: CounterView) -> tuple[None, Transfer | None]:
        inside.set()
        assert release.wait(timeout=60)
        return None, None

    def tenant(name: str) -> list[ReservationKey]:
        return [ReservationKey("tenant_id", name, True), ReservationKey("agent_id", "agent_a", False),
                ReservationKey("task_type", "payment", False)]  # fmt: skip

    first = threading.Thread(target=counters.reserving, args=(held_open, tenant("tenant_a")))
    first.start()
    assert inside.wait(timeout=60)
    other = threading.Thread(target=counters.reserving, args=(lambda view: (None, None), tenant("tenant_b")))
    other.start()
    other.join(timeout=30)
    other_waited = other.is_alive()
    same = threading.Thread(target=counters.reserving, args=(lambda view: (None, None), tenant("tenant_a")))
    same.start()
    same.join(timeout=1)
    waited = same.is_alive()
    release.set()
    first.join(timeout=60)
    same.join(timeout=60)
    assert not other_waited, "tenant_b waited for tenant_a's open reservation"
    assert waited, "a second tenant_a reservation did not wait for the open one"
    assert not same.is_alive() and not other.is_alive()


def test_a_failed_reservation_reserves_nothing(backend: Backend) -> None:
    counters = _counters(backend)

    def refuse(view: CounterView) -> tuple[None, Transfer | None]:
        raise RuntimeError("the receipt was not signed")

    with pytest.raises(RuntimeError):
        counters.reserving(refuse)
    assert counters.transfer_state("r1") is None and _totals(counters) == (0, 0, 0)


def test_a_reservation_is_committed_with_the_consume_and_counted_once(backend: Backend) -> None:
    stores = backend.open()
    counters = stores.counters
    assert counters is not None
    _reserve(counters, _transfer("r1"))
    assert counters.transfer_state("r1") == "reserved" and _totals(counters) == (1, 0, 100)
    assert stores.executions.consume("n1", "r1", "2030-01-01T00:00:00Z") is True
    assert counters.transfer_state("r1") == "committed" and _totals(counters) == (1, 100, 0)
    assert stores.executions.consume("n1", "r1", "2030-01-01T00:00:00Z") is False  # a replay commits nothing new
    assert _totals(counters) == (1, 100, 0)
    assert counters.read(lambda view: view.prior_payments("tenant_a", "b1")) == 1
    assert counters.read(lambda view: view.prior_payments("tenant_a", "b2")) == 0
    # the committed spend still counts after the receipt's expiry: it was spent
    assert _totals(counters, now=_at(400)) == (1, 100, 0)


def test_a_failure_a_lost_claim_and_an_expiry_release_the_reservation(backend: Backend) -> None:
    stores = backend.open()
    counters, executions = stores.counters, stores.executions
    assert counters is not None
    for receipt in ("failed", "won", "lost", "unused", "given_back"):
        _reserve(counters, _transfer(receipt))
    assert executions.consume_and_claim("nf", "failed", "x", idempotency_key="kf", action_hash="h") == (True, None)
    assert executions.finish_execution("kf", error="bank down") is True
    assert counters.transfer_state("failed") == "released"
    assert executions.consume_and_claim("nw", "won", "x", idempotency_key="k", action_hash="h") == (True, None)
    consumed, existing = executions.consume_and_claim("nl", "lost", "x", idempotency_key="k", action_hash="h")
    assert consumed and existing is not None
    assert (counters.transfer_state("won"), counters.transfer_state("lost")) == ("committed", "released")
    assert counters.release("given_back") is True and counters.release("given_back") is False
    assert counters.release("never_reserved") is False
    # "unused" is still reserved; at its expiry it stops counting (its receipt can no longer run)
    assert _totals(counters, now=_at(299)) == (2, 100, 100)
    assert _totals(counters, now=_at(301)) == (1, 100, 0)
    assert counters.transfer_state("unused") == "reserved"


def test_transfers_are_filtered_by_key_task_type_and_window(backend: Backend) -> None:
    counters = _counters(backend)
    _reserve(counters, _transfer("r1", beneficiary="b1"))
    _reserve(counters, _transfer("r2", beneficiary="b2", amount=50))

    def totals(**query: Any) -> tuple[int, int]:
        found = counters.read(lambda view: view.transfers(currency=query.pop("currency", "USD"), now=_at(1), **query))
        return found.count, found.reserved_minor

    since = "2026-11-29T09:00:00.000000Z"
    assert totals(since=since) == (2, 150)
    assert totals(since=since, where=[("tenant_id", "tenant_a"), ("beneficiary", "b2")]) == (1, 50)
    assert totals(since=since, where=[("agent_id", "agent_b")]) == (0, 0)
    assert totals(since=since, task_types=["payment"]) == (2, 150)
    assert totals(since=since, task_types=["read"]) == (0, 0)
    assert totals(since=since, task_types=[]) == (0, 0)
    assert totals(since=since, currency="EUR") == (0, 0)
    assert totals(since=T0) == (0, 0)  # reserved at T0: the window (T0, now] does not hold it
    assert totals(since=since, excluding="r2") == (1, 100)  # the re-decision leaves out its own receipt
    assert totals(since=since, excluding="unknown") == (2, 150)
    with pytest.raises(ValueError):
        totals(since=since, where=[("state", "committed")])  # only the key columns


def test_the_counter_schema_is_versioned_and_a_newer_one_refused(backend: Backend) -> None:
    backend.open()
    assert migrate(backend.location)["counters"] == 1
    backend.set_schema_version("counters", 99)
    with pytest.raises(StoreError) as newer:
        backend.open()
    assert newer.value.code == "schema_newer"


def test_a_store_made_before_the_counters_gains_them_in_one_migration(backend: Backend) -> None:
    stores = backend.open()
    executions = stores.executions.schema_version()  # type: ignore[attr-defined]
    backend.execute(  # as a kcp-opa without counters left it: no counter tables, executions one version back
        *(f"DROP TABLE IF EXISTS {table}" for table in ("transfers", "requests", "request_heads")),
        "DELETE FROM store_schema WHERE component = 'counters'",
        f"UPDATE store_schema SET version = {executions - 1} WHERE component = 'executions'",
    )
    versions = migrate(backend.location)
    assert versions["counters"] == 1 and versions["executions"] == executions
    reopened = backend.open()
    counters = reopened.counters
    assert counters is not None
    _reserve(counters, _transfer("r1"))
    assert reopened.executions.consume("n1", "r1", "2030-01-01T00:00:00Z") is True
    assert counters.transfer_state("r1") == "committed"
    assert counters.count_request("p/u", "alice", _at(10), [_at(0)]) == [1]
