"""Building the service from its :class:`~kcp_opa.service.config.ServiceConfig`: one loader for
start and reload alike.

:func:`load_gate` reads what a reload replaces (the trust registry, the issuer keys, the context
sources and the bundle's gate); :func:`open_service` adds what lives as long as the process (the
ledger, the stores, the receipt keyring, the handlers, the start mode and the shadow bundle);
:class:`Callers` builds the authenticator from the tokens file or the local agent's token, again
on each reload. Reloading itself (the swap, its audit) is reloading.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.compile.resolution import waivable_codes
from kcp_opa.context import ContextSources, RegistrySource, SignedAttestations, SignedExceptions, StaticGateConfig
from kcp_opa.context.counting import StoreCounters
from kcp_opa.context.posted import PostedAttestations
from kcp_opa.core import strictjson
from kcp_opa.core.errors import CodedError
from kcp_opa.core.files import read_regular
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Keyring, load_keyring, load_signing_key, load_signing_keyring
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.trust import TrustRegistry, load_trust
from kcp_opa.execute.executor import Handler
from kcp_opa.service.callers import LOCAL_AGENT, Authenticator, Principal, StaticAuthenticator
from kcp_opa.service.config import HostParts, ServiceConfig, ServiceConfigError
from kcp_opa.service.desk import GateService
from kcp_opa.service.handlers import binding_gaps, load_handlers
from kcp_opa.service.issuing import ServiceIssuers, bundle_approver_roles, registry_authenticator
from kcp_opa.service.observe import Metrics, TimedLedger
from kcp_opa.service.receiptkey import store_receipt_keyring
from kcp_opa.stores.opening import open_stores
from kcp_opa.stores.protocols import CounterStore, FactStore, LedgerStore
from kcp_opa.trail.locations import is_database, open_ledger

_log = structlog.get_logger("kcp_opa.service")
__all__ = [
    "Callers",
    "LoadedGate",
    "SwappableAuthenticator",
    "load_gate",
    "open_service",
    "service_context",
    "unsignable_warnings",
    "with_counters",
    "with_exceptions",
    "with_posted_facts",
]


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
        registry=RegistrySource(registry) if registry is not None else None,
        config=config,
        attestations=signed,
        metering=signed,  # spend attestations of metering issuers, from the same file
    )


def with_counters(gate: Gate, store: CounterStore) -> None:
    """Count on ``store`` what ``gate``'s bundle declares (``input.context.counters``), beside
    its other context sources; a host's own counter source is kept."""
    sources = gate.context if gate.context is not None else ContextSources()
    if sources.counters is None or isinstance(sources.counters, StoreCounters):
        gate.context = replace(sources, counters=StoreCounters.for_bundle(store, gate.bundle.data))


def with_posted_facts(gate: Gate, store: FactStore, registry: TrustRegistry, keyring: Keyring | None) -> None:
    """Judge the facts issuers post (``POST /v1/facts``, kept in ``store``) with the ``--attestations``
    file's, on every decision (kcp_opa.context.posted); a host's own attestation source is kept."""
    sources = gate.context if gate.context is not None else ContextSources()
    held = sources.attestations
    if held is None:
        held = SignedAttestations(registry, keyring)
    if isinstance(held, SignedAttestations):
        gate.context = replace(sources, attestations=PostedAttestations(held, store))


@dataclass(frozen=True)
class LoadedGate:
    """What :func:`load_gate` read: the gate with its registry and the issuers the service signs as."""

    gate: Gate
    registry: TrustRegistry | None
    issuers: ServiceIssuers | None
    #: The issuer keyring (HMAC issuers' secrets verify their attestations).
    issuer_keys: Keyring | None = None


def load_gate(
    config: ServiceConfig,
    host: HostParts,
    *,
    ledger: LedgerStore | None,
    bundle: Path | None = None,
    isolation: str = "process",
) -> LoadedGate:
    """Read the registry, the issuer keyring, the context sources and the bundle (``bundle``: a
    follower's new version instead of the config's), all before anything is swapped. The gate
    evaluates in worker processes (``isolation``, kcp_opa.decide.pool): an input that crashes
    rego-cpp costs one decision."""
    registry = load_trust(config.trust) if config.trust is not None else None
    issuers, keys = None, None
    if registry is not None:
        if not config.issuer_ids or config.issuer_keyring is None:
            raise CodedError("--trust needs --issuer-id and the issuer keyring", "issuer_config")
        keys = load_keyring(config.issuer_keyring)
        issuers = ServiceIssuers.load(registry, config.issuer_ids, keys)
    context = host.context
    if context is None:
        context = service_context(registry, config.gate_facts(), config.attestations, keys)
    gate = Gate.from_bundle(
        bundle or config.bundle,
        config=GateConfig(
            ledger=ledger,
            plan_cache=config.plan_cache,
            verification=config.verification(),
            context=context,
            isolation=isolation,
        ),
    )
    with_exceptions(gate, registry, config.exceptions, keys)
    return LoadedGate(gate, registry, issuers, keys)


