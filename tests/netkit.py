"""Loopback ports for test servers that no other test, xdist worker or pytest run on the box can take.

``bind(("127.0.0.1", 0))`` then close hands out an ephemeral port that is free *now*: under
pytest-xdist another worker's probe or outgoing connection can be handed the same port before
this test's server binds it, and a ``/health`` poll would then be answered by the wrong server.
Ports here come from below the kernel's ephemeral range (so the kernel never assigns them), each
is claimed by an exclusive lock file held until this process exits (so no other process using
this kit takes it), and each is bound once to prove nothing else listens there.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

#: Below Linux's default ephemeral range (32768-60999): the kernel never assigns these on its own.
LOW, HIGH = 20000, 32000
_LOCKS = Path(tempfile.gettempdir()) / f"kcp-opa-test-ports-{os.getuid()}"
_held: list[int] = []  # lock file descriptors, held for the life of this process
_next: list[int] = []


def free_port() -> int:
    """A loopback TCP port free now and reserved for this process (see the module docstring)."""
    _LOCKS.mkdir(mode=0o700, exist_ok=True)
    if not _next:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
        span = (HIGH - LOW) // 8  # each worker starts in its own stretch: few lock contests
        stretch = int(worker) % 8 if worker.isdigit() else 0
        _next.append(LOW + stretch * span + random.randrange(span))
    for _ in range(HIGH - LOW):
        port = _next[0]
        _next[0] = LOW + (port + 1 - LOW) % (HIGH - LOW)
        fd = os.open(_LOCKS / str(port), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                os.close(fd)
                continue
        _held.append(fd)
        return port
    raise RuntimeError(f"no free loopback port in {LOW}-{HIGH}")
