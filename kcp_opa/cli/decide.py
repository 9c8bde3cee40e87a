"""Commands that evaluate: decide (one gate decision) and eval (any query, like opa eval)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import yaml

from kcp_opa.authoring.casecontext import vouching
from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import load_verified, verification_of, verification_options
from kcp_opa.cli.native import first_native_error, native_stdout_captured
from kcp_opa.cli.options import (
    FORMAT,
    bundle_option,
    choice_option,
    file_option,
    ledger_key_option,
    now_option,
    trust_option,
)
from kcp_opa.cli.output import EXIT_NOT_ALLOWED, as_json, console, read_text
from kcp_opa.core import strictjson
from kcp_opa.core.errors import ActionRejectedError, CodedError, EngineLoadError, LedgerError, QueryError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.signing import load_signing_key
from kcp_opa.decide.action import parse_action
from kcp_opa.decide.crosscheck import opa_query
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.decide.query import evaluate_query
from kcp_opa.trail.ledger import AuditLedger


@click.command()
@bundle_option("Bundle written by `kcp-opa compile`.")
@click.option(
    "-i",
    "--input",
    "--action",
    "input_path",
    required=True,
    metavar="ACTION.json",
    help="The action intent (JSON); '-' reads stdin. --action is the same flag (as in `receipt`).",
)
@now_option("Decision time [default: the current time, UTC].")
@click.option(
    "--with-input",
    is_flag=True,
    help="Print {input, decision}: the exact input evaluated, ready for `eval`/`opa eval`.",
)
@click.option("--enforce", is_flag=True, help="Exit 4 when the decision does not allow execution.")
@file_option("--ledger", help="Append the decision to this audit ledger (JSON Lines; fsynced before printing).")
@ledger_key_option(
    "The ledger's writer key (a pkcs11: URI or a keyring file): it signs each entry and a checkpoint of "
    "the head; a ledger holding entries it did not write is not extended (DENY audit_unavailable)."
)
@click.option(
    "--cross-check",
    is_flag=True,
    help="Also evaluate on the OPA reference engine; any difference is a DENY engine_divergence.",
)
@verification_options
@file_option(
    "--context",
    "context_path",
    help="YAML/JSON: what the gate knows (config, registry, attested; from_action: true vouches for what "
    "the action states; for a host that wrote the action itself). Without it or --trust every gate and "
    "attested fact is missing (docs/contract.md, Facts).",
)
@trust_option(
    "The trust registry, as `serve --trust`: the --principal's role, agent scope and model, and the issuers "
    "of --attestations and --exceptions. The facts are then the service's, never the action's."
)
@click.option(
    "--principal",
    help="With --trust: the registered principal the action is decided for, as the service would authenticate "
    "it; you vouch for it (a --ledger entry is attributed to it when the action names it).",
)
@click.option("--region", help="The gate's deployment region, as `serve --region` (a gate fact).")
@click.option("--environment", help="The gate's environment, as `serve --environment` (a gate fact).")
@file_option("--attestations", help="With --trust: JSON list of signed fact attestations (`kcp-opa facts sign`).")
@file_option(
    "--exceptions", help="With --trust: signed exceptions (`kcp-opa exceptions sign`), verified as `serve` does."
)
@file_option("--issuer-keys", help="With --trust: keyring with HMAC issuers' secrets (Ed25519 keys: the registry).")
@FORMAT
def decide(
    bundle: Path,
    input_path: str,
    now: str | None,
    with_input: bool,
    enforce: bool,
    ledger: Path | None,
    ledger_key: str | None,
    cross_check: bool,
    verification_keys: tuple[str, ...],
    verification_scope: str,
    context_path: Path | None,
    trust: Path | None,
    principal: str | None,
    region: str | None,
    environment: str | None,
    attestations: Path | None,
    exceptions: Path | None,
    issuer_keys: Path | None,
    fmt: str | None,
) -> None:
    """Decide one action with the bundle's policy and print the decision (JSON when piped).

    \b
    Exit codes:
      0  a decision was made (read `decision` and `execution_allowed`)
      1  the action was refused before evaluation (float, secret key, bad shape...),
         or an --exceptions entry the registry does not vouch for
      2  usage error, unreadable file or unusable bundle
      3  internal error
      4  with --enforce: the decision does not allow execution
    An engine failure is not an exit code: it is a DENY with reason `engine_error`.
    """
    action = parse_action(read_text(input_path, "action"))
    if ledger_key is not None and ledger is None:
        raise click.UsageError("--ledger-key needs --ledger")
    key = load_signing_key(ledger_key) if ledger_key is not None else None
    audit = AuditLedger(ledger, checkpoint_key=key) if ledger is not None else None
    config = GateConfig(
        ledger=audit,
        cross_check="opa" if cross_check else None,
        verification=verification_of(verification_keys, verification_scope),
    )
    gate = Gate.from_bundle(bundle, config=config)
    deployment = {"attestations": attestations, "exceptions": exceptions, "issuer_keys": issuer_keys}
    sources = {"trust": trust, "principal": principal, "region": region, "environment": environment, **deployment}
    given = [f"--{name.replace('_', '-')}" for name, value in sources.items() if value is not None]
    if context_path is not None:
        if given:
            raise click.UsageError(f"--context declares the facts itself: give it or {given[0]}, not both")
        gate = vouching(gate, declared_context(context_path), str(context_path))
    elif trust is not None:
        if principal is None:
            raise click.UsageError("--trust needs --principal: the registered principal the action is decided for")
        deployment_context(gate, trust, region, environment, **deployment)
    elif set(given) - {"--region", "--environment"}:
        needing = next(flag for flag in given if flag not in ("--region", "--environment"))
        raise click.UsageError(f"{needing} needs --trust (the registry names the principals and issuers)")
    elif given:
        deployment_context(gate, None, region, environment, None, None, None)
    prepared = gate.prepare(action, now=now, principal=principal)
    decision = gate.decide_prepared(prepared)
    document = decision.to_dict()
    if with_input:
        render.print_json({"input": prepared.document, "decision": document})
    elif as_json(fmt):
        render.print_json(document)
    else:
        render.decision(console(), document)
    if audit is not None and key is not None:
        try:
            audit.close()  # a signed checkpoint of the head, only when this writer wrote it
        except LedgerError as exc:
            click.echo(f"kcp-opa: warning: no checkpoint: {exc}", err=True)
    if enforce and not decision.execution_allowed:
        sys.exit(EXIT_NOT_ALLOWED)


def deployment_context(
    gate: Gate,
    trust: Path | None,
    region: str | None,
    environment: str | None,
    attestations: Path | None,
    exceptions: Path | None,
    issuer_keys: Path | None,
) -> None:
    """Give ``gate`` the context sources `kcp-opa serve` builds from the same options (the same
    functions build them), so the CLI decides on the facts and waivers the service would."""
    from kcp_opa.authorize.controls import registry_mismatch
    from kcp_opa.context import StaticGateConfig
    from kcp_opa.core.signing import load_keyring
    from kcp_opa.declare.trust import load_trust
    from kcp_opa.service.loading import service_context, with_exceptions

    registry = load_trust(trust) if trust is not None else None
    if registry is not None and (mismatch := registry_mismatch(gate.bundle, registry)):  # as serve refuses it
        raise CodedError(mismatch, "registry_mismatch")
    keys = load_keyring(issuer_keys) if issuer_keys is not None else None
    config = StaticGateConfig(deployment_region=region, environment=environment)
    gate.context = service_context(registry, config, attestations, keys)
    with_exceptions(gate, registry, exceptions, keys)


def declared_context(path: Path) -> JsonDict:
    """The --context file, checked against the decision-case schema's context."""
    from kcp_opa.authoring.cases import check_context

    try:
        loaded = yaml.safe_load(read_text(str(path), "context"))
    except yaml.YAMLError as exc:
        raise click.UsageError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    problem = check_context(loaded)
    if problem is not None:
        raise click.UsageError(f"{path}: {problem}")
    return dict(loaded)