def with_exceptions(gate: Gate, registry: TrustRegistry | None, path: Path | None, keys: Keyring | None) -> None:
    """Apply the signed exceptions at ``path`` (--exceptions, read again on each reload like the
    bundle): verified against the registry, none longer than the bundle's matrix allows; a file
    with one refused entry is refused whole (at start: the server does not start; on reload: the
    exceptions in force stay)."""
    if path is None:
        return
    if registry is None:
        raise ServiceConfigError("--exceptions needs --trust (the registry names their issuers and grantors)")
    lifetime = gate.bundle.parameters.max_exception_lifetime_seconds
    waivable = waivable_codes(gate.bundle.modules)  # an exception waiving another code is refused
    held = SignedExceptions(registry, path=path, keyring=keys, max_lifetime_seconds=lifetime, waivable=waivable)
    gate.context = replace(gate.context if gate.context is not None else ContextSources(), exceptions=held)


def receipt_keyring(config: ServiceConfig) -> Keyring | None:
    """--keyring (read again on each reload) or --signing-key; None: the service's own key."""
    if config.keyring is not None:
        return load_keyring(config.keyring)
    return load_signing_keyring(config.signing_key) if config.signing_key else None


def open_service(config: ServiceConfig, host: HostParts | None = None) -> GateService:
    """Load the bundle (verified, then planned in a child process), open the store and the ledger.

    The ledger is signed by --ledger-key (every entry and the checkpoints); receipts by --keyring,
    --signing-key, or a key derived from the store's secret (kept with the store, so receipts
    survive a restart: receiptkey.py). The start mode (--mode) is recorded like any change.
    """
    host = host or HostParts()
    # The files that are quick to read first: a bad one is refused before the bundle is planned.
    handlers = host.handlers if host.handlers is not None else read_handlers(config.handlers)
    keyring = host.keyring or receipt_keyring(config)
    ledger_key = host.ledger_key or (load_signing_key(config.ledger_key) if config.ledger_key else None)
    metrics = Metrics()
    metrics.backend = "postgresql" if is_database(config.store) else "sqlite"
    metrics.ledger_backend = "postgresql" if is_database(config.ledger) else "file"
    timed = TimedLedger(open_ledger(config.ledger, durability="group", checkpoint_key=ledger_key), metrics)
    loaded = load_gate(config, host, ledger=timed)
    gate = loaded.gate
    stores = open_stores(config.store)
    keyring = keyring or store_receipt_keyring(stores.decisions.seal_key())
    if stores.counters is not None:  # budgets and rate limits count on the service's own store
        with_counters(gate, stores.counters)
    else:  # a store without counters counts nothing (docs/budgets.md): a declared limit is context_missing
        _log.warning("counters_unavailable", reason="the store has no counter store", effect="context_missing")
    if stores.facts is not None and loaded.registry is not None:  # issuers post facts to the shared store
        with_posted_facts(gate, stores.facts, loaded.registry, loaded.issuer_keys)
    service = GateService(
        gate,
        store=stores.executions,
        handoffs=stores.handoffs,
        challenges=stores.challenges,
        records=stores.decisions,
        location=stores.location,
        keyring=keyring,
        handlers=handlers,
        metrics=metrics,
        ledger_path=None if is_database(config.ledger) else Path(config.ledger),
        registry=loaded.registry,
        issuers=loaded.issuers,
    )
    say_binding_gaps(handlers, gate.bundle.data)
    if config.shadow_bundle is not None:
        gate.set_shadow(config.shadow_bundle)
    if config.mode != "enforce":  # the operator's start configuration, recorded like any change
        gate.modes.request(config.mode, "serve:startup", gate.audit)
    gate.modes.second_approval = config.mode_second_approval
    _log.info(  # kcp-opa -v: what this process (a single server or each --workers worker) decides with
        "service_opened",
        bundle_revision=gate.bundle_revision,
        sha256=gate.bundle.sha256,
        store=metrics.backend,
        ledger=metrics.ledger_backend,
        trust=loaded.registry is not None,
    )
    return service


