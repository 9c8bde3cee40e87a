"""``kcp-opa serve``: the gate as an MCP server (stdio or streamable HTTP) with an HTTP JSON API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.keys import signing_key_option
from kcp_opa.core import strictjson
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.files import read_regular
from kcp_opa.core.signing import Keyring, load_keyring, load_signing_key, load_signing_keyring


class ServeConfigError(KcpOpaError):
    """A serve option or file that cannot be used (exit 2)."""


def _handlers(path: Path | None) -> dict[str, Any]:
    from kcp_opa.service.handlers import load_handlers

    if path is None:
        return {}
    try:
        raw = strictjson.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        raise ServeConfigError(f"{path}: cannot read the handlers file: {exc}") from None
    spec = raw.get("handlers") if isinstance(raw, dict) else None
    if not isinstance(spec, dict):
        raise ServeConfigError(f'{path}: expected {{"handlers": {{"name": "module:function"}}}}')
    return load_handlers(spec, base=path.resolve().parent)


def _token_hashes(path: Path | None) -> dict[str, str]:
    """``{"sha256:<hex>": "principal id"}``: the tokens file holds hashes, never tokens."""
    if path is None:
        return {}
    try:
        raw = strictjson.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        raise ServeConfigError(f"{path}: cannot read the tokens file: {exc}") from None
    tokens = raw.get("tokens") if isinstance(raw, dict) else None
    if not isinstance(tokens, dict) or not all(isinstance(v, str) for v in tokens.values()):
        raise ServeConfigError(f'{path}: expected {{"tokens": {{"sha256:<hex>": "principal id"}}}}')
    return tokens


@click.command()
@click.option(
    "--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True, help="MCP transport."
)
@click.option(
    "-b", "--bundle", required=True, type=click.Path(path_type=Path, dir_okay=False), help="Bundle to decide with."
)
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
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("audit/service.jsonl"),
    show_default=True,
    help="The hash-chained audit ledger every decision and refusal is written to.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP listen address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8181, show_default=True, help="HTTP port.")
@click.option(
    "--trust",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Trust registry (the one the bundle was compiled with): principals, roles, evidence issuers.",
)
@click.option(
    "--issuer-id",
    "issuer_ids",
    multiple=True,
    help="With --trust: a registered issuer the service signs control results as (repeatable; per control "
    "the first one allowed for it).",
)
@click.option(
    "--issuer-keyring",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="KCP_OPA_ISSUER_KEYRING",
    show_envvar=True,
    help="With --trust: keyring file holding the issuers' private keys.",
)
@click.option(
    "--tokens",
    "tokens_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help='With --trust and http: JSON {"tokens": {"sha256:<hex>": "principal id"}} (hashes only).',
)
@click.option("--principal", "stdio_principal", help="With --trust and stdio: the registered principal calling.")
@click.option("--keyring", type=click.Path(path_type=Path, dir_okay=False), help="Receipt signing keyring.")
@signing_key_option(
    "Sign receipts with this key instead of --keyring: a pkcs11: URI (the key stays in the HSM; kept across reloads)."
)
@click.option(
    "--ledger-key",
    metavar="URI|KEYRING",
    help="The ledger's writer key (a pkcs11: URI or a keyring file): signs every entry and the checkpoints.",
)
@click.option(
    "--handlers",
    "handlers_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help='JSON file {"handlers": {"name": "module:function"}} that execute_authorized_action may run: '
    "each fn(action), imported from the file's directory or PYTHONPATH and checked at start.",
)
@click.option(
    "--token-env",
    default="KCP_OPA_SERVE_TOKEN",
    show_default=True,
    help="HTTP without --trust: the environment variable holding the local agent's bearer token.",
)
@click.option("--plan-cache", type=click.Path(path_type=Path, file_okay=False), help="rego-cpp plan cache directory.")
@click.option("--otel", is_flag=True, help="Emit OpenTelemetry spans (needs the [otel] extra and a configured SDK).")
@click.option(
    "--bundle-source",
    metavar="URL|PATH",
    help="Follow new bundle versions (HTTP(S) with ETags, a file, a directory); --bundle keeps the last good one.",
)
@click.option(
    "--poll-seconds", type=click.FloatRange(0.05), default=30.0, show_default=True, help="Bundle source poll."
)
@click.option(
    "--mode",
    "start_mode",
    type=click.Choice(["enforce", "log_only"]),
    default="enforce",
    show_default=True,
    help="log_only: decide and archive as usual, but tell callers it was not enforced (recorded).",
)
@click.option("--mode-second-approval", is_flag=True, help="Leaving enforce needs a second service_admin's request.")
@click.option(
    "--shadow-bundle",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A candidate bundle evaluated beside the active one; it never decides (audit shadow-report).",
)
@verification_options
@click.option("--region", help="The gate's deployment region (a gate fact; what an action states is only compared).")
@click.option("--environment", help="The gate's environment (production, staging, ...), a gate fact like --region.")
@click.option(
    "--attestations",
    type=click.Path(path_type=Path, dir_okay=False),
    help="JSON list of signed fact attestations (evidence status, screening, beneficiary); needs --trust.",
)
def serve(
    transport: str,
    bundle: Path,
    store: str,
    ledger: Path,
    host: str,
    port: int,
    trust: Path | None,
    issuer_ids: tuple[str, ...],
    issuer_keyring: Path | None,
    tokens_path: Path | None,
    stdio_principal: str | None,
    keyring: Path | None,
    signing_key: str | None,
    ledger_key: str | None,
    handlers_path: Path | None,
    token_env: str,
    plan_cache: Path | None,
    otel: bool,
    bundle_source: str | None,
    poll_seconds: float,
    start_mode: str,
    mode_second_approval: bool,
    shadow_bundle: Path | None,
    verification_keys: tuple[str, ...],
    verification_scope: str,
    region: str | None,
    environment: str | None,
    attestations: Path | None,
) -> None:
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
    """
    from kcp_opa.context import StaticGateConfig
    from kcp_opa.declare.trust import load_trust
    from kcp_opa.service.desk import GateService
    from kcp_opa.service.identity import LOCAL_AGENT, StaticAuthenticator
    from kcp_opa.service.issuing import bundle_approver_roles, registry_authenticator
    from kcp_opa.service.loading import Reloader, Sources, SwappableAuthenticator
    from kcp_opa.service.observe import enable_tracing

    if trust is None and (issuer_ids or issuer_keyring or tokens_path or stdio_principal):
        raise click.UsageError("--issuer-id, --issuer-keyring, --tokens and --principal need --trust")
    if trust is not None:
        if not issuer_ids or issuer_keyring is None:
            raise click.UsageError("--trust needs --issuer-id and --issuer-keyring (or $KCP_OPA_ISSUER_KEYRING)")
        if transport == "http" and tokens_path is None:
            raise click.UsageError("--transport http with --trust needs --tokens (token hashes -> principal ids)")
        if transport == "stdio" and stdio_principal is None:
            raise click.UsageError("--transport stdio with --trust needs --principal (the registered caller)")
    tokens: dict[str, Any] = {}
    if transport == "http" and trust is None:
        token = os.environ.get(token_env, "")
        if len(token) < 32:
            raise click.UsageError(
                f"--transport http without --trust needs the local agent's bearer token (>= 32 characters) "
                f"in ${token_env}"
            )
        tokens[token] = LOCAL_AGENT
    if keyring is not None and signing_key is not None:
        raise click.UsageError("give --keyring or --signing-key, not both")
    if otel and not enable_tracing():
        raise click.UsageError("--otel needs opentelemetry installed (pip install 'kcp-opa[otel]')")
    registry = load_trust(trust) if trust is not None else None
    verification = verification_of(verification_keys, verification_scope)
    config = StaticGateConfig(deployment_region=region, environment=environment)
    service = GateService.open(
        bundle,
        store=store,
        ledger=ledger,
        keyring=load_keyring(keyring) if keyring is not None else _signing_keyring(signing_key),
        handlers=_handlers(handlers_path),
        plan_cache=plan_cache,
        registry=registry,
        issuer_ids=issuer_ids,
        issuer_keyring=load_keyring(issuer_keyring) if issuer_keyring is not None else None,
        verification=verification,
        config=config,
        attestations=attestations,
        ledger_key=load_signing_key(ledger_key) if ledger_key is not None else None,
    )

    _say_unsignable(service)

    def make_authenticator(loaded: Any, data: Any) -> Any:
        """The callers: the tokens file re-read and resolved in the (re)loaded registry."""
        if loaded is None:
            return StaticAuthenticator(tokens)
        roles = bundle_approver_roles(data)
        return registry_authenticator(loaded, _token_hashes(tokens_path), stdio=stdio_principal, approver_roles=roles)

    if shadow_bundle is not None:
        service.gate.set_shadow(shadow_bundle)
    service.gate.modes.second_approval = mode_second_approval
    if start_mode != "enforce":  # the operator's start configuration, recorded like any change
        service.gate.modes.second_approval = False
        service.gate.modes.request(start_mode, "serve:startup", service.gate.audit)
        service.gate.modes.second_approval = mode_second_approval
    authenticator = SwappableAuthenticator(make_authenticator(registry, service.gate.bundle.data))
    sources = Sources(
        bundle,
        trust,
        issuer_ids,
        issuer_keyring,
        keyring,
        plan_cache,
        verification,
        config=config,
        attestations=attestations,
    )
    reloader = Reloader(service, sources, authenticator, make_authenticator)
    _on_sighup(reloader)
    if bundle_source is not None:
        from kcp_opa.decide.follow import BundleFollower, source_of

        reloader.follower = BundleFollower(
            source_of(bundle_source), reloader.reload_bundle, bundle, interval_seconds=poll_seconds
        )
        reloader.follower.poll_once()
        reloader.follower.start()
    try:
        if transport == "stdio":
            _serve_stdio(service, authenticator)
        else:
            _serve_http(service, authenticator, host, port, reloader)
    finally:
        _checkpoint_on_exit(service)


