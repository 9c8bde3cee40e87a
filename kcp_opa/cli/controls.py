"""The controls command group: challenge, record, show, issue (decide -> controls -> receipt).

State between commands is a control-record file sealed with the desk's HMAC key (from an
environment variable, never argv): an edited file is refused, and loading it re-decides and
replays every signed attestation through the bundle's control policy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.gatedocs import sign_decision_document
from kcp_opa.authorize.sealedrecords import export_record, load_record
from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.keyarg import signer_from
from kcp_opa.cli.options import (
    action_option,
    file_option,
    keyring_option,
    now_option,
    signing_key_option,
    stacked,
    trust_option,
)
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, json_errors, read_text
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.core.errors import CodedError, KeyringError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.signing import MIN_SECRET_BYTES, load_keyring, load_signing_key
from kcp_opa.decide.action import parse_action
from kcp_opa.decide.gate import Gate, decision_time
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.trust import load_trust
from kcp_opa.trail.ledger import AuditLedger


def _exit_code(exc: CodedError) -> int:
    """Exit 1 for refused evidence, 2 for usage and I/O (a key that cannot be loaded)."""
    return EXIT_USAGE if isinstance(exc, KeyringError) else EXIT_INVALID


_errors = json_errors(_exit_code)


#: The control record file every controls command but attest reads or writes.
RECORD = file_option("--record", "record_path", required=True)


def _desk_options(fn: Callable[..., None]) -> Callable[..., None]:
    options = stacked(
        file_option("--bundle", "bundle", required=True),
        trust_option(None, "trust", required=True),
        click.option(
            "--seal-secret-env",
            default="KCP_OPA_DESK_SECRET",
            show_default=True,
            help="Environment variable with the desk's sealing secret (>= 32 bytes).",
        ),
        file_option("--issuer-keyring", help="HMAC secrets of issuers registered by keyring kid."),
        click.option(
            "--gate-keyring",
            metavar="KEYRING|URI",
            help="Private keyring (or pkcs11: URI) whose key signs the gate's own attestations (audit logging).",
        ),
        file_option("--ledger", help="Audit ledger (JSONL)."),
        file_option(
            "--context",
            "context_path",
            help="What the gate knows (as `kcp-opa decide --context`); without it or --principal every gate "
            "fact is missing.",
        ),
        click.option(
            "--principal",
            help="The registered principal the action is decided for; its facts from --trust (`decide --principal`).",
        ),
        click.option("--region", help="The gate's deployment region (as `decide --region`)."),
        click.option("--environment", help="The gate's environment (as `decide --environment`)."),
        file_option("--attestations", help="Signed fact attestations (as `decide --attestations`)."),
        file_option("--exceptions", help="Signed exceptions (as `decide --exceptions`)."),
    )
    return verification_options(options(fn))


def _desk(
    bundle: Path,
    trust: Path,
    seal_secret_env: str,
    issuer_keyring: Path | None,
    gate_keyring: str | None,
    ledger: Path | None,
    verification_keys: tuple[str, ...] = (),
    verification_scope: str = "",
    context_path: Path | None = None,
    principal: str | None = None,
    region: str | None = None,
    environment: str | None = None,
    attestations: Path | None = None,
    exceptions: Path | None = None,
) -> ControlDesk:
    secret = os.environ.get(seal_secret_env, "").encode("utf-8")
    if len(secret) < MIN_SECRET_BYTES:
        raise KeyringError(
            f"environment variable {seal_secret_env} must hold the desk's sealing secret (>= {MIN_SECRET_BYTES} bytes)",
            "no_secret",
        )
    audit = AuditLedger(ledger) if ledger is not None else None
    verification = verification_of(verification_keys, verification_scope)
    gate = Gate.from_bundle(bundle, config=GateConfig(ledger=audit, verification=verification))
    sources = (principal, region, environment, attestations, exceptions)
    if context_path is not None:
        from kcp_opa.authoring.casecontext import vouching
        from kcp_opa.cli.decide import declared_context

        if any(given is not None for given in sources):
            raise KeyringError("--context declares the facts itself: give it or --principal/--region/...", "usage")
        gate = vouching(gate, declared_context(context_path), str(context_path))
    elif any(given is not None for given in sources):
        from kcp_opa.cli.decide import deployment_context

        if principal is None:
            raise KeyringError("--region, --attestations and --exceptions go with --principal (as in decide)", "usage")
        deployment_context(gate, trust, region, environment, attestations, exceptions, issuer_keyring)
    return ControlDesk(
        gate,
        load_trust(trust),
        keyring=load_keyring(issuer_keyring) if issuer_keyring is not None else None,
        gate_key=load_signing_key(gate_keyring) if gate_keyring is not None else None,
        seal_key=secret,
    )


def _summary(record: GateDecision) -> JsonDict:
    decision = record.decision
    return {
        "ok": True,
        "decision_id": decision.decision_id,
        "action_hash": decision.action_hash,
        "decision": decision.decision.value,
        "authorization_status": decision.authorization_status.value,
        "required_controls": list(decision.required_controls),
        "missing_controls": list(decision.missing_controls),
        "control_evidence": [
            {k: e.to_dict()[k] for k in ("control", "status", "actor_type", "actor_id", "issuer")}
            for e in record.evidence
        ],
    }


def _write(path: Path, document: object) -> None:
    write_atomically(path, json.dumps(document, indent=2).encode("utf-8") + b"\n")


def _read_json(path: str, what: str) -> object:
    try:
        return json.loads(read_text(path, what))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CodedError(f"{what} {path} is not valid JSON: {exc}", "invalid_json") from None


@click.group()
def controls() -> None:
    """Control records: open one for a decision, record signed evidence, show it, issue the receipt.

    \b
    kcp-opa controls challenge --bundle B --trust T --action A.json --record R.json
    kcp-opa controls record    --bundle B --trust T --record R.json --evidence E.json --action A.json
    kcp-opa controls show      --bundle B --trust T --record R.json [--decision-out D.json
                               --decision-signing-key K.json]
    kcp-opa controls issue     --bundle B --trust T --record R.json --keyring K.json --output RCPT.json
    """


@controls.command()
@_desk_options
@action_option()
@RECORD
@now_option("Decision time [default: now].")
@_errors
def challenge(action_path: str, record_path: Path, now: str | None, **desk: Any) -> None:
    """Decide the action and open its control record: what the decision still needs."""
    the_desk = _desk(**desk)
    action = parse_action(read_text(action_path, "action"))
    record = the_desk.open(action, now=decision_time(now) if now else None, principal=desk["principal"])
    _write(record_path, export_record(the_desk, record))
    render.print_json(_summary(record))


@controls.command(name="record")
@_desk_options
@RECORD
@click.option("--evidence", "evidence_path", required=True, metavar="ATTESTATION.json")
@action_option("The action as it stands now.")
@_errors
def record_command(record_path: Path, evidence_path: str, action_path: str, **desk: Any) -> None:
    """Record one signed control result (an attestation by a registered issuer)."""
    the_desk = _desk(**desk)
    record = load_record(the_desk, _read_json(str(record_path), "record"))
    action = parse_action(read_text(action_path, "action"))
    record = the_desk.record_control_result(record, _read_json(evidence_path, "evidence"), action=action)
    _write(record_path, export_record(the_desk, record))
    render.print_json(_summary(record))


@controls.command()
@_desk_options
@RECORD
@file_option("--decision-out", help="Write the KYA decision document here.")
@click.option(
    "--decision-signing-key",
    metavar="URI|KEYRING",
    help="Sign the decision document with this key (a pkcs11: URI or a keyring file), so `receipt issue"
    " --decision-key` can tell it from a hand-written one.",
)
@_errors
def show(record_path: Path, decision_out: Path | None, decision_signing_key: str | None, **desk: Any) -> None:
    """Show the record's status, re-derived from its verified evidence."""
    if decision_signing_key is not None and decision_out is None:
        raise KeyringError("--decision-signing-key signs the document --decision-out writes: give both", "usage")
    the_desk = _desk(**desk)
    record = load_record(the_desk, _read_json(str(record_path), "record"))
    if decision_out is not None:
        document = record.to_dict()
        if decision_signing_key is not None:
            document = sign_decision_document(document, load_signing_key(decision_signing_key))
        _write(decision_out, document)
    render.print_json(_summary(record))


