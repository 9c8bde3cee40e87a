"""``kcp-opa serve --workers N``: N worker processes on one listening socket, supervised.

The supervisor binds the socket once and spawns each worker as a fresh interpreter (worker.py;
never a fork of this threaded process) with the socket and its end of a control channel
(fleet.py). The kernel hands each connection to one worker; each worker has its own gate and
evaluator pool, loaded from the same bundle, and shares the store and the ledger (the file ledger
appends under ``flock``; SQLite and PostgreSQL serialise what must be once). MCP is served
without sessions, so a client's next call may go to any worker. Every worker logs at the
supervisor's ``-v`` / ``-vv``; what a single server says once at start (the controls no
``--issuer-id`` may sign, the warnings about the files it loaded) the fleet says once: every
worker computes the same lines from the same files, so the supervisor logs the lines each worker
held for it (fleet.py), leaving out those another worker already gave for this load; a restarted
worker adds only what is new (a file changed on disk since), and a reload's lines (outcome,
warnings) are said once per reload. A line only one worker has (its own failure) is never
dropped. The supervisor logs them rather than only worker 0: worker 0 is restarted like any
other, and a reload's outcome is the fleet's, which only the supervisor knows.

A worker that dies is restarted (and said on stderr) after a pause that grows while it keeps
dying. SIGTERM (or SIGINT) drains every worker (uvicorn finishes the requests in flight) and
stops; a worker still running after the grace period is killed. A reload (SIGHUP here, or
SIGHUP / ``POST /v1/admin/reload`` at any worker) reloads every worker: all succeed, or all
fail and keep the old bundle (each audits its refusal), or, when only some fail, those are
killed and restarted on the files as they are now, and the reload answers that it failed,
naming them. A restarted worker that loaded a bundle other than the fleet's makes the fleet
reload to it before it serves. No worker keeps deciding on an old bundle after a reload has
answered.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import structlog

from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.logsetup import current_verbosity
from kcp_opa.service.config import ServiceConfig
from kcp_opa.service.fleet import Channel, FleetLog
from kcp_opa.service.worker import METRICS_TIMEOUT_S, RELOAD_TIMEOUT_S

__all__ = ["Supervisor", "listen", "run_workers"]

_log = structlog.get_logger("kcp_opa.service")

_RESTART_PAUSES_S = (0.2, 1.0, 2.0, 5.0, 10.0)
#: How long SIGTERM waits for the workers to drain before killing them.
DRAIN_S = 30.0
START_S = 300.0
Process = subprocess.Popen[bytes] | None  # a worker slot's (None before its first start)


def say(message: str) -> None:
    print(f"kcp-opa: {message}", file=sys.stderr, flush=True)


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The listening socket every worker accepts on (bound once, here)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


class _Child:
    """One worker slot: its process, its channel, and what it said when ready."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Process = None
        self.channel: Channel | None = None
        self.ready = threading.Event()
        self.sha256 = ""
        #: What the worker would have a single server say at start (unsignable controls: loading.py)
        #: and the warning lines it held while it loaded the files (fleet.py): the fleet says them once.
        self.warnings: list[str] = []
        self.lines: object = []
        self.failures = 0
        self.restart_at = 0.0


