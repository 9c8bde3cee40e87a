"""``kcp-opa serve --workers N`` for the tests: start it, find its worker processes, wait for them."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx2
from servicekit import start_server


def worker_pids(parent: int) -> set[int]:
    """The supervisor's worker processes (its direct children running kcp_opa.service.worker)."""
    found = set()
    for task in Path(f"/proc/{parent}/task").iterdir():
        try:  # a thread of the supervisor may end between the listing and the read
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"kcp_opa.service.worker" in command:
                found.add(int(pid))
    return found


def ready_workers(url: str) -> set[str]:
    """The worker indexes the merged /metrics shows (only ready workers answer the supervisor)."""
    text = httpx2.get(f"{url}/metrics", timeout=30).text
    return set(re.findall(r'worker="(\d+)"', text))


def start_fleet(args: list[str], workers: int, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """``serve --transport http --workers N ARGS``, once every worker is ready."""
    process, url = start_server([*args, "--workers", str(workers)], env=env)
    deadline = time.monotonic() + 180
    while len(ready_workers(url)) < workers:
        assert time.monotonic() < deadline, "the workers did not all start"
        time.sleep(0.2)
    return process, url


def wait_for(condition: Any, what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return found