def _say_unsignable(service: Any) -> None:
    """At start, the controls no --issuer-id may sign (their challenges could never be answered)."""
    loaded = service.loaded
    if loaded.registry is None or loaded.issuers is None:
        return
    for control, could in loaded.issuers.unsignable(loaded.registry).items():
        click.echo(
            f"kcp-opa: warning: no --issuer-id may sign {control}: answers to its challenges are refused "
            f"issuer_not_allowed (add --issuer-id {' or '.join(could)} with its key in the issuer keyring)",
            err=True,
        )


def _checkpoint_on_exit(service: Any) -> None:
    """With --ledger-key, a signed checkpoint of the head this server wrote, when it stops."""
    audit = service.gate.audit
    if audit is None or audit.ledger.checkpoint_key is None:
        return
    try:
        audit.ledger.close()
    except KcpOpaError as exc:
        click.echo(f"kcp-opa: warning: no checkpoint on exit: {exc}", err=True)


def _signing_keyring(signing_key: str | None) -> Keyring | None:
    """--signing-key as the receipt keyring (None: the service makes its own)."""
    return load_signing_keyring(signing_key) if signing_key else None


def _on_sighup(reloader: Any) -> None:
    """SIGHUP reloads in a thread of its own: requests keep being served while the new files load."""
    import signal
    import threading

    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reloader.signal_reload, daemon=True).start())


def _serve_stdio(service: Any, authenticator: Any) -> None:
    from kcp_opa.service.stdio import run_stdio
    from kcp_opa.service.mcpserver import build_server

    principal = authenticator.fixed()
    run_stdio(build_server(service, lambda ctx: principal), service)


def _serve_http(service: Any, authenticator: Any, host: str, port: int, reloader: Any) -> None:
    import uvicorn

    from kcp_opa.service.http import build_app

    click.echo(f"kcp-opa: serving MCP at http://{host}:{port}/mcp and the JSON API at /v1", err=True)
    uvicorn.run(
        build_app(service, authenticator, host=host, reloader=reloader), host=host, port=port, log_level="warning"
    )
