"""The control channel between ``kcp-opa serve --workers N``'s supervisor and its workers.

One Unix stream socket per worker carries JSON lines both ways: requests (``{"op": ..., "id":
n}``) and replies (``{"reply": n, ...}``). Either side may ask the other while answering: each
request is handled on a thread of its own, so a worker that asks the supervisor to reload every
worker can be asked to reload itself meanwhile. A channel that closes answers every request still
waiting with ``ok: false``: a caller never waits on a peer that is gone.

It also merges the workers' Prometheus expositions into one, each sample labelled with its
``worker`` (the supervisor's index, stable across restarts): a scrape sees every worker's counters,
whichever worker answered it.

And it carries log lines: what a worker logs while it loads the fleet's files (its start, its part
of a reload) it holds (:func:`holding`) and hands to the supervisor, which logs every worker's
lines through one :class:`FleetLog`: each worker computes the same lines from the same files, so a
line another worker already gave for this load is not logged again, and the fleet says it once, as
a single server would; a line only one worker has (its own failure) is never dropped.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from structlog.typing import EventDict, WrappedLogger

from kcp_opa.core.jsonread import JsonDict

__all__ = ["Channel", "ChannelClosed", "FleetLog", "hold_lines", "holding", "log_held", "merge_expositions"]

#: A control message is a few hundred bytes; a metrics exposition some tens of KiB.
MAX_LINE = 16 * 1024 * 1024

Handler = Callable[[JsonDict], JsonDict]


class ChannelClosed(Exception):
    """The peer is gone (its process died or closed the channel)."""


class Channel:
    """JSON lines over ``sock``; ``handle`` answers the peer's requests (its dict is the reply)."""

    def __init__(self, sock: socket.socket, handle: Handler, *, on_close: Callable[[], None] | None = None) -> None:
        self._sock, self._handle, self._on_close = sock, handle, on_close
        self._send_lock = threading.Lock()
        self._pending: dict[int, tuple[threading.Event, list[JsonDict]]] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.closed = False
        self._reader = threading.Thread(target=self._read, name="kcp-opa-control", daemon=True)

    def start(self) -> Channel:
        self._reader.start()
        return self

    def send(self, message: JsonDict) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None

    def request(self, message: JsonDict, timeout: float) -> JsonDict:
        """Send a request and wait for its reply; a closed channel or no reply in time is ``ok: false``."""
        number = next(self._ids)
        event, box = threading.Event(), list[JsonDict]()
        with self._pending_lock:
            if self.closed:
                return {"ok": False, "error": "the control channel is closed"}
            self._pending[number] = (event, box)
        try:
            self.send({**message, "id": number})
            if not event.wait(timeout):
                return {"ok": False, "error": f"no answer within {timeout:.0f} s"}
        except ChannelClosed as exc:
            return {"ok": False, "error": f"the control channel is closed: {exc}"}
        finally:
            with self._pending_lock:
                self._pending.pop(number, None)
        answer: JsonDict = box[0]
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _read(self) -> None:
        try:
            for line in self._lines():
                message = json.loads(line)
                if not isinstance(message, dict):
                    continue
                if "reply" in message:
                    with self._pending_lock:
                        waiting = self._pending.get(message["reply"])
                    if waiting is not None:
                        waiting[1].append(message)
                        waiting[0].set()
                else:
                    threading.Thread(target=self._answer, args=(message,), daemon=True).start()
        except (OSError, ValueError):
            pass
        finally:
            with self._pending_lock:
                self.closed = True
                for event, box in self._pending.values():
                    box.append({"ok": False, "error": "the peer closed the control channel"})
                    event.set()
            if self._on_close is not None:
                self._on_close()

    def _answer(self, message: JsonDict) -> None:
        try:
            reply = self._handle(message)
        except Exception as exc:  # an answer is always sent: the asker never waits out its timeout
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if "id" in message:
            with contextlib.suppress(ChannelClosed):
                self.send({**reply, "reply": message["id"]})

    def _lines(self) -> Iterator[bytes]:
        buffer = b""
        while True:
            chunk = self._sock.recv(65536)
            if not chunk:
                return
            buffer += chunk
            if len(buffer) > MAX_LINE:
                raise ValueError("a control message over the size limit")
            *lines, buffer = buffer.split(b"\n")
            yield from lines


class _Merged:
    """A collector yielding already-built metric families (for one exposition)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def merge_expositions(expositions: dict[str, str]) -> bytes:
    """One Prometheus exposition of every worker's (``{worker index: exposition text}``), each sample
    labelled ``worker``: counters add up in PromQL (``sum without (worker)``), never overwrite."""
    families: dict[str, Metric] = {}
    for worker, text in sorted(expositions.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                labels = {**sample.labels, "worker": worker}
                merged.add_sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(families.values()))
    return generate_latest(registry)


class _Held(threading.local):
    """The lines this thread holds for the supervisor (None: it logs as usual) and the least level held."""

    lines: list[JsonDict] | None = None
    floor = logging.WARNING


_HELD = _Held()
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_LEVELS["critical"] = logging.CRITICAL
_ALIASES = {"warn": "warning", "exception": "error", "fatal": "critical"}


def _hold(_: WrappedLogger, method: str, event: EventDict) -> EventDict:
    level = _ALIASES.get(method, method if method in _LEVELS else "warning")
    lines = _HELD.lines
    if lines is None or _LEVELS[level] < _HELD.floor:
        return event
    lines.append(json.loads(json.dumps({**event, "level": level}, default=str)))  # it crosses the channel
    raise structlog.DropEvent


def hold_lines() -> None:
    """In a worker, once logging is configured: a thread inside :func:`holding` holds its lines."""
    structlog.configure(processors=[_hold, *structlog.get_config()["processors"]])


@contextlib.contextmanager
def holding(floor: int = logging.DEBUG) -> Iterator[list[JsonDict]]:
    """The lines this thread logs at ``floor`` or above, held (not logged) for the supervisor."""
    _HELD.lines, _HELD.floor = [], floor
    try:
        yield _HELD.lines
    finally:
        _HELD.lines = None


def log_held(lines: object, said: set[str] | None = None) -> None:
    """Log the lines a worker held, at their own level, as this process's; with ``said``, a line
    already in it (another worker's copy of the same event and fields) is not logged again."""
    log = structlog.get_logger("kcp_opa.service")
    for line in lines if isinstance(lines, list) else []:
        if not isinstance(line, dict):
            continue
        if said is not None:
            key = json.dumps(line, sort_keys=True, default=str)
            if key in said:
                continue
            said.add(key)
        fields = {k: v for k, v in line.items() if k not in ("event", "level", "timestamp", "exc_info")}
        level = str(line.get("level"))
        log.log(_LEVELS.get(level, logging.WARNING), str(line.get("event")), **fields)


class FleetLog:
    """What the supervisor has logged of its workers' lines for the files the fleet serves now."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def new_load(self) -> None:
        """A reload: the lines of the files loaded now are news again."""
        with self._lock:
            self._said.clear()

    def log(self, lines: object) -> None:
        """Log ``lines`` (one worker's), leaving out those another worker already gave."""
        with self._lock:
            log_held(lines, self._said)
