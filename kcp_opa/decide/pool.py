"""Evaluation in a supervised pool of worker processes: a rego-cpp crash costs one decision.

regopy runs rego-cpp inside the calling process, and an input that crashes it (SIGSEGV, an
abort, the kernel's OOM killer; docs/engine-findings.md) would take the whole process down
with every client's work in flight. :class:`ProcessEngine` holds the compiled bundle in
``workers`` child processes (kcp_opa.decide.evalworker; one per core by default) and sends
each evaluation to an idle one under a per-decision deadline. A worker that dies or overruns
the deadline costs the one evaluation it held, which comes back as an error (the gate's DENY
``engine_error``, with the cause), and is replaced in the background; the others carry on.
``GateConfig(isolation="process")`` uses it; the service does by default.
"""

from __future__ import annotations

import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import structlog

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.errors import EngineLoadError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.decide.engine import (
    DECISION_ENTRYPOINT,
    EngineResult,
    Evaluator,
    RegopyEngine,
    check_manifest,
    preflight_in_child,
)
from kcp_opa.decide.evalworker import MAX_FRAME, FrameError, decode, encode

_log = structlog.get_logger("kcp_opa.engine")

ISOLATIONS = ("inline", "process")
#: Per evaluation, waiting for a free worker included; the largest admitted action takes ~0.2 s.
DEFAULT_DEADLINE_S = 10.0
#: Loading the bundle in a new worker (100,000 units take seconds to plan).
START_TIMEOUT_S = 300.0
_RESTART_PAUSE_S = (0.05, 0.5, 2.0, 5.0)


