"""Starting and reloading the service from its files: bundle, trust registry, issuer and receipt keyrings.

A reload (SIGHUP, or ``POST /v1/admin/reload`` by a ``service_admin``) re-reads every file named
at start and builds a new gate, desk, issuer set, receipt keyring and authenticator beside the
running ones; only when all of them load (the registry is the one the bundle was compiled with,
every ``--issuer-id`` still has a private key the registry lists) are they swapped in, as one.
Calls already running finish on what they started with; a failed reload changes nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.compile.signatures import Verification
from kcp_opa.context import ContextSources, RegistrySource, SignedAttestations, StaticGateConfig
from kcp_opa.core.errors import CodedError, KcpOpaError, LedgerError
from kcp_opa.core.signing import Key, Keyring, load_keyring
from kcp_opa.decide.counting import StoreCounters
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.pool import retire_later
from kcp_opa.declare.trust import TrustRegistry, load_trust
from kcp_opa.execute.executor import Handler
from kcp_opa.service.desk import GateService
from kcp_opa.service.identity import Authenticator, Principal, Scope
from kcp_opa.service.issuing import ServiceIssuers
from kcp_opa.service.observe import Metrics, TimedLedger
from kcp_opa.service.receiptkey import store_receipt_keyring
from kcp_opa.stores.opening import open_stores
from kcp_opa.stores.protocols import CounterStore
from kcp_opa.trail.locations import is_database, open_ledger

_log = structlog.get_logger("kcp_opa.service")


class ReloadError(CodedError):
    """A reload that could not load; the running configuration stays."""

    code = "reload_failed"


@dataclass(frozen=True)
class Sources:
    """The files a reload reads again (the paths given at start)."""

    bundle: Path
    trust: Path | None = None
    issuer_ids: tuple[str, ...] = ()
    issuer_keyring: Path | None = None
    receipt_keyring: Path | None = None
    plan_cache: Path | None = None
    #: The keys and scope every bundle (at start and on each reload) must be signed with.
    verification: Verification | None = None
    #: The gate's own configuration (--region, --environment) and fact attestations (--attestations).
    config: StaticGateConfig | None = None
    attestations: Path | None = None


def service_context(
    registry: TrustRegistry | None,
    config: StaticGateConfig | None,
    attestations: Path | None = None,
    keyring: Keyring | None = None,
) -> ContextSources:
    """The service's context sources: the registry for the caller's facts, the gate's own
    configuration, and the signed fact attestations in ``attestations`` (a JSON list).
    What the agent states about any of these is only compared (docs/service.md)."""
    signed: SignedAttestations | None = None
    if attestations is not None:
        if registry is None:
            raise CodedError("--attestations needs --trust (the registry names the issuers)", "issuer_config")
        try:
            items = json.loads(attestations.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CodedError(
                f"{attestations}: not a readable JSON list of attestations: {exc}", "attestations"
            ) from None
        if not isinstance(items, list):
            raise CodedError(f"{attestations}: a JSON list of attestations", "attestations")
        signed = SignedAttestations(registry, keyring, items)
    return ContextSources(
        registry=RegistrySource(registry) if registry is not None else None, config=config, attestations=signed
    )


def with_counters(gate: Gate, store: CounterStore) -> None:
    """Count on ``store`` what ``gate``'s bundle declares (``input.context.counters``), beside
    its other context sources; a host's own counter source is kept."""
    sources = gate.context if gate.context is not None else ContextSources()
    if sources.counters is None or isinstance(sources.counters, StoreCounters):
        gate.context = replace(sources, counters=StoreCounters.for_bundle(store, gate.bundle.data))


class SwappableAuthenticator:
    """The authenticator the transports hold; a reload replaces the one behind it (new registry roles)."""

    def __init__(self, current: Authenticator) -> None:
        self.current = current

    def fixed(self) -> Principal | None:
        return self.current.fixed()

    def bearer(self, token: str) -> Principal | None:
        return self.current.bearer(token)


