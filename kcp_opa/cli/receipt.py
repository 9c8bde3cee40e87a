"""The receipt command group: hash, issue, verify, keygen (the KYA reference verbs and flags)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from kcp_opa.authorize.gatedocs import issue_for_gate_document
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import verification_of, verification_options
from kcp_opa.cli.options import (
    action_option,
    file_option,
    keyring_option,
    now_option,
    receipt_option,
    signing_key_option,
    stacked,
    trust_option,
)
from kcp_opa.cli.output import json_errors, read_text
from kcp_opa.compile.bundle import write_atomically
from kcp_opa.core import strictjson
from kcp_opa.core.errors import KeyringError, ReceiptIssueError
from kcp_opa.core.signing import (
    Keyring,
    create_pkcs11_ed25519,
    generate_ed25519,
    hmac_key_from_env,
    load_keyring,
    load_signing_key,
)
from kcp_opa.decide.action import action_hash, parse_action
from kcp_opa.decide.gate import decision_time
from kcp_opa.stores.opening import open_executor_store

#: Receipt commands answer like the KYA reference script: JSON errors on stderr, exit 2.
_receipt_errors = json_errors()


def _load_json(path: str, what: str) -> object:
    text = read_text(path, what)
    try:
        return strictjson.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: duplicate keys, NaN, a 5,000-digit integer
        raise ReceiptIssueError(f"{what} {path} is not valid JSON: {exc}", "invalid_json") from None


def _keyring_for(keyring_path: Path | None, secret_env: str, kid: str) -> Keyring:
    if keyring_path is not None:
        return load_keyring(keyring_path)
    return Keyring({kid: hmac_key_from_env(kid, secret_env)}, kid)


def _key_options(*, keyring_help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The key flags `receipt issue` and `receipt verify` share (the KYA script's, plus --keyring)."""

    return stacked(
        click.option(
            "--secret-env",
            default="KYA_RECEIPT_SECRET",
            show_default=True,
            help="Environment variable holding the HMAC secret (>= 32 bytes); never the secret itself.",
        ),
        click.option("--kid", default="default", show_default=True, help="Key id of the HMAC secret."),
        keyring_option(keyring_help),
    )


@click.group()
def receipt() -> None:
    """Signed one-time delegation receipts (the KYA reference script's verbs and flags).

    \b
    HMAC-SHA256 (KYA-compatible): the secret comes from an environment variable
    (--secret-env, default KYA_RECEIPT_SECRET), never from the command line.
    Ed25519: --keyring FILE (see `kcp-opa receipt keygen`); an executor given the
    public keyring can verify but not issue. Errors: {"ok": false, "error", "code"}
    on stderr, exit 2.
    """


@receipt.command(name="hash")
@action_option("The action intent.")
@_receipt_errors
def receipt_hash(action_path: str) -> None:
    """Print the action's KYA-CJ-1 hash."""
    action = parse_action(read_text(action_path, "action"))
    render.print_json({"ok": True, "action_hash": action_hash(action)})


@receipt.command(name="issue")
@action_option("The action intent.")
@click.option(
    "--decision",
    "decision_path",
    required=True,
    metavar="DECISION.json",
    help="A KYA gate decision document (with control_evidence), from this or another gate.",
)
@_key_options(keyring_help="Sign with the keyring's signing key instead (Ed25519 or HMAC).")
@signing_key_option("Sign with this key instead: a pkcs11: URI (the key stays in the HSM) or a keyring file.")
@click.option("--ttl-seconds", type=int, help="Receipt lifetime, 30..900 [default: the decision's, else 300].")
@file_option("--output", help="Write the receipt here.")
@click.option("--issuer", "gate", metavar="GATE", help="The registered gate that wrote the decision (KYA interop).")
@trust_option("Trust registry (with --issuer).", "trust_path")
@file_option(
    "--bundle",
    "bundle_path",
    help="Bundle compiled with that registry: its control policy judges the evidence (with --issuer).",
)
@file_option("--issuer-keyring", help="Keyring with the HMAC secrets of issuers registered by keyring kid.")
@file_option(
    "--decision-key",
    "decision_key",
    help="Without --issuer: keyring with the key of the gate that signed the decision document"
    " (`controls show --decision-signing-key`); its signature must verify.",
)
@click.option(
    "--accept-unsigned-decision",
    is_flag=True,
    help="Accept a decision document nobody authenticated: with --issuer only from a gate the registry marks"
    " unsigned; without, instead of --decision-key. The receipt says decision_authentication: unsigned.",
)
@now_option("Issue time [default: now].")
@verification_options
@_receipt_errors
def receipt_issue(
    action_path: str,
    decision_path: str,
    secret_env: str,
    kid: str,
    keyring_path: Path | None,
    signing_key: str | None,
    ttl_seconds: int | None,
    output: Path | None,
    gate: str | None,
    trust_path: Path | None,
    bundle_path: Path | None,
    issuer_keyring: Path | None,
    decision_key: Path | None,
    accept_unsigned_decision: bool,
    now: str | None,
    verification_keys: tuple[str, ...],
    verification_scope: str,
) -> None:
    """Issue a receipt: only for an APPROVED decision whose required controls all PASSED.

    The decision document must be signed by the gate that wrote it and verify with
    --decision-key (or be taken unsigned with --accept-unsigned-decision, marked in the receipt).
    A KYA reference decision from another gate (items without per-item decision_id and
    action_hash) is accepted with --issuer GATE --trust REGISTRY --bundle BUNDLE when the
    registry lists GATE as a gate allowed to attest those controls; its items are then bound
    by the document's own ids and judged by the bundle's control policy.
    """
    action = parse_action(read_text(action_path, "action"))
    decision = _load_json(decision_path, "decision")
    if not isinstance(decision, dict):
        raise ReceiptIssueError("a decision document is a JSON object", "invalid_json")
    if signing_key is not None and keyring_path is not None:
        raise KeyringError("give --signing-key or --keyring, not both", "usage")
    key = load_signing_key(signing_key) if signing_key else _keyring_for(keyring_path, secret_env, kid).signer()
    moment = decision_time(now) if now else None
    if gate is not None:
        if trust_path is None or bundle_path is None:
            raise ReceiptIssueError("--issuer needs --trust REGISTRY and --bundle BUNDLE", "usage")
        if decision_key is not None:
            raise ReceiptIssueError("with --issuer the registry's keys verify, not --decision-key", "usage")
        from kcp_opa.authorize.interop import issue_for_foreign_decision
        from kcp_opa.compile.bundle import read_bundle
        from kcp_opa.declare.trust import load_trust

        receipt = issue_for_foreign_decision(
            decision,
            action,
            key,
            gate=gate,
            registry=load_trust(trust_path),
            bundle=read_bundle(bundle_path, verification=verification_of(verification_keys, verification_scope)),
            keyring=load_keyring(issuer_keyring) if issuer_keyring is not None else None,
            ttl_seconds=ttl_seconds,
            now=moment,
            accept_unsigned=accept_unsigned_decision,
        )
    else:
        receipt = issue_for_gate_document(
            decision,
            action,
            key,
            decision_keys=load_keyring(decision_key) if decision_key is not None else None,
            accept_unsigned=accept_unsigned_decision,
            ttl_seconds=ttl_seconds,
            now=moment,
        )
    issued = receipt.to_dict()
    if output is not None:
        write_atomically(output, json.dumps(issued, indent=2).encode("utf-8") + b"\n")
    render.print_json(issued)


