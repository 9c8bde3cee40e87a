"""``kcp-opa serve``: the gate as an MCP server (stdio or streamable HTTP) with an HTTP JSON API.

Each option is a :class:`~kcp_opa.service.config.ServiceConfig` field of the same name; ``--config``
reads them from a JSON file instead (an option given here wins). The service is built from that
one config at start and on every reload."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from kcp_opa.cli.bundlekeys import verification_options
from kcp_opa.cli.options import (
    choice_option,
    dir_option,
    file_option,
    ledger_key_option,
    signing_key_option,
    trust_option,
)
from kcp_opa.core.errors import KcpOpaError

if TYPE_CHECKING:  # the service modules load when serve runs, not with every command
    from kcp_opa.service.callers import Authenticator
    from kcp_opa.service.catalog import Catalog
    from kcp_opa.service.config import ServiceConfig
    from kcp_opa.service.desk import GateService
    from kcp_opa.service.oidc import OidcSettings, RelyingParty
    from kcp_opa.service.reloading import Reloader


@click.command()
@file_option(
    "--config",
    "config_file",
    help="JSON file of settings, named as these options (issuer_ids: a list); options given here win.",
)
@choice_option("--transport", choices=("stdio", "http"), default="stdio", help_text="MCP transport.")
@file_option("-b", "--bundle", help="Bundle to decide with.")
@click.option(
    "--store",
    default="audit/service.db",
    show_default=True,
    envvar="KCP_OPA_STORE",
    show_envvar=True,
    help="SQLite file, or postgresql://user@host/db shared by replicas (password in PGPASSWORD or a"
    " PGPASSFILE): challenges, consumed receipts, executions.",
)
@click.option(
    "--ledger",
    default="audit/service.jsonl",
    show_default=True,
    help="The hash-chained audit ledger every decision and refusal is written to: a JSONL file, or"
    " postgresql://user@host/db (one chain shared by replicas; password in PGPASSWORD or a PGPASSFILE).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP listen address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8181, show_default=True, help="HTTP port.")
@trust_option("Trust registry (the one the bundle was compiled with): principals, roles, evidence issuers.")
@click.option(
    "--issuer-id",
    "issuer_ids",
    multiple=True,
    help="With --trust: a registered issuer the service signs control results as (repeatable; per control "
    "the first one allowed for it).",
)
@file_option(
    "--issuer-keyring",
    envvar="KCP_OPA_ISSUER_KEYRING",
    show_envvar=True,
    help="With --trust: keyring file holding the issuers' private keys.",
)
@file_option("--tokens", help='With --trust and http: JSON {"tokens": {"sha256:<hex>": "principal id"}} (hashes only).')
@click.option("--principal", help="With --trust and stdio: the registered principal calling.")
@file_option("--keyring", help="Receipt signing keyring.")
@signing_key_option(
    "Sign receipts with this key instead of --keyring: a pkcs11: URI (the key stays in the HSM; kept across reloads)."
)
@ledger_key_option("The ledger's writer key (a pkcs11: URI or a keyring file): signs every entry and the checkpoints.")
@file_option(
    "--handlers",
    help='JSON file {"handlers": {"name": "module:function"}} that execute_authorized_action may run: '
    "each fn(action), imported from the file's directory or PYTHONPATH and checked at start.",
)
@click.option(
    "--token-env",
    default="KCP_OPA_SERVE_TOKEN",
    show_default=True,
    help="HTTP without --trust: the environment variable holding the local agent's bearer token.",
)
@dir_option("--plan-cache", help="rego-cpp plan cache directory.")
@click.option("--otel", is_flag=True, help="Emit OpenTelemetry spans (needs the [otel] extra and a configured SDK).")
@click.option(
    "--bundle-source",
    metavar="URL|PATH",
    help="Follow new bundle versions (HTTP(S) with ETags, a file, a directory); --bundle keeps the last good one.",
)
@click.option(
    "--poll-seconds", type=click.FloatRange(0.05), default=30.0, show_default=True, help="Bundle source poll."
)
@choice_option(
    "--mode",
    choices=("enforce", "log_only"),
    default="enforce",
    help_text="log_only: decide and archive as usual, but tell callers it was not enforced (recorded).",
)
@click.option("--mode-second-approval", is_flag=True, help="Leaving enforce needs a second service_admin's request.")
@file_option(
    "--shadow-bundle",
    help="A candidate bundle evaluated beside the active one; it never decides (audit shadow-report).",
)
@verification_options
@click.option("--region", help="The gate's deployment region (a gate fact; what an action states is only compared).")
@click.option("--environment", help="The gate's environment (production, staging, ...), a gate fact like --region.")
@file_option(
    "--attestations",
    help="JSON list of signed fact attestations (evidence status, screening, beneficiary); needs --trust.",
)
@file_option(
    "--exceptions", help="Signed, expiring exceptions (kind kcp-opa/exceptions); needs --trust; re-read on reload."
)
@click.option(
    "--authzen-obligation",
    "authzen_obligations",
    multiple=True,
    metavar="NAME",
    help="An obligation the AuthZEN gateway in front enforces (repeatable): an ALLOW owing another than these "
    "and audit answers decision false, naming it (e.g. redact_content under no-logging).",
)
@click.option(
    "--public-url",
    metavar="ORIGIN",
    help="The origin gateways reach this server at (https://pdp.example.com): the AuthZEN metadata names it "
    "as the policy decision point [default: the URL each request reached].",
)
@click.option(
    "--oidc-issuer",
    metavar="URL",
    help="UI single sign-on: the OpenID Connect provider (https; its /.well-known/openid-configuration is read). "
    "Needs --trust, --oidc-client-id and --oidc-users.",
)
@click.option("--oidc-client-id", metavar="ID", help="With --oidc-issuer: this service's client id at the provider.")
@file_option(
    "--oidc-client-secret-file",
    help="With --oidc-issuer: a file (mode 0600) holding the client secret; else $KCP_OPA_OIDC_CLIENT_SECRET; "
    "neither: a public client (PKCE only). Register <origin>/ui/sso/callback as the redirect URI.",
)
@file_option(
    "--oidc-users",
    help='With --oidc-issuer: JSON {"claim": "email"|"sub", "users": {"<claim value>": "<principal id>"}}: who may '
    "sign in, as which registered principal (its roles from --trust); anyone else is refused.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="With http: worker processes sharing the port, each with its own gate; supervised (a dead one is "
    "restarted), reloaded together (SIGHUP to any of them; all or it fails), /metrics labelled by worker.",
)
@click.pass_context
def serve(ctx: click.Context, /, config_file: Path | None, **options: Any) -> None:
    """Serve the gate: the seven KYA tools plus evaluate_action and hash_action.

    \b
    stdio: the caller is one local agent principal (it may evaluate, hash, open challenges),
           or with --trust the registered --principal.
    http:  MCP at /mcp and the JSON API at /v1/... on one port, bearer tokens per principal;
           without --trust the local agent's token comes from $KCP_OPA_SERVE_TOKEN (never argv),
           with --trust the --tokens file maps token hashes to registered principals.
    Control results are recorded only with --trust: the service signs each answer as a
    registered --issuer-id, with its key from --issuer-keyring (or $KCP_OPA_ISSUER_KEYRING).
    SIGHUP (or POST /v1/admin/reload by a service_admin) re-reads the bundle, registry, tokens
    and keyrings and swaps them in only if they all load; replicas share --store and --keyring.
    --bundle-source polls for new bundle versions and reloads each (verified with
    --verification-key); a version that does not load keeps the old one serving (GET /v1/status).
    The UI at /ui signs in with a token, or with --oidc-issuer through your OpenID Connect provider
    (authorization code + PKCE): --oidc-users maps each person to a registered principal. UI
    sessions live in --store, so replicas on one PostgreSQL share them.
    --workers N (http): N supervised processes share the port, each with its own gate; a reload
    reaches every one of them or answers that it failed (docs/deployment.md, "Sizing").
    """
    from kcp_opa.service import tools
    from kcp_opa.service.config import ServiceConfig, ServiceConfigError
    from kcp_opa.service.loading import Callers, SwappableAuthenticator, open_service
    from kcp_opa.service.observe import enable_tracing
    from kcp_opa.service.reloading import Reloader

    workers = options.pop("workers")
    given = {k: v for k, v in options.items() if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
    try:
        if config_file is not None:
            config = ServiceConfig.from_file(config_file, given)
        elif options["bundle"] is None:
            raise click.UsageError("--bundle (or --config FILE naming one) is required")
        else:
            config = ServiceConfig(**options)
        callers = Callers.at_start(config)
    except ServiceConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if config.otel and not enable_tracing():
        raise click.UsageError("--otel needs opentelemetry installed (pip install 'kcp-opa[otel]')")
    sso_settings = _sso_settings(config)  # its files read before the bundle is loaded: a bad one fails fast
    if workers > 1:
        _serve_workers(config, workers)
        return
    service = open_service(config)
    _say_unsignable(service)
    sso = _single_sign_on(sso_settings, service)
    authenticator = SwappableAuthenticator(callers.authenticator(service.registry, service.gate.bundle))
    reloader = Reloader(service, config, authenticator=authenticator, callers=callers)
    _on_sighup(reloader)
    if config.bundle_source is not None:
        from kcp_opa.decide.follow import BundleFollower, source_of

        reloader.follower = BundleFollower(
            source_of(config.bundle_source), reloader.reload_bundle, config.bundle, interval_seconds=config.poll_seconds
        )
        reloader.follower.poll_once()
        reloader.follower.start()
    catalog = tools.CATALOG  # read now: the tools this process serves (tools.py)
    _stop_on_sigterm()
    try:
        if config.transport == "stdio":
            _serve_stdio(service, authenticator, catalog)
        else:
            _serve_http(service, authenticator, config, reloader, catalog, sso)
    finally:
        _checkpoint_on_exit(service)


def _serve_workers(config: ServiceConfig, workers: int) -> None:
    """--workers N: the supervisor binds the port and runs N workers (kcp_opa.service.workers)."""
    from kcp_opa.service.workers import run_workers

    if config.transport != "http":
        raise click.UsageError("--workers needs --transport http (stdio serves one caller)")
    if config.bundle_source is not None:
        raise click.UsageError(
            "--workers with --bundle-source: follow the source with one worker, or SIGHUP the fleet to reload it"
        )
    raise SystemExit(run_workers(config, workers))


def _say_unsignable(service: GateService) -> None:
    """At start, the controls no --issuer-id may sign (their challenges could never be answered)."""
    from kcp_opa.service.loading import unsignable_warnings

    for line in unsignable_warnings(service):
        click.echo(f"kcp-opa: {line}", err=True)


class _Stopped(SystemExit):
    """SIGTERM (an orchestrator's stop): unwinds the serving loop so the exit checkpoint is written."""


def _stop_on_sigterm() -> None:
    import signal

    def stop(signum: int, frame: object) -> None:
        click.echo("kcp-opa: stopping (SIGTERM)", err=True)
        raise _Stopped(0)

    signal.signal(signal.SIGTERM, stop)


def _checkpoint_on_exit(service: GateService) -> None:
    """With --ledger-key, a signed checkpoint of the head this server wrote, when it stops."""
    audit = service.gate.audit
    if audit is None or audit.ledger.checkpoint_key is None:
        return
    try:
        audit.ledger.close()
    except KcpOpaError as exc:
        click.echo(f"kcp-opa: warning: no checkpoint on exit: {exc}", err=True)


def _on_sighup(reloader: Reloader) -> None:
    """SIGHUP reloads in a thread of its own: requests keep being served while the new files load."""
    import signal
    import threading

    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reloader.signal_reload, daemon=True).start())


