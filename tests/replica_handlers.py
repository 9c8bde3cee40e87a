"""Handlers for the replica tests: each run is written to the database, so the database proves
how many times a side effect ran (``KCP_OPA_TEST_HANDLER_DSN`` names it)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import psycopg


def _record(action: Mapping[str, Any]) -> None:
    with psycopg.connect(os.environ["KCP_OPA_TEST_HANDLER_DSN"], autocommit=True) as connection:
        connection.execute(
            "INSERT INTO handler_runs (idempotency_key, pid) VALUES (%s, %s)",
            (str(action["idempotency_key"]), os.getpid()),
        )


def pay(action: Mapping[str, Any]) -> Any:
    """The side effect: recorded, then a pause that widens every race window."""
    _record(action)
    time.sleep(0.2)
    return {"paid": action["idempotency_key"]}


def hang(action: Mapping[str, Any]) -> Any:
    """A side effect that is under way when its replica is killed."""
    _record(action)
    time.sleep(600)
    return {"paid": action["idempotency_key"]}
