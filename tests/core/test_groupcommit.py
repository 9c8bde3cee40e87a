"""The shared group-commit writer, and the two stores that use it, under real threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kcp_opa.core.errors import LedgerError
from kcp_opa.core.groupcommit import GroupCommit
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.ledger import AuditLedger, verify_ledger


def test_each_caller_gets_its_own_result_and_batches_form_under_load() -> None:
    sizes: list[int] = []
    gate = threading.Event()

    def write(batch: list[int]) -> list[int]:
        gate.wait(5)  # hold the first batch so the others queue up behind it
        sizes.append(len(batch))
        return [item * 2 for item in batch]

    group: GroupCommit[int, int] = GroupCommit(write, max_batch=64)
    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = [pool.submit(group.submit, n) for n in range(200)]
        gate.set()
        assert [f.result(timeout=30) for f in futures] == [n * 2 for n in range(200)]
    assert sum(sizes) == 200
    assert max(sizes) > 1 and max(sizes) <= 64


def test_a_failed_batch_fails_every_caller_in_it_and_the_writer_goes_on() -> None:
    def write(batch: list[str]) -> list[str]:
        if "bad" in batch:
            raise OSError("disk full")
        return batch

    group: GroupCommit[str, str] = GroupCommit(write, max_batch=8)
    with pytest.raises(OSError, match="disk full"):
        group.submit("bad")
    assert group.submit("good") == "good"


def test_threads_consume_each_nonce_exactly_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "n.db")
    attempts = [(f"{n % 50:032x}", f"rcpt_{n % 50}") for n in range(400)]  # every receipt 8 times
    with ThreadPoolExecutor(max_workers=8) as pool:
        consumed = list(pool.map(lambda a: store.consume(a[0], a[1], "2027-01-01T00:00:00Z"), attempts))
    assert sum(consumed) == 50
    assert store.count("consumed_receipts") == 50


def test_threads_share_one_chain_with_group_commit(tmp_path: Path) -> None:
    ledger = AuditLedger(tmp_path / "l.jsonl", durability="group")
    with ThreadPoolExecutor(max_workers=8) as pool:
        written = list(pool.map(lambda n: ledger.append({"n": n}), range(200)))
    assert sorted(entry["seq"] for entry in written) == list(range(1, 201))
    report = verify_ledger(tmp_path / "l.jsonl")
    assert report.ok and report.entries == 200


def test_a_group_ledger_write_that_fails_raises_ledger_error(tmp_path: Path) -> None:
    ledger = AuditLedger(tmp_path, durability="group")  # a directory: EISDIR
    with pytest.raises(LedgerError):
        ledger.append({"n": 1})