def open_service(
    bundle: str | Path,
    *,
    store: str | Path,
    ledger: str | Path,
    keyring: Keyring | None = None,
    handlers: Mapping[str, Handler] | None = None,
    plan_cache: str | Path | None = None,
    registry: TrustRegistry | None = None,
    issuer_ids: tuple[str, ...] = (),
    issuer_keyring: Keyring | None = None,
    config: StaticGateConfig | None = None,
    attestations: Path | None = None,
    context: ContextSources | None = None,
    ledger_key: Key | None = None,
    verification: Verification | None = None,
    isolation: str = "process",
) -> GateService:
    """Load the bundle (verified, then planned in a child process), open the store and the ledger.

    ``ledger_key`` is the ledger's writer key: it signs every entry and the checkpoints.
    ``context``: a host embedding the service passes its own sources (else the registry's, the
    configuration's and the attestation file's). ``isolation``: the gate evaluates in worker
    processes (kcp_opa.decide.pool), so an input that crashes rego-cpp costs one decision.
    """
    metrics = Metrics()
    timed = TimedLedger(open_ledger(ledger, durability="group", checkpoint_key=ledger_key), metrics)
    if context is None:
        context = service_context(registry, config, attestations, issuer_keyring)
    gate = Gate.from_bundle(
        bundle, ledger=timed, plan_cache=plan_cache, context=context, verification_keys=verification,
        isolation=isolation,
    )  # fmt: skip
    stores = open_stores(store)
    if keyring is None:  # kept with the store: receipts survive a restart (kcp_opa/service/receiptkey.py)
        keyring = store_receipt_keyring(stores.decisions.seal_key())
    issuers = None
    if registry is not None:
        if not issuer_ids or issuer_keyring is None:
            raise CodedError("--trust needs --issuer-id and the issuer keyring", "issuer_config")
        issuers = ServiceIssuers.load(registry, issuer_ids, issuer_keyring)
    if stores.counters is not None:  # budgets and rate limits count on the service's own store
        with_counters(gate, stores.counters)
    else:  # a PostgreSQL store counts nothing yet (docs/budgets.md): a declared limit is context_missing
        _log.warning("counters_unavailable", reason="the store has no counter store", effect="context_missing")
    return GateService(
        gate,
        store=stores.executions,
        handoffs=stores.handoffs,
        challenges=stores.challenges,
        records=stores.decisions,
        location=stores.location,
        keyring=keyring,
        handlers=handlers,
        metrics=metrics,
        ledger_path=None if is_database(ledger) else Path(ledger),
        registry=registry,
        issuers=issuers,
    )


AuthenticatorFactory = Callable[[TrustRegistry | None, Mapping[str, Any]], Authenticator]


class Reloader:
    """Re-reads :class:`Sources` and swaps the service (and the authenticator) to them, one reload at a time."""

    def __init__(
        self,
        service: GateService,
        sources: Sources,
        authenticator: SwappableAuthenticator | None = None,
        make_authenticator: AuthenticatorFactory | None = None,
    ) -> None:
        self.service, self.sources = service, sources
        self.authenticator, self.make_authenticator = authenticator, make_authenticator
        self._lock = threading.Lock()
        #: Set by ``serve --bundle-source``: polls the source, activating through :meth:`reload_bundle`.
        self.follower: Any = None

    def admin_reload(self, principal: Principal | None) -> dict[str, Any]:
        """``POST /v1/admin/reload``: for a ``service_admin`` only; a refusal or a failure is audited."""

        def work(caller: Principal) -> dict[str, Any]:
            caller.require(Scope.ADMIN, "reload the service")
            return self.reload(caller)

        return self.service.call(principal, "reload", work)

    def admin_mode(self, principal: Principal | None, mode: str) -> dict[str, Any]:
        """``POST /v1/admin/mode``: a ``service_admin`` asks for ``enforce`` or ``log_only``
        (kcp_opa.decide.modes: recorded in the ledger; leaving enforce may need a second admin)."""

        def work(caller: Principal) -> dict[str, Any]:
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
        import hashlib

        if hashlib.sha256(path.read_bytes()).hexdigest() != self.service.gate.bundle.sha256:
            self.reload(bundle=path)

    def reload(self, by: Principal | None = None, *, bundle: Path | None = None) -> dict[str, Any]:
        """Load everything anew, then swap; raise :class:`ReloadError` and keep serving on failure.

        ``bundle`` replaces the bundle path given at start (a follower's new version)."""
        with self._lock:
            before = self.service.gate
            try:
                registry = load_trust(self.sources.trust) if self.sources.trust is not None else None
                ledger = before.audit.ledger if before.audit is not None else None
                issuers, keys = None, None
                if registry is not None:
                    if self.sources.issuer_keyring is None:
                        raise CodedError("--trust needs the issuer keyring", "issuer_config")
                    keys = load_keyring(self.sources.issuer_keyring)
                    issuers = ServiceIssuers.load(registry, self.sources.issuer_ids, keys)
                context = service_context(registry, self.sources.config, self.sources.attestations, keys)
                gate = Gate.from_bundle(
                    bundle or self.sources.bundle,
                    ledger=ledger,
                    plan_cache=self.sources.plan_cache,
                    verification_keys=self.sources.verification,
                    context=context,
                    isolation=before.isolation,
                )
                gate.shadow, gate.modes = before.shadow, before.modes  # both stay across reloads
                counting = before.context.counters if before.context is not None else None
                if isinstance(counting, StoreCounters):  # the same store, the new bundle's limits
                    with_counters(gate, counting.store)
                keyring: Keyring | None = None
                if self.sources.receipt_keyring is not None:
                    keyring = load_keyring(self.sources.receipt_keyring)
                loaded = self.service.load(gate, registry, issuers, keyring)
                authenticator = None
                if self.authenticator is not None and self.make_authenticator is not None:
                    authenticator = self.make_authenticator(registry, gate.bundle.data)
            except (KcpOpaError, ValueError) as exc:  # ValueError: a malformed token hash in the tokens file
                failure = ReloadError(f"reload refused, still serving bundle {before.bundle_revision}: {exc}")
                before.record_refusal(str(exc))
                _log.error("reload_refused", error=str(exc))
                raise failure from None
            self.service.swap(loaded)
            retire_later(before.engine)  # its workers stop once decisions in flight are done
            if self.authenticator is not None and authenticator is not None:
                self.authenticator.current = authenticator
        status = self.service.status()
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