class WorkerLost(Exception):
    """The worker died, overran its deadline or broke the protocol; ``cause`` says which."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class _Worker:
    """One child process and its pipes; used by one evaluation at a time."""

    def __init__(self, start: bytes, timeout_s: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from kcp_opa.decide.evalworker import main; raise SystemExit(main())"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self.pid = self.process.pid
        self._buffer = b""
        try:
            reply = self.call(start, time.monotonic() + timeout_s)
        except WorkerLost as exc:
            raise EngineLoadError(f"an evaluator worker did not start: {exc.cause}") from None
        if "ready" not in reply:
            self.kill()
            raise EngineLoadError(f"an evaluator worker cannot load the bundle: {reply.get('error')}")

    def call(self, frame: bytes, deadline: float) -> JsonDict:
        """Send one frame and read the answer by ``deadline``; raises :class:`WorkerLost`."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            view = memoryview(frame)
            while view:  # a raw pipe may take part of a large frame per write
                view = view[os.write(stdin.fileno(), view) :]
        except OSError:
            raise WorkerLost(self._death()) from None
        header = self._read(stdout.fileno(), 4, deadline)
        size = int.from_bytes(header, "big")
        if size > MAX_FRAME:
            self.kill()
            raise WorkerLost(f"worker {self.pid} sent a frame of {size} bytes")
        try:
            return decode(self._read(stdout.fileno(), size, deadline))
        except (ValueError, FrameError) as exc:
            self.kill()
            raise WorkerLost(f"worker {self.pid} sent what is not a frame: {exc}") from None

    def _read(self, fd: int, size: int, deadline: float) -> bytes:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while len(self._buffer) < size:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self.kill()
                    raise WorkerLost(f"no answer within the deadline; worker {self.pid} was stopped")
                chunk = os.read(fd, max(65536, size - len(self._buffer)))
                if not chunk:
                    raise WorkerLost(self._death())
                self._buffer += chunk
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def _death(self) -> str:
        """Why the worker is gone: its signal or exit code (it is reaped here)."""
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return f"worker {self.pid} closed its pipe and was stopped"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker {self.pid} died of {name}"
        return f"worker {self.pid} exited with status {code}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _log.error("evaluator_worker_unkillable", pid=self.pid)

    def stop(self) -> None:
        """End of stdin: the worker leaves its loop and exits."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


class ProcessEngine:
    """One bundle's entrypoint in up to ``workers`` processes; ``evaluate`` never raises.

    Thread-safe: each evaluation takes an idle worker (waiting up to the deadline), so up to
    ``workers`` evaluations run at once, each in its own process. One worker starts with the
    pool (it proves the bundle loads); the others start when evaluations overlap, so an idle
    gate holds one copy of the bundle, not one per core.
    """

    def __init__(
        self,
        bundle: LoadedBundle,
        entrypoint: str = DECISION_ENTRYPOINT,
        *,
        preflight: bool = True,
        plan_cache: Path | None = None,
        workers: int | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        self.bundle = bundle
        self.entrypoint = entrypoint
        self.deadline_s = deadline_s
        self.size = max(1, workers if workers is not None else (os.cpu_count() or 1))
        check_manifest(bundle, entrypoint)
        self._start = encode(
            {
                "source": bundle.source,
                "manifest": bundle.manifest,
                "data": bundle.data,
                "modules": bundle.modules,
                "sha256": bundle.sha256,
                "entrypoint": entrypoint,
                "plan_cache": str(plan_cache) if plan_cache is not None else None,
            }
        )
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._workers: set[_Worker] = set()
        self._closed = False
        self._starting = 1  # the first worker, started below
        self._start_error = ""
        #: Workers lost (died or stopped at the deadline) and replaced, for status and tests.
        self.lost = 0
        self.last_loss: str | None = None
        self._started(preflight)

    def _started(self, preflight: bool) -> None:
        """The preflight (every entrypoint planned in a child) and the workers, side by side."""
        failures: list[BaseException] = []

        def checked() -> None:
            try:
                preflight_in_child(self.bundle)
            except BaseException as exc:  # re-raised below, in the caller's thread
                failures.append(exc)

        threads = [threading.Thread(target=self._start_one, args=(True,))]
        threads += [threading.Thread(target=checked)] if preflight else []
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures or not self._workers:
            self.close()
            if failures:
                raise failures[0]
            raise EngineLoadError(f"{self.bundle.source}: the evaluator worker did not start ({self._start_error})")

    def _add(self, worker: _Worker) -> None:
        with self._lock:
            if self._closed:
                worker.stop()
                return
            self._workers.add(worker)
        self._idle.put(worker)

    def _grow(self) -> None:
        """No worker is idle: start one more in the background, up to ``size``."""
        with self._lock:
            if self._closed or len(self._workers) + self._starting >= self.size:
                return
            self._starting += 1
        threading.Thread(target=self._start_one, name="kcp-opa-worker-start", daemon=True).start()

    def _start_one(self, once: bool = False) -> None:
        """Start a worker and put it in the pool; retried with pauses unless ``once``."""
        try:
            self._start_with_retries(once)
        finally:
            with self._lock:
                self._starting = max(0, self._starting - 1)

    def _start_with_retries(self, once: bool) -> None:
        for pause in _RESTART_PAUSE_S:
            if self._closed:
                return
            try:
                self._add(_Worker(self._start, START_TIMEOUT_S))
                return
            except (EngineLoadError, OSError) as exc:
                self._start_error = str(exc)
                _log.error("evaluator_worker_not_started", error=str(exc))
                if once:
                    return
            time.sleep(pause)
        _log.error("evaluator_worker_given_up", bundle=self.bundle.source)

    def _replace(self, worker: _Worker, cause: str) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
            self.lost += 1
            self.last_loss = cause
            self._starting += 1
        _log.error("evaluator_worker_lost", cause=cause, bundle_revision=self.bundle.revision)
        threading.Thread(target=self._start_one, name="kcp-opa-worker-restart", daemon=True).start()

    def evaluate(self, input_doc: JsonObject) -> EngineResult:
        """The entrypoint's value for ``input_doc`` from one worker, by the deadline."""
        deadline = time.monotonic() + self.deadline_s
        if self._closed:
            return EngineResult(None, "the evaluator pool is closed (its bundle was replaced)")
        try:
            frame = encode({"input": input_doc})
        except (TypeError, ValueError) as exc:
            return EngineResult(None, f"the input cannot be sent to a worker: {exc}")
        try:
            worker = self._idle.get_nowait()
        except queue.Empty:
            self._grow()
            worker = None
        try:
            worker = worker or self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return EngineResult(None, f"no evaluator worker was free within {self.deadline_s:g} s")
        if not worker.alive():
            self._replace(worker, f"worker {worker.pid} had died while idle")
            return EngineResult(None, "the evaluator worker had died; it is being replaced")
        try:
            reply = worker.call(frame, deadline)
        except WorkerLost as exc:
            self._replace(worker, exc.cause)
            return EngineResult(None, f"evaluation lost: {exc.cause}; the worker is being replaced")
        self._idle.put(worker)
        value = reply.get("value")
        if "error" in reply or not isinstance(value, dict):
            return EngineResult(None, str(reply.get("error") or f"{self.entrypoint} did not produce one object"))
        return EngineResult(value)

    def describe(self) -> JsonDict:
        with self._lock:
            pids = {w.pid for w in self._workers}
        idle = {w.pid for w in list(self._idle.queue)}
        return {
            "isolation": "process",
            "workers": sorted(pids),
            "busy": sorted(pids - idle),
            "lost": self.lost,
            "last_loss": self.last_loss,
        }

    def close(self) -> None:
        """Stop every worker (those busy are killed); no worker is started after this."""
        with self._lock:
            self._closed = True
            workers = list(self._workers)
            self._workers.clear()
        while not self._idle.empty():
            self._idle.get_nowait()
        for worker in workers:
            worker.stop()


def open_engine(
    bundle: LoadedBundle,
    entrypoint: str = DECISION_ENTRYPOINT,
    *,
    preflight: bool = True,
    plan_cache: Path | None = None,
    isolation: str = "inline",
) -> Evaluator:
    """``inline``: regopy in this process (fastest; a rego-cpp crash ends the process);
    ``process``: a :class:`ProcessEngine` (a crash costs one decision)."""
    if isolation == "inline":
        return RegopyEngine(bundle, entrypoint, preflight=preflight, plan_cache=plan_cache)
    if isolation == "process":
        return ProcessEngine(bundle, entrypoint, preflight=preflight, plan_cache=plan_cache)
    raise EngineLoadError(f"isolation={isolation!r}: one of {', '.join(ISOLATIONS)}")


def retire_later(engine: Evaluator, after_s: float = DEFAULT_DEADLINE_S + 1.0) -> None:
    """Close ``engine`` once every evaluation it may hold is over (a replaced gate's pool)."""
    timer = threading.Timer(after_s, engine.close)
    timer.daemon = True
    timer.start()