def _serve_stdio(service: GateService, authenticator: Authenticator, catalog: Catalog) -> None:
    from kcp_opa.service.mcpserver import build_server
    from kcp_opa.service.stdio import run_stdio

    principal = authenticator.fixed()
    run_stdio(build_server(service, lambda ctx: principal, catalog), service)


def _sso_settings(config: ServiceConfig) -> OidcSettings | None:
    """The UI's single sign-on settings (None without --oidc-issuer); a bad file is a usage error."""
    from kcp_opa.service.oidc import OidcConfigError, settings_from

    try:
        return settings_from(
            config.oidc_issuer, config.oidc_client_id, config.oidc_client_secret_file, config.oidc_users
        )
    except OidcConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _single_sign_on(settings: OidcSettings | None, service: GateService) -> RelyingParty | None:
    """The UI's relying party (None without settings), every principal its users file names checked in --trust."""
    from kcp_opa.service.oidc import OidcConfigError, RelyingParty, check_principals

    if settings is None:
        return None
    try:
        check_principals(settings, service.registry)
    except OidcConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return RelyingParty(settings)


def _serve_http(service: GateService, authenticator: Authenticator, config: ServiceConfig, reloader: Reloader,
                catalog: Catalog, sso: RelyingParty | None) -> None:  # fmt: skip
    import uvicorn

    from kcp_opa.service.http import build_app
    from kcp_opa.stores.opening import open_session_store

    host, port = config.host, config.port
    click.echo(f"kcp-opa: serving MCP at http://{host}:{port}/mcp and the JSON API at /v1", err=True)
    enforced = frozenset(config.authzen_obligations)
    app = build_app(
        service,
        authenticator,
        host=host,
        reloader=reloader,
        catalog=catalog,
        authzen_obligations=enforced,
        public_url=config.public_url,
        sessions=open_session_store(config.store),  # replicas on one store share the UI's sessions
        sso=sso,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
