"""One worker process of ``kcp-opa serve --workers N`` (the supervisor is workers.py).

A worker is started (spawned: a fresh interpreter, never a fork of a threaded parent) with the
listening socket its supervisor bound and its end of the control channel. It reads the service
config and the log verbosity (``kcp-opa -v``) from the channel, opens the service exactly as a
single server does (its own gate and evaluator pool from the same bundle, the shared store and
ledger), says it is ready with the digest of the bundle it decides with and what a single server
says at start (the controls no --issuer-id may sign, the warning lines it held while it loaded the
files: fleet.py; the supervisor says them once for the fleet),
the supervisor answering once every worker decides on that bundle, and serves HTTP on the shared
socket until SIGTERM (uvicorn drains the requests in flight), then writes the ledger's exit
checkpoint.

Every reload it is asked for, by ``POST /v1/admin/reload`` or SIGHUP, goes to the supervisor,
which reloads every worker and answers only when all of them did (:class:`FleetReloader`); a
worker whose channel closes (the supervisor died) stops itself.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from starlette.types import ASGIApp

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonDict, mapping
from kcp_opa.core.logsetup import configure
from kcp_opa.service.callers import Principal
from kcp_opa.service.config import ServiceConfig
from kcp_opa.service.desk import GateService
from kcp_opa.service.fleet import Channel, hold_lines, holding, log_held
from kcp_opa.service.loading import unsignable_warnings
from kcp_opa.service.reloading import Reloader, ReloadError

__all__ = ["FleetReloader", "main"]

#: A reload plans the bundle in every worker (100,000 units take seconds); a metrics scrape is quick.
RELOAD_TIMEOUT_S = 600.0
METRICS_TIMEOUT_S = 10.0


class FleetReloader(Reloader):
    """A worker's reloader: every reload is the whole fleet's (the supervisor asks each worker to
    :meth:`reload_here` and answers once all have), so no worker keeps deciding on an old bundle."""

    channel: Channel | None = None

    def reload(self, by: Principal | None = None, *, bundle: Path | None = None, via: str = "sighup") -> JsonDict:
        if self.channel is None:
            raise ReloadError("this worker is not connected to its supervisor")
        message: JsonDict = {"op": "reload_all", "bundle": str(bundle) if bundle is not None else None, "via": via}
        message["by"] = by.to_dict() if by is not None else None
        answer = self.channel.request(message, RELOAD_TIMEOUT_S)
        if not answer.get("ok"):
            raise ReloadError(str(answer.get("error", "the workers did not reload")))
        return {
            "reloaded": True,
            "previous_bundle_revision": answer.get("previous_bundle_revision"),
            "workers": answer.get("workers"),
            "status": self.service.status(),
        }

    def reload_here(self, by: object, bundle: object, via: object = "sighup") -> JsonDict:
        """This worker's part of a fleet reload: the single server's reload, all or nothing."""
        caller = None
        if isinstance(by, dict):
            roles = by.get("roles")
            named = [str(r) for r in roles] if isinstance(roles, list) else []
            caller = Principal.of(str(by.get("id")), str(by.get("kind")), named)
        if bundle is not None and not isinstance(bundle, str):  # never read as "the configured bundle"
            return {"ok": False, "error": f"the bundle to reload is {type(bundle).__name__}, not a path"}
        with holding() as lines:  # the fleet's reload: the supervisor logs the workers' lines once
            try:
                done = Reloader.reload(self, caller, bundle=Path(bundle) if bundle else None, via=str(via or "sighup"))
            except Exception as exc:  # any failure goes back with the lines held so far, never without
                error = str(exc) if isinstance(exc, ReloadError) else f"{type(exc).__name__}: {exc}"
                return {"ok": False, "error": error, "lines": lines}
        return {
            "ok": True,
            **_digest(self),
            "previous_bundle_revision": done["previous_bundle_revision"],
            "lines": lines,
        }


def _digest(reloader: Reloader) -> JsonDict:
    bundle = reloader.service.gate.bundle
    return {"sha256": bundle.sha256, "revision": bundle.revision}


def main(argv: list[str] | None = None) -> int:
    """``python -c 'from kcp_opa.service.worker import main; ...' LISTEN_FD CONTROL_FD INDEX``."""
    listen_fd, control_fd, index = (int(a) for a in (argv or sys.argv[1:])[:3])
    configure()  # warnings to stderr, as the supervisor's own (structlog's default would print them to stdout)
    listener = socket.socket(fileno=listen_fd)
    control = socket.socket(fileno=control_fd)
    ready = threading.Event()
    holder: JsonDict = {}

    def handle(message: JsonDict) -> JsonDict:
        if message.get("op") == "config":
            holder["config"] = message["config"]
            holder["verbosity"] = message.get("verbosity")
            ready.set()
            return {"ok": True}
        reloader = holder.get("reloader")
        if not isinstance(reloader, FleetReloader):
            return {"ok": False, "error": "the worker is still starting"}
        if message.get("op") == "reload":
            return reloader.reload_here(message.get("by"), message.get("bundle"), message.get("via"))
        if message.get("op") == "metrics":
            from kcp_opa.service.http import local_exposition

            return {"ok": True, "exposition": local_exposition(reloader.service).decode()}
        return {"ok": False, "error": f"unknown op {message.get('op')!r}"}

    def orphaned() -> None:  # the supervisor is gone: drain and stop, never serve unsupervised
        os.kill(os.getpid(), signal.SIGTERM)

    channel = Channel(control, handle, on_close=orphaned).start()
    if not ready.wait(60):
        print(f"kcp-opa: worker {index}: no config from the supervisor", file=sys.stderr, flush=True)
        return 2
    verbosity = holder["verbosity"]
    configure(verbosity if isinstance(verbosity, int) else 0)  # the supervisor's -v / -vv
    hold_lines()
    # Its warnings about the files are the fleet's (the supervisor says them once); -v's lines its own.
    lines: list[JsonDict] = []
    try:
        with holding(logging.WARNING) as lines:
            service, reloader, app = _open(ServiceConfig.from_dict(mapping(holder["config"])), channel)
    except BaseException as exc:
        log_held(lines)  # this worker will not start: the supervisor never reads them
        if not isinstance(exc, KcpOpaError):
            raise
        print(f"kcp-opa: error: worker {index}: {exc}", file=sys.stderr, flush=True)
        return 2
    holder["reloader"] = reloader
    # Answered once the fleet decides on this worker's bundle (workers.py): only then does it serve.
    ready_message = {"op": "ready", "pid": os.getpid(), **_digest(reloader), "warnings": unsignable_warnings(service)}
    ready_message["lines"] = lines
    channel.request(ready_message, RELOAD_TIMEOUT_S)
    _serve(app, listener, service)
    return 0


def _open(config: ServiceConfig, channel: Channel) -> tuple[GateService, FleetReloader, ASGIApp]:
    """The service, its reloader and its app, built as ``kcp-opa serve --transport http`` builds them."""
    from kcp_opa.service import tools
    from kcp_opa.service.fleet import merge_expositions
    from kcp_opa.service.http import build_app
    from kcp_opa.service.loading import Callers, SwappableAuthenticator, open_service
    from kcp_opa.service.observe import enable_tracing
    from kcp_opa.service.oidc import RelyingParty, check_principals, settings_from
    from kcp_opa.stores.opening import open_session_store

    callers = Callers.at_start(config)
    if config.otel:
        enable_tracing()
    sso = (config.oidc_issuer, config.oidc_client_id, config.oidc_client_secret_file, config.oidc_users)
    settings = settings_from(*sso)
    service = open_service(config)
    if settings is not None:
        check_principals(settings, service.registry)
    authenticator = SwappableAuthenticator(callers.authenticator(service.registry, service.gate.bundle))
    reloader = FleetReloader(service, config, authenticator=authenticator, callers=callers)
    reloader.channel = channel

    def exposition() -> bytes:
        answer = channel.request({"op": "metrics_all"}, METRICS_TIMEOUT_S)
        if not answer.get("ok"):
            raise KcpOpaError(str(answer.get("error")))
        expositions = answer["expositions"]
        return merge_expositions(expositions if isinstance(expositions, dict) else {})

    if hasattr(signal, "SIGHUP"):  # a SIGHUP sent to a worker reloads the fleet, as one sent to the supervisor
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reloader.signal_reload, daemon=True).start())
    app = build_app(
        service,
        authenticator,
        host=config.host,
        reloader=reloader,
        catalog=tools.CATALOG,
        authzen_obligations=frozenset(config.authzen_obligations),
        public_url=config.public_url,
        exposition=exposition,
        mcp_stateless=True,  # a session lives in one process; the kernel may hand its next call to another
        sessions=open_session_store(config.store),  # the UI's sessions: every worker (and replica) reads them
        sso=RelyingParty(settings) if settings is not None else None,
    )
    return service, reloader, app


def _serve(app: ASGIApp, listener: socket.socket, service: GateService) -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    try:
        server.run(sockets=[listener])
    finally:
        audit = service.gate.audit
        if audit is not None and audit.ledger.checkpoint_key is not None:
            try:
                audit.ledger.close()
            except KcpOpaError as exc:
                print(f"kcp-opa: warning: no checkpoint on exit: {exc}", file=sys.stderr, flush=True)
