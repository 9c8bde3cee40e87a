"""The SQLite store (kcp_opa/stores/sqlite): its schema and pragmas, nonces consumed once,
execution records and refusals, read back from the database file itself.

Written against the mutmut survivors of the store (docs/testing.md): no bundle, no process,
fast enough to rerun per mutant.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO
from storekit import raw_rows

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.stores.storedtypes import AMBIGUOUS, ExecutionRecord

ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
KEY = ACTION["idempotency_key"]
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_store_schema_pragmas_and_timeout(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "deep" / "er" / "exec.db", busy_timeout_s=2.5)
    assert store.path == tmp_path / "deep" / "er" / "exec.db" and store.path.exists()
    connection = store._connection()
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert connection.execute("PRAGMA busy_timeout").fetchone()[0] == 2500
    assert connection.isolation_level is None  # autocommit: each statement is its own transaction
    assert store._connection() is connection  # one connection per thread
    columns = [row[1] for row in connection.execute("PRAGMA table_info(executions)")]
    assert columns[-1] == "lease_expires_at" and "finished_at" in columns
    with pytest.raises(sqlite3.IntegrityError):
        connection.execute(
            "INSERT INTO executions (idempotency_key, action_hash, receipt_id, state, started_at)"
            " VALUES ('k','h','r','bogus','t')"
        )
    for table in ("consumed_receipts", "executions", "refusals", "reconciliations"):
        assert store.count(table) == 0
    with pytest.raises(ValueError, match="sqlite_master"):
        store.count("sqlite_master")
    assert SQLiteStore(tmp_path / "x.db").busy_timeout_s == 30.0
    assert SQLiteStore(tmp_path / "x.db").group_commit is True


def test_store_other_thread_gets_its_own_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    mine = store._connection()
    theirs: list[sqlite3.Connection] = []
    worker = threading.Thread(target=lambda: theirs.append(store._connection()))
    worker.start()
    worker.join()
    assert theirs and theirs[0] is not mine


def test_a_pre_lease_store_is_migrated_and_its_running_claims_are_ambiguous(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE executions (idempotency_key TEXT PRIMARY KEY, action_hash TEXT NOT NULL,"
            " receipt_id TEXT NOT NULL,"
            " state TEXT NOT NULL, outcome TEXT, error TEXT, started_at TEXT NOT NULL, finished_at TEXT)"
        )
        connection.execute("INSERT INTO executions VALUES ('old', 'h', 'r', 'running', NULL, NULL, '2020', NULL)")
    store = SQLiteStore(path)
    (record,) = store.ambiguous_executions()
    assert record == ExecutionRecord("old", "h", "r", AMBIGUOUS, None, None, "2020", None)
    SQLiteStore(path)  # reopening does not add the column twice


def test_consume_once_per_nonce_and_per_receipt_id(tmp_path: Path) -> None:
    for group in (True, False):
        store = SQLiteStore(tmp_path / f"c{group}.db", group_commit=group)
        assert store.consume("n1", "r1", "2030-01-01T00:00:00Z") is True
        assert store.consume("n1", "r2", "2030-01-01T00:00:00Z") is False
        assert store.consume("n2", "r1", "2030-01-01T00:00:00Z") is False
        assert store.count("consumed_receipts") == 1
        ((nonce, rid, expires, consumed),) = raw_rows(store, "SELECT * FROM consumed_receipts")
        assert (nonce, rid, expires) == ("n1", "r1", "2030-01-01T00:00:00Z") and STAMP.fullmatch(consumed)
        assert store._inflight == 0


def test_consume_batch_is_one_transaction_with_exact_answers(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    assert store._consume_batch([("a", "ra", "x"), ("a", "rb", "x"), ("b", "rb", "x"), ("c", "ra", "x")]) == [
        True,
        False,
        True,
        False,
    ]
    rows = raw_rows(store, "SELECT nonce, consumed_at FROM consumed_receipts ORDER BY nonce")
    assert [r[0] for r in rows] == ["a", "b"] and rows[0][1] == rows[1][1] and STAMP.fullmatch(rows[0][1])
    assert not store._connection().in_transaction
    store._connection().execute("DROP TABLE consumed_receipts")
    with pytest.raises(sqlite3.OperationalError):
        store._consume_batch([("d", "rd", "x")])
    assert not store._connection().in_transaction


def test_concurrent_consumes_share_commits_and_stay_exact(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    answers: list[bool] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        for j in range(20):
            ok = store.consume(f"n{j}", f"r{i}-{j}", "x")
            with lock:
                answers.append(ok)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers.count(True) == 20 and len(answers) == 120
    assert store.count("consumed_receipts") == 20 and store._inflight == 0


def test_consume_failure_is_a_store_error_naming_the_file(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    store._connection().execute("DROP TABLE consumed_receipts")
    with pytest.raises(StoreError) as caught:
        store.consume("n", "r", "x")
    assert str(caught.value).startswith(f"{store.path}: cannot record the receipt as consumed: no such table")
    assert store._inflight == 0


def test_claim_finish_and_read_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    before = dt.datetime.now(dt.UTC)
    assert store.claim_execution("k1", "h1", "r1", lease_seconds=100) is None
    claimed = store.claim_execution("k1", "other", "r2")
    assert claimed is not None
    assert (claimed.idempotency_key, claimed.action_hash, claimed.receipt_id, claimed.state) == (
        "k1",
        "h1",
        "r1",
        "running",
    )
    assert claimed.outcome is None and claimed.error is None
    started = dt.datetime.strptime(claimed.started_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    lease = dt.datetime.strptime(claimed.lease_expires_at or "", "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert before - dt.timedelta(seconds=1) <= started <= dt.datetime.now(dt.UTC)
    assert lease - started == dt.timedelta(seconds=100)
    assert store.ambiguous_executions() == []
    assert store.finish_execution("k1", outcome={"b": 1, "a": [2]}) is True
    assert store.finish_execution("k1", outcome="again") is False
    done = store.execution("k1")
    assert done is not None and done.state == "succeeded" and done.outcome == {"a": [2], "b": 1} and done.error is None
    ((outcome, finished),) = raw_rows(store, "SELECT outcome, finished_at FROM executions")
    assert outcome == '{"a": [2], "b": 1}' and STAMP.fullmatch(finished)
    store.claim_execution("k2", "h2", "r2")
    assert store.finish_execution("k2", error="boom") is True
    failed = store.execution("k2")
    assert failed is not None and failed.state == "failed" and failed.error == "boom" and failed.outcome is None
    assert store.execution("nope") is None
    with pytest.raises(ValueError):
        store.finish_execution("k3", outcome=float("nan"))


def test_ambiguous_claims_in_claim_order(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    store.claim_execution("second-name-first", "h", "r1", lease_seconds=0.0)
    time.sleep(0.002)
    store.claim_execution("a-later", "h", "r2", lease_seconds=0.0)
    store.claim_execution("held", "h", "r3", lease_seconds=60)
    assert [r.idempotency_key for r in store.ambiguous_executions()] == ["second-name-first", "a-later"]
    assert all(r.state == AMBIGUOUS for r in store.ambiguous_executions())
    held = store.execution("held")
    assert held is not None and held.state == "running"


def test_reconcile_refusals_and_both_outcomes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    for outcome, evidence, code, message in (
        ("maybe", "ref", "bad_outcome", "outcome is succeeded or failed, not 'maybe'"),
        ("failed", "  ", "no_evidence", "reconciling needs an evidence reference (what shows the outcome)"),
        ("failed", "ref", "unknown_key", "no execution claimed k"),
    ):
        with pytest.raises(StoreError) as caught:
            store.reconcile("k", outcome, evidence)
        assert (caught.value.code, str(caught.value)) == (code, message)
    store.claim_execution("k", "h", "r1", lease_seconds=60)
    with pytest.raises(StoreError) as caught:
        store.reconcile("k", "failed", "ref")
    assert caught.value.code == "not_ambiguous"
    assert str(caught.value) == "k is running, not ambiguous; only an expired claim is reconciled"
    assert not store._connection().in_transaction  # rolled back, the store still works
    store.claim_execution("s", "h", "rs", lease_seconds=0)
    store.claim_execution("f", "h", "rf", lease_seconds=0)
    ok = store.reconcile("s", "succeeded", "bank:1")
    assert (
        ok.state == "succeeded" and ok.outcome == {"evidence": "bank:1", "reconciled": "succeeded"} and ok.error is None
    )
    bad = store.reconcile("f", "failed", "bank:2")
    assert bad.state == "failed" and bad.outcome is None and bad.error == "reconciled as failed (evidence: bank:2)"
    rows = raw_rows(
        store, "SELECT idempotency_key, outcome, evidence, receipt_id, claimed_at, at FROM reconciliations ORDER BY id"
    )
    assert [r[:4] for r in rows] == [("s", "succeeded", "bank:1", "rs"), ("f", "failed", "bank:2", "rf")]
    assert rows[0][4] == (store.execution("s") or ok).started_at and STAMP.fullmatch(rows[0][5])
    assert all(
        r[0] is not None
        for r in raw_rows(store, "SELECT finished_at FROM executions WHERE idempotency_key IN ('s','f')")
    )
    with pytest.raises(StoreError) as caught:
        store.reconcile("s", "failed", "again")
    assert caught.value.code == "not_ambiguous" and store.count("reconciliations") == 2


def test_record_refusal(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "exec.db")
    store.record_refusal("expired", "too late", receipt_id="r1", action_hash="sha256:x")
    store.record_refusal("malformed_receipt", "bad", receipt_id=None, action_hash=None)
    rows = raw_rows(store, "SELECT at, code, receipt_id, action_hash, message FROM refusals ORDER BY id")
    assert [r[1:] for r in rows] == [
        ("expired", "r1", "sha256:x", "too late"),
        ("malformed_receipt", None, None, "bad"),
    ]
    assert STAMP.fullmatch(rows[0][0]) and store.count("refusals") == 2


def test_the_store_runs_wal_with_synchronous_full(tmp_path: Path) -> None:
    """Kills: the store at ``synchronous=OFF`` (or NORMAL). Read back from the very connection
    the store consumes receipts on: synchronous is per connection, so a fresh one would not see
    it. FULL (2) makes a WAL commit durable before ``consume`` returns, as store.py promises."""
    store = SQLiteStore(tmp_path / "store.db")
    assert store.consume("nonce-1", "rcpt_1", "2026-11-29T10:10:00Z") is True
    connection = store._connection()
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.consume("nonce-1", "rcpt_2", "2026-11-29T10:10:00Z") is False
