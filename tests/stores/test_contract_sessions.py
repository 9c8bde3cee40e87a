"""The UI session store's contract (``SessionStore``), the same tests on SQLite and on PostgreSQL
(``backend``): a session opened by one opener is read by another (replicas share them), ends at
its lifetime and at sign-out; a sign-on under way is taken once; the store holds what the cookie
hashes to, never the cookie."""

from __future__ import annotations

import sqlite3
import time

from storekit import Backend

from kcp_opa.service.uisession import MemorySessionStore, Sessions
from kcp_opa.stores.opening import open_session_store
from kcp_opa.stores.storedtypes import PendingSignIn, UiSession

ANNA = UiSession("oidc", "treasury_approver_anna", "anna@bank.example")


def _rows(backend: Backend) -> list[tuple[object, ...]]:
    query = "SELECT session_key, via, subject, identity FROM ui_sessions"
    if backend.name == "sqlite":
        with sqlite3.connect(backend.location) as connection:
            return list(connection.execute(query).fetchall())
    import psycopg

    with psycopg.connect(backend.location) as connection:
        return list(connection.execute(query).fetchall())


def test_a_session_opened_on_one_replica_is_read_on_another_and_ends_at_sign_out(backend: Backend) -> None:
    replica_a = Sessions(open_session_store(backend.location), 900)
    replica_b = Sessions(open_session_store(backend.location), 900)
    cookie, opened = replica_a.open(ANNA)
    read = replica_b.get(cookie)
    assert read is not None and read.record == ANNA and read.csrf == opened.csrf
    assert replica_b.get("another-cookie") is None
    rows = _rows(backend)
    assert len(rows) == 1 and cookie not in str(rows) and opened.csrf not in str(rows)  # only the cookie's hash
    replica_b.close(cookie)
    assert replica_a.get(cookie) is None


def test_a_session_ends_at_its_lifetime(backend: Backend) -> None:
    sessions = Sessions(open_session_store(backend.location), 1)
    cookie, _ = sessions.open(UiSession("token", "sha256:" + "a" * 64))
    assert sessions.get(cookie) is not None
    time.sleep(1.2)
    assert sessions.get(cookie) is None


def test_a_sign_on_under_way_is_taken_once_by_any_replica(backend: Backend) -> None:
    first, second = open_session_store(backend.location), open_session_store(backend.location)
    first.begin_sign_in("state-hash", PendingSignIn("n1", "v1"), 600)
    assert second.take_sign_in("state-hash") == PendingSignIn("n1", "v1")
    assert first.take_sign_in("state-hash") is None and second.take_sign_in("state-hash") is None
    first.begin_sign_in("short", PendingSignIn("n2", "v2"), 1)
    time.sleep(1.2)
    assert second.take_sign_in("short") is None


def test_the_memory_store_keeps_the_same_contract() -> None:
    sessions = Sessions(MemorySessionStore(), 1)
    cookie, session = sessions.open(ANNA)
    assert sessions.get(cookie) == session and sessions.get("another") is None
    sessions.close(cookie)
    assert sessions.get(cookie) is None
    cookie, _ = sessions.open(ANNA)
    time.sleep(1.1)
    assert sessions.get(cookie) is None
    sessions.store.begin_sign_in("k", PendingSignIn("n", "v"), 60)
    assert sessions.store.take_sign_in("k") == PendingSignIn("n", "v") and sessions.store.take_sign_in("k") is None
