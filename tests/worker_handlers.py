"""Handlers for the ``serve --workers`` tests: each run appends ``key pid`` to the file
``KCP_OPA_TEST_HANDLER_RUNS`` names (``O_APPEND``, one write per line), so the file proves how
many times a side effect ran and in which worker process, whatever the store."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any


def _record(action: Mapping[str, Any]) -> None:
    fd = os.open(os.environ["KCP_OPA_TEST_HANDLER_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{action['idempotency_key']} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def pay(action: Mapping[str, Any]) -> Any:
    """The side effect: recorded, then a pause that widens every race window."""
    _record(action)
    time.sleep(0.2)
    return {"paid": action["idempotency_key"]}


def hang(action: Mapping[str, Any]) -> Any:
    """A side effect that is under way when its worker is killed."""
    _record(action)
    time.sleep(600)
    return {"paid": action["idempotency_key"]}