@controls.command()
@_desk_options
@RECORD
@keyring_option("Receipt keyring.")
@signing_key_option()
@click.option("--ttl-seconds", type=int, help="Receipt lifetime, 30..900.")
@file_option("--output", help="Write the receipt here.")
@now_option("Issue time [default: now].")
@_errors
def issue(
    record_path: Path,
    keyring_path: Path | None,
    signing_key: str | None,
    ttl_seconds: int | None,
    output: Path | None,
    now: str | None,
    **desk: Any,
) -> None:
    """Issue the receipt for an APPROVED record (re-derived through the policy before signing)."""
    the_desk = _desk(**desk)
    record = load_record(the_desk, _read_json(str(record_path), "record"))
    signer = signer_from(signing_key, keyring_path)
    issued = the_desk.issue(record, signer, ttl_seconds=ttl_seconds, now=decision_time(now) if now else None)
    receipt = issued.to_dict()
    if output is not None:
        _write(output, receipt)
    render.print_json(receipt)


@controls.command()
@click.option("--issuer", required=True, help="The registered issuer signing (e.g. approval-app).")
@keyring_option("Issuer's keyring.")
@click.option("--kid", help="Key id in the keyring [default: its signing kid].")
@signing_key_option()
@click.option("--control", required=True)
@click.option("--status", type=click.Choice(["PASSED", "FAILED"]), default="PASSED", show_default=True)
@click.option("--actor", "actor_id", required=True, help="The registered principal who acted.")
@click.option("--decision-id", required=True)
@click.option("--action-hash", required=True)
@click.option("--reference", "evidence_reference", required=True, help="Evidence reference (never the document).")
@file_option("--output", help="Write the attestation here.")
@now_option("Completion time [default: now].")
@_errors
def attest(
    issuer: str,
    keyring_path: Path | None,
    kid: str | None,
    signing_key: str | None,
    output: Path | None,
    now: str | None,
    **fields: Any,
) -> None:
    """The issuer's side: sign one control result (what an approval app or IdP would send)."""
    from kcp_opa.authorize.attestations import sign_attestation

    completed = decision_time(now).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kid is not None and keyring_path is not None and signing_key is None:
        ring = load_keyring(keyring_path)
        if kid not in ring.keys:
            raise KeyringError(f"kid {kid} is not in {keyring_path}", "unknown_kid")
        key = ring.keys[kid]
    else:
        key = signer_from(signing_key, keyring_path)
    item = sign_attestation({**fields, "completed_at": completed}, issuer, key)
    if output is not None:
        _write(output, item)
    render.print_json(item)