class Supervisor:
    """Runs ``workers`` copies of the HTTP service of ``config`` on ``sock`` until SIGTERM."""

    def __init__(self, config: ServiceConfig, workers: int, sock: socket.socket) -> None:
        self.config, self.sock = config, sock
        self.children = [_Child(i) for i in range(workers)]
        self.stopping = threading.Event()
        self._reload_lock = threading.Lock()
        #: The bundle digest every worker decides with (set by the first ready worker and each reload).
        self.sha256 = ""
        self.started = False
        self.log = FleetLog()

    # -- processes -------------------------------------------------------------------------------

    def _spawn(self, child: _Child) -> None:
        ours, theirs = socket.socketpair()
        listen_fd, control_fd = self.sock.fileno(), theirs.fileno()
        code = "from kcp_opa.service.worker import main; raise SystemExit(main())"
        child.ready.clear()
        child.process = subprocess.Popen(
            [sys.executable, "-c", code, str(listen_fd), str(control_fd), str(child.index)],
            pass_fds=(listen_fd, control_fd),
        )
        theirs.close()
        child.channel = Channel(ours, lambda message: self._handle(child, message)).start()
        # -v / -vv reach every worker (restarted ones too) with its config, never on argv.
        child.channel.send({"op": "config", "config": self.config.to_dict(), "verbosity": current_verbosity()})

    def _handle(self, child: _Child, message: JsonDict) -> JsonDict:
        op = message.get("op")
        if op == "ready":
            child.sha256 = str(message.get("sha256", ""))
            warnings = message.get("warnings")
            child.warnings = [str(w) for w in warnings] if isinstance(warnings, list) else []
            child.lines = message.get("lines")
            if self.started:  # a restarted worker: what it found loading that the fleet has not said yet
                self.log.log(child.lines)
            child.ready.set()
            if not self.sha256:
                self.sha256 = child.sha256
            elif child.sha256 != self.sha256 and not self.stopping.is_set():
                say(
                    f"worker {child.index} (pid {message.get('pid')}) loaded bundle {child.sha256[:12]}, not the "
                    f"fleet's {self.sha256[:12]} (the file changed without a reload): reloading every worker"
                )
                self._converge("worker_restart")  # before this worker is answered, and so before it serves
            return {"ok": True}
        if op == "reload_all":
            return self.reload_all(message.get("by"), message.get("bundle"), message.get("via"))
        if op == "metrics_all":
            return self.metrics_all()
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _converge(self, via: str) -> None:
        answer = self.reload_all(None, None, via)
        if not answer["ok"]:
            say(f"reload after a worker restart failed: {answer['error']}")

    def _stop_one(self, child: _Child, how: signal.Signals) -> None:
        if child.process is not None and child.process.poll() is None:
            child.process.send_signal(how)

    # -- reload and metrics across the workers ---------------------------------------------------

    def _live(self) -> list[_Child]:
        return [c for c in self.children if c.ready.is_set() and c.channel is not None and not c.channel.closed]

    def _ask_all(self, message: JsonDict, timeout: float) -> list[tuple[_Child, Process, JsonDict]]:
        """Ask every ready worker at once: (slot, the process asked, its answer)."""
        live = [(c, c.process, c.channel) for c in self._live()]

        def ask(item: tuple[_Child, Process, Channel | None]) -> tuple[_Child, Process, JsonDict]:
            child, process, channel = item
            return child, process, channel.request(message, timeout) if channel else {"ok": False}

        with ThreadPoolExecutor(max(1, len(live))) as pool:
            return list(pool.map(ask, live))

    def reload_all(self, by: object, bundle: object, via: object) -> JsonDict:
        """Reload every ready worker; ``ok`` only if each did. A worker that failed while others
        succeeded is killed (and restarted on the files as they are now): it never decides on the
        old bundle beside workers on the new one. The lines the workers logged reloading (outcome,
        warnings) are logged here, each once for the fleet; a worker that failed without a word (a
        timeout, a closed channel) gets a ``reload_refused`` line of its own."""
        with self._reload_lock:
            answers = self._ask_all({"op": "reload", "by": by, "bundle": bundle, "via": via}, RELOAD_TIMEOUT_S)
            done = [(c, a) for c, _, a in answers if a.get("ok")]
            failed = [(c, p, a) for c, p, a in answers if not a.get("ok")]
            if not answers:
                _log.error("reload_refused", error="no worker is ready to reload", via=via, effect="nothing reloaded")
                return {"ok": False, "error": "no worker is ready to reload"}
            self.log.new_load()
            for child, _, answer in answers:
                self.log.log(answer.get("lines"))
                if not answer.get("ok") and not _says_error(answer.get("lines")):  # a timeout, a closed channel
                    _log.error("reload_refused", error=str(answer.get("error")), worker=child.index, via=via)
            if not failed:
                digests = {a.get("sha256") for _, a in done}
                self.sha256 = str(done[0][1].get("sha256"))
                if len(digests) > 1:  # a bundle file replaced mid-reload: load it everywhere again
                    threading.Thread(target=self._converge, args=("bundle_replaced",), daemon=True).start()
                previous = done[0][1].get("previous_bundle_revision")
                return {"ok": True, "workers": len(done), "previous_bundle_revision": previous}
            first = str(failed[0][2].get("error"))
            if not done:
                return {"ok": False, "error": first}
            for child, process, _ in failed:
                if child.process is process:  # not a worker restarted meanwhile (it loaded the files as they are)
                    self._stop_one(child, signal.SIGKILL)
            self.sha256 = str(done[0][1].get("sha256"))
            named = ", ".join(f"{c.index} (pid {p.pid if p is not None else '?'})" for c, p, _ in failed)
            say(f"reload failed in worker(s) {named}: {first}; killed, restarting on the current files")
            return {
                "ok": False,
                "error": f"reload reached {len(done)} of {len(answers)} workers; worker(s) {named} failed "
                f"({first}) and were killed, to restart on the current files",
            }

    def metrics_all(self) -> JsonDict:
        """Every ready worker's exposition by index (one that does not answer is left out)."""
        answers = self._ask_all({"op": "metrics"}, METRICS_TIMEOUT_S)
        found = {str(c.index): str(a["exposition"]) for c, _, a in answers if a.get("ok") and "exposition" in a}
        return {"ok": True, "expositions": found}

    # -- the supervisor's loop -------------------------------------------------------------------

    def run(self) -> int:
        """Start the workers, supervise them until SIGTERM, drain; exit status 0, or 1 if they never started."""
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=self._sighup, daemon=True).start())
        for child in self.children:
            self._spawn(child)
        if not self._started():
            self._drain()
            return 1
        for line in self.children[0].warnings:  # once for the fleet (each worker loaded the same files)
            say(line)
        for child in self.children:
            self.log.log(child.lines)
        self.started = True
        say(f"{len(self.children)} workers serving (pids {', '.join(str(self._pid(c)) for c in self.children)})")
        while not self.stopping.wait(0.2):
            for child in self.children:
                self._watch(child)
        self._drain()
        return 0

    def _pid(self, child: _Child) -> int:
        return child.process.pid if child.process is not None else 0

    def _started(self) -> bool:
        deadline = time.monotonic() + START_S
        for child in self.children:
            while not child.ready.wait(0.1):
                process = child.process
                if process is not None and process.poll() is not None:
                    say(f"worker {child.index} did not start (exit {process.returncode}); stopping")
                    return False
                if self.stopping.is_set() or time.monotonic() > deadline:
                    return False
        return True

    def _watch(self, child: _Child) -> None:
        process = child.process
        if process is None or process.poll() is None:
            if child.ready.is_set():
                child.failures = 0
            return
        now = time.monotonic()
        if child.restart_at == 0.0:
            code = process.returncode
            cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            pause = _RESTART_PAUSES_S[min(child.failures, len(_RESTART_PAUSES_S) - 1)]
            say(f"worker {child.index} (pid {process.pid}) died ({cause}); restarting in {pause:g} s")
            child.ready.clear()
            child.restart_at = now + pause
            child.failures += 1
            if child.channel is not None:
                child.channel.close()
        elif now >= child.restart_at:
            child.restart_at = 0.0
            self._spawn(child)
            say(f"worker {child.index} restarted (pid {self._pid(child)})")

    def _sighup(self) -> None:
        answer = self.reload_all(None, None, "sighup")  # its outcome is logged there
        if answer["ok"]:
            say(f"reloaded {answer['workers']} workers (SIGHUP)")

    def _drain(self) -> None:
        say("stopping: draining the workers (SIGTERM)")
        for child in self.children:
            self._stop_one(child, signal.SIGTERM)
        deadline = time.monotonic() + DRAIN_S
        for child in self.children:
            process = child.process
            if process is None:
                continue
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"worker {child.index} (pid {process.pid}) did not drain in {DRAIN_S:g} s: killed")
                process.kill()
                process.wait()
        self.sock.close()


def run_workers(config: ServiceConfig, workers: int) -> int:
    """``serve --transport http --workers N``: bind, say where, supervise until stopped."""
    sock = listen(config.host, config.port)
    host, port = sock.getsockname()[:2]
    say(f"serving MCP at http://{host}:{port}/mcp and the JSON API at /v1 ({workers} workers)")
    return Supervisor(config, workers, sock).run()


def _says_error(lines: object) -> bool:
    """Whether a worker's held lines include one at error level (its refusal, said in its words)."""
    return isinstance(lines, list) and any(isinstance(line, dict) and line.get("level") == "error" for line in lines)