def say_binding_gaps(handlers: Mapping[str, Handler], bundle_data: JsonObject) -> None:
    """One warning line per way the handlers' tools and the bundle's task types do not fit (handlers.py)."""
    for event, fields in binding_gaps(handlers, bundle_data):
        _log.warning(event, **fields)


def unsignable_warnings(service: GateService) -> list[str]:
    """One line per control no --issuer-id may sign: its challenges can never be answered. A server
    says them once at start (a fleet once, from its first ready worker: workers.py)."""
    loaded = service.loaded
    if loaded.registry is None or loaded.issuers is None:
        return []
    return [
        f"warning: no --issuer-id may sign {control}: answers to its challenges are refused issuer_not_allowed "
        f"(add --issuer-id {' or '.join(could)} with its key in the issuer keyring)"
        for control, could in loaded.issuers.unsignable(loaded.registry).items()
    ]


def _read_json(path: Path, what: str) -> object:
    try:
        return strictjson.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        raise ServiceConfigError(f"{path}: cannot read the {what} file: {exc}") from None


def read_handlers(path: Path | None) -> dict[str, Handler]:
    """``{"handlers": {"name": "module:function"}}``, each imported and checked now (handlers.py)."""
    if path is None:
        return {}
    raw = _read_json(path, "handlers")
    spec = raw.get("handlers") if isinstance(raw, dict) else None
    if not isinstance(spec, dict):
        raise ServiceConfigError(f'{path}: expected {{"handlers": {{"name": "module:function"}}}}')
    return load_handlers(spec, base=path.resolve().parent)


def read_token_hashes(path: Path | None) -> dict[str, str]:
    """``{"sha256:<hex>": "principal id"}``: the tokens file holds hashes, never tokens."""
    if path is None:
        return {}
    raw = _read_json(path, "tokens")
    tokens = raw.get("tokens") if isinstance(raw, dict) else None
    if not isinstance(tokens, dict) or not all(isinstance(v, str) for v in tokens.values()):
        raise ServiceConfigError(f'{path}: expected {{"tokens": {{"sha256:<hex>": "principal id"}}}}')
    return tokens


class Callers:
    """Who may call: the registry's principals by token hash (--tokens, re-read on each reload) or
    the stdio --principal; without --trust the local agent, over http with its token from
    ``$token_env`` (read once at start, never from argv or the config)."""

    def __init__(self, config: ServiceConfig, local_token: str | None = None) -> None:
        self.config, self._local_token = config, local_token

    @classmethod
    def at_start(cls, config: ServiceConfig) -> Callers:
        """Refuses (``service_config``) a transport without its callers: with --trust, http needs
        --tokens and stdio --principal; without, http needs the local agent's token (>= 32 characters)."""
        if config.trust is not None:
            if config.transport == "http" and config.tokens is None:
                raise ServiceConfigError("--transport http with --trust needs --tokens (token hashes -> principal ids)")
            if config.transport == "stdio" and config.principal is None:
                raise ServiceConfigError("--transport stdio with --trust needs --principal (the registered caller)")
            return cls(config)
        if config.transport != "http":
            return cls(config)
        token = os.environ.get(config.token_env, "")
        if len(token) < 32:
            raise ServiceConfigError(
                "--transport http without --trust needs the local agent's bearer token (>= 32 characters) "
                f"in ${config.token_env}"
            )
        return cls(config, token)

    def authenticator(self, registry: TrustRegistry | None, bundle: LoadedBundle) -> Authenticator:
        """The authenticator for ``registry`` (the one just loaded) and the bundle's approver roles."""
        if registry is None:
            return StaticAuthenticator({self._local_token: LOCAL_AGENT} if self._local_token else {})
        roles = bundle_approver_roles(bundle)
        hashes = read_token_hashes(self.config.tokens)
        unbound = sorted(p.id for p in registry.principals.values() if p.type == "ai_agent" and p.tenants is None)
        if unbound:  # said at start and at each reload: these agents' stated tenant is believed
            _log.warning("tenants_unbound", agents=unbound[:32], count=len(unbound), effect="tenant_id as stated")
        return registry_authenticator(registry, hashes, stdio=self.config.principal, approver_roles=roles)


class SwappableAuthenticator:
    """The authenticator the transports hold; a reload replaces the one behind it (new registry roles)."""

    def __init__(self, current: Authenticator) -> None:
        self.current = current

    def fixed(self) -> Principal | None:
        return self.current.fixed()

    def bearer(self, token: str) -> Principal | None:
        return self.current.bearer(token)

    def hashed(self, hashed: str) -> Principal | None:
        return self.current.hashed(hashed)
