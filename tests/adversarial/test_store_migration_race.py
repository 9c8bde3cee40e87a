"""Attack on schema creation: many executor processes open one new (or one old) store at once.

A fleet starting up, or a restart after an upgrade, opens the same SQLite file from many
processes in the same instant. The schema used to be migrated check-then-act (read the columns,
then ``ALTER TABLE ... ADD COLUMN``): two processes both saw the column missing and the second
crashed with ``duplicate column name``. Creation and migration now run in one ``BEGIN
IMMEDIATE`` transaction, so exactly one process migrates and the others see the result.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from kcp_opa import SQLiteStore
from kcp_opa.core.errors import StoreError
from kcp_opa.stores.opening import open_stores

PROCESSES = 8
ROUNDS = 8


def _open(path: str, barrier: Any, answers: Any, service: bool) -> None:
    """One executor (or service) process: open its stores on the shared file the moment all are ready."""
    try:
        barrier.wait(timeout=60)
        store = open_stores(path).executions if service else SQLiteStore(path)
        pid = os.getpid()
        assert store.consume(f"n-{pid}", f"r-{pid}", "x")
        answers.put("ok")
    except BaseException as exc:  # report every failure to the parent, whatever it is
        answers.put(f"{type(exc).__name__}: {exc}")


def _race(path: Path, service: bool) -> list[str]:
    # spawn, not fork: a test worker may hold threads (engines, pools), and a fork copies their locks
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    answers = context.Queue()
    workers = [context.Process(target=_open, args=(str(path), barrier, answers, service)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    return results


def _old_store(path: Path) -> None:
    """A store written before leases: the executions table without ``lease_expires_at``."""
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE executions (idempotency_key TEXT PRIMARY KEY, action_hash TEXT NOT NULL,"
            " receipt_id TEXT NOT NULL,"
            " state TEXT NOT NULL, outcome TEXT, error TEXT, started_at TEXT NOT NULL, finished_at TEXT)"
        )
        connection.execute("INSERT INTO executions VALUES ('old', 'h', 'r', 'running', NULL, NULL, '2020', NULL)")


@pytest.mark.parametrize("service", [False, True], ids=["executor", "service"])
@pytest.mark.parametrize("start", ["new", "pre-lease"])
def test_processes_opening_one_store_at_once_all_succeed(tmp_path: Path, start: str, service: bool) -> None:
    """Executors open the executor store; a service opens all its stores (hand-offs, challenges...)."""
    for round_ in range(ROUNDS):
        path = tmp_path / f"{start}-{round_}" / "exec.db"
        if start == "pre-lease":
            path.parent.mkdir(parents=True)
            _old_store(path)
        results = _race(path, service)
        assert results == ["ok"] * PROCESSES, results
        store = SQLiteStore(path)
        assert store.count("consumed_receipts") == PROCESSES  # every process's consume landed
        with sqlite3.connect(path) as connection:
            columns = [row[1] for row in connection.execute("PRAGMA table_info(executions)")]
        assert columns.count("lease_expires_at") == 1 and columns[-1] == "lease_expires_at"
        if start == "pre-lease":  # the old running claim survived the migration, as ambiguous
            assert [r.idempotency_key for r in store.ambiguous_executions()] == ["old"]


def test_a_store_from_a_newer_kcp_opa_is_refused_not_downgraded(tmp_path: Path) -> None:
    """An older binary opening a store a newer one migrated must stop, not write an old schema's rows."""
    path = tmp_path / "exec.db"
    SQLiteStore(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE store_schema SET version = version + 1 WHERE component = 'executions'")
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    assert caught.value.code == "schema_newer" and "upgrade kcp-opa" in str(caught.value)