@receipt.command(name="verify")
@action_option("The final action intent.")
@receipt_option("The receipt.")
@click.option(
    "--policy-version",
    "policy_versions",
    required=True,
    multiple=True,
    help="An active policy version (repeat for several during a rollout).",
)
@_key_options(keyring_help="Trust the keys in this keyring (e.g. Ed25519 public keys) instead.")
@click.option(
    "--nonce-db",
    help="Consume the receipt in this store, a SQLite file or a postgresql:// database (without it:"
    " verify only, nothing consumed).",
)
@now_option("Verification time [default: now].")
@_receipt_errors
def receipt_verify(
    action_path: str,
    receipt_path: str,
    policy_versions: tuple[str, ...],
    secret_env: str,
    kid: str,
    keyring_path: Path | None,
    nonce_db: str | None,
    now: str | None,
) -> None:
    """Verify a receipt in the contract's order; with --nonce-db, consume it atomically."""
    action = parse_action(read_text(action_path, "action"))
    candidate = _load_json(receipt_path, "receipt")
    keyring = _keyring_for(keyring_path, secret_env, kid)
    store = open_executor_store(nonce_db) if nonce_db is not None else None
    verified = verify_receipt(
        candidate,
        action,
        keyring=keyring,
        policy_versions=set(policy_versions),
        nonce_store=store,
        now=decision_time(now) if now else None,
    )
    render.print_json({"ok": True, "receipt_id": verified.receipt.receipt_id, "consumed": verified.consumed})


@receipt.command(name="keygen")
@click.option("--kid", required=True, help="Key id for the new Ed25519 key.")
@keyring_option("Private keyring file (created, or extended: the new key becomes the signer).", required=True)
@file_option("--public", "public_path", help="Also write the public keyring here, for executors.")
@click.option("--retire", multiple=True, metavar="KID", help="Retire this kid (it stops verifying).")
@click.option(
    "--pkcs11",
    "pkcs11_uri",
    metavar="URI",
    help="Generate the key pair inside this HSM token instead (pkcs11:token=T;object=LABEL): sensitive, never "
    "extractable; the keyring holds its URI and public key only.",
)
@_receipt_errors
def receipt_keygen(
    kid: str, keyring_path: Path, public_path: Path | None, retire: tuple[str, ...], pkcs11_uri: str | None
) -> None:
    """Add an Ed25519 key and make it the signer; rotate by adding, then retiring the old kid."""
    existing = load_keyring(keyring_path) if keyring_path.exists() else Keyring({}, None)
    if kid in existing.keys:
        raise KeyringError(f"kid {kid} is already in {keyring_path}", "duplicate_kid")
    keys = dict(existing.keys)
    keys[kid] = create_pkcs11_ed25519(pkcs11_uri, kid=kid) if pkcs11_uri else generate_ed25519(kid)
    for old in retire:
        if old not in keys:
            raise KeyringError(f"cannot retire {old}: not in the keyring", "unknown_kid")
        keys[old] = keys[old].retire()
    ring = Keyring(keys, kid)
    write_atomically(keyring_path, json.dumps(ring.to_file_dict(include_private=True), indent=2).encode() + b"\n")
    keyring_path.chmod(0o600)
    if public_path is not None:
        write_atomically(public_path, json.dumps(ring.public().to_file_dict(include_private=False), indent=2).encode())
    render.print_json({"ok": True, "signing_kid": kid, "kids": sorted(keys), "retired": sorted(retire)})
