"""Reloading the service: every file its :class:`~kcp_opa.service.config.ServiceConfig` names, read
again by the same loader as start (loading.py), then swapped in as one.

A reload (SIGHUP, ``POST /v1/admin/reload`` by a ``service_admin``, or a bundle follower) builds a
new gate, desk, issuer set, receipt keyring and authenticator beside the running ones; only when
all of them load (the registry is the one the bundle was compiled with, every ``--issuer-id``
still has a private key the registry lists) are they swapped in. Calls already running finish on
what they started with; a failed reload changes nothing.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from kcp_opa.context.counting import StoreCounters
from kcp_opa.context.posted import PostedAttestations
from kcp_opa.core.errors import CodedError, KcpOpaError, LedgerError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.decide.pool import retire_later
from kcp_opa.service.callers import Principal, Scope
from kcp_opa.service.config import HostParts, ServiceConfig
from kcp_opa.service.desk import GateService
from kcp_opa.service.loading import (
    Callers,
    SwappableAuthenticator,
    load_gate,
    receipt_keyring,
    say_binding_gaps,
    with_counters,
    with_posted_facts,
)

if TYPE_CHECKING:
    from kcp_opa.decide.follow import BundleFollower
    from kcp_opa.decide.gate import Gate

_log = structlog.get_logger("kcp_opa.service")


class ReloadError(CodedError):
    """A reload that could not load; the running configuration stays."""

    code = "reload_failed"


class Reloader:
    """Re-reads ``config``'s files and swaps the service (and ``authenticator``, rebuilt by
    ``callers``) to them, one reload at a time. ``host``: the objects the service was opened with."""

    def __init__(
        self,
        service: GateService,
        config: ServiceConfig,
        *,
        host: HostParts | None = None,
        authenticator: SwappableAuthenticator | None = None,
        callers: Callers | None = None,
    ) -> None:
        self.service, self.config, self.host = service, config, host or HostParts()
        self.authenticator, self.callers = authenticator, callers
        self._lock = threading.Lock()
        #: Set by ``serve --bundle-source``: polls the source, activating through :meth:`reload_bundle`.
        self.follower: BundleFollower | None = None

    def admin_reload(self, principal: Principal | None) -> JsonDict:
        """``POST /v1/admin/reload``: for a ``service_admin`` only; a refusal or a failure is audited."""

        def work(caller: Principal) -> JsonDict:
            caller.require(Scope.ADMIN, "reload the service")
            return self.reload(caller, via="admin")

        return self.service.call(principal, "reload", work)

    def admin_mode(self, principal: Principal | None, mode: str) -> JsonDict:
        """``POST /v1/admin/mode``: a ``service_admin`` asks for ``enforce`` or ``log_only``
        (kcp_opa.decide.modes: recorded in the ledger; leaving enforce may need a second admin)."""

        def work(caller: Principal) -> JsonDict:
            caller.require(Scope.ADMIN, "change the enforcement mode")
            gate = self.service.gate
            return gate.modes.request(mode, caller.id, gate.audit)

        return self.service.call(principal, "mode", work)

    def signal_reload(self) -> None:
        """SIGHUP: reload; a failure is logged and audited, the server keeps serving what it had."""
        try:
            self.reload()
        except ReloadError as exc:
            self.service.refuse(None, "reload", exc)
        except Exception as exc:  # a reload must never take the server down
            _log.error("reload_crashed", error=f"{type(exc).__name__}: {exc}")

    def reload_bundle(self, path: Path) -> None:
        """A bundle follower's activation: reload with the new version at ``path`` (kcp_opa.decide.follow)."""
        if hashlib.sha256(path.read_bytes()).hexdigest() != self.service.gate.bundle.sha256:
            self.reload(bundle=path, via="bundle_source")

    def reload(self, by: Principal | None = None, *, bundle: Path | None = None, via: str = "sighup") -> JsonDict:
        """Load everything anew, then swap; raise :class:`ReloadError` and keep serving on failure.
        Either outcome is one log line (``service_reloaded`` at info, ``reload_refused`` at error)
        naming the bundles by revision and digest, and who or what asked (``via``).

        ``bundle`` replaces the bundle path given at start (a follower's new version)."""
        with self._lock:
            before = self.service.gate
            try:
                ledger = before.audit.ledger if before.audit is not None else None
                loaded = load_gate(self.config, self.host, ledger=ledger, bundle=bundle, isolation=before.isolation)
                gate = loaded.gate
                gate.shadow, gate.modes = before.shadow, before.modes  # both stay across reloads
                counting = before.context.counters if before.context is not None else None
                if isinstance(counting, StoreCounters):  # the same store, the new bundle's limits
                    with_counters(gate, counting.store)
                posted = before.context.attestations if before.context is not None else None
                if isinstance(posted, PostedAttestations) and loaded.registry is not None:  # the same store
                    with_posted_facts(gate, posted.store, loaded.registry, loaded.issuer_keys)
                # --keyring is read again; --signing-key, a host's keyring or the store's own key is kept.
                keyring = receipt_keyring(self.config) if self.config.keyring is not None else None
                swapped = self.service.load(gate, loaded.registry, loaded.issuers, keyring)
                authenticator = None
                if self.authenticator is not None and self.callers is not None:
                    authenticator = self.callers.authenticator(loaded.registry, gate.bundle)
            except (KcpOpaError, ValueError) as exc:  # ValueError: a malformed token hash in the tokens file
                failure = ReloadError(f"reload refused, still serving bundle {before.bundle_revision}: {exc}")
                before.record_refusal(str(exc))
                _log.error(
                    "reload_refused",
                    error=str(exc),
                    via=via,
                    by=by.id if by is not None else None,
                    effect="still serving the bundle it had",
                    **_named("serving", before),
                )
                raise failure from None
            self.service.swap(swapped)
            say_binding_gaps(self.service.handlers, gate.bundle.data)
            retire_later(before.engine)  # its workers stop once decisions in flight are done
            if self.authenticator is not None and authenticator is not None:
                self.authenticator.current = authenticator
        status = self.service.status()
        by_id = by.id if by is not None else None
        _log.info("service_reloaded", via=via, by=by_id, **_named("from", before), **_named("to", gate))
        if gate.audit is not None:
            try:
                gate.audit.event(
                    "note",
                    None,
                    None,
                    note="service_reloaded",
                    detail={
                        "from": before.bundle_revision,
                        "to": gate.bundle_revision,
                        "from_sha256": before.bundle.sha256,
                        "to_sha256": gate.bundle.sha256,
                        "trust": status["trust"],
                    },
                    principal=by.to_dict() if by is not None else None,
                )
            except LedgerError as exc:
                _log.error("reload_not_audited", error=str(exc))
        return {"reloaded": True, "previous_bundle_revision": before.bundle_revision, "status": status}


def _named(prefix: str, gate: Gate) -> dict[str, str]:
    """A gate's bundle for a log line: its revision and digest (never a path or a key)."""
    return {f"{prefix}_revision": gate.bundle_revision, f"{prefix}_sha256": gate.bundle.sha256}