@click.command(name="eval")
@bundle_option("Bundle (e.g. the revision an archived decision names).")
@click.option("-i", "--input", "input_path", metavar="INPUT.json", help="The input document; '-' reads stdin.")
@choice_option(
    "-f",
    "--format",
    "fmt",
    choices=("json", "values"),
    default="json",
    help_text="json: opa eval's result document; values: the expression values only.",
)
@choice_option(
    "--engine",
    choices=("regopy", "opa"),
    default="regopy",
    help_text="regopy (the gate's engine) or opa (the Go reference engine, from opa-golib-python-bindings).",
)
@verification_options
@click.argument("query")
def eval_command(
    bundle: Path,
    input_path: str | None,
    fmt: str,
    engine: str,
    verification_keys: tuple[str, ...],
    verification_scope: str,
    query: str,
) -> None:
    """Evaluate QUERY over a bundle, answering as `opa eval -b BUNDLE -i INPUT QUERY` does.

    For auditors: replay an archived input against the bundle revision it names, e.g.
    `kcp-opa eval -b bundle.tar.gz -i input.json data.kcp.gate.decision`, on regopy (the
    engine that decided) or with --engine opa on OPA itself (docs/auditing.md).
    An undefined query prints {} (as opa eval does); an evaluation error exits 2.
    """
    loaded = load_verified(bundle, verification_keys, verification_scope)
    input_doc = None
    if input_path is not None:
        text = read_text(input_path, "input")
        try:
            input_doc = strictjson.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ActionRejectedError("", f"input {input_path} is not valid JSON: {exc}") from None
    if engine == "opa":
        try:
            render.print_json(opa_query(loaded, query, input_doc, values_only=fmt == "values"))
        except EngineLoadError as exc:
            raise QueryError(f"{exc}; or replay with the opa binary (docs/auditing.md)") from None
        return
    with native_stdout_captured() as native:
        try:
            answer = evaluate_query(loaded, query, input_doc, values_only=fmt == "values")
        except QueryError as exc:
            detail = first_native_error(native())
            summary = str(exc).removesuffix(": <error>")
            raise QueryError(f"{summary}: {detail}" if detail else summary) from None
    render.print_json(answer)
