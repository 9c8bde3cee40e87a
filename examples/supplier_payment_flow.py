"""The whole gate for the KYA supplier payment: decide, controls, receipt, execute, replay.

    make demo     # runs this after the decision table

decide -> record the six controls as attestations signed by the issuers of the trust registry
(fixtures/trust/registry.yaml: an identity provider, the approval app, the beneficiary
registry, the gate itself; an AI agent trying to approve, or declaring itself human, and an
unsigned approval are refused) -> issue an Ed25519 receipt -> the executor, holding only the
public key, verifies and consumes it -> the payment runs once -> the same receipt is refused.

The issuer keys are TEST-ONLY (fixtures/trust/TEST-ONLY-issuer-keys.json): their private
halves are published in this repository, so never register them in a deployment.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from kcp_opa import ContextSources, Gate, GateConfig, RegistrySource, SignedAttestations, Verification, sign_fact
from kcp_opa.authorize.attestations import attestation_bytes
from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.authorize.evidence import evidence_for
from kcp_opa.core.errors import EvidenceRejectedError, ReceiptVerificationError
from kcp_opa.core.signing import Key, Keyring, generate_ed25519, load_keyring
from kcp_opa.declare.trust import load_trust
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.ledger import AuditLedger

ROOT = Path(__file__).resolve().parent.parent
LEDGER = Path(os.environ.get("KCP_OPA_LEDGER", ROOT / "audit" / "demo.jsonl"))
BUNDLES = Path(os.environ.get("KCP_OPA_BUNDLES", ROOT / "bundles"))
#: `make demo` signs the bundles: the public key they must verify under (unset: unsigned bundles).
VERIFY = [os.environ["KCP_OPA_VERIFICATION_KEY"]] if os.environ.get("KCP_OPA_VERIFICATION_KEY") else None
TRUST = ROOT / "fixtures" / "trust"
SIX = [  # control, issuer that attests it, principal who acted
    ("standard_audit_logging", "kcp-opa-gate", "kcp-opa-ledger"),
    ("user_confirmation", "bank-idp", "user_001"),
    ("identity_verification", "bank-idp", "kyc-provider"),
    ("authority_verification", "kcp-opa-gate", "scope-service"),
    ("beneficiary_verification", "bank-registry", "bank-registry"),
    ("independent_human_approval", "approval-app", "treasury_approver_anna"),
]


def main() -> int:
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    action = json.loads((ROOT / "fixtures" / "kya-supplier-payment-action.json").read_text())
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    issuer_keys = load_keyring(TRUST / "TEST-ONLY-issuer-keys.json").keys

    def key_of(issuer: str) -> Key:
        return issuer_keys[f"{issuer}-ed25519-test"]

    registry = load_trust(TRUST / "registry.yaml")
    # What the gate knows: the agent's scope and model from the registry, the beneficiary and
    # screening status attested by the beneficiary registry (never what the action says).
    expires = (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    attested = [
        sign_fact(
            {"fact": fact, "value": value, "subject_id": "user_001", "issued_at": stamp, "expires_at": expires},
            "bank-registry",
            key_of("bank-registry"),
        )
        for fact, value in (("new_beneficiary", True), ("modified_beneficiary", False), ("screening_uncertain", False))
    ]
    sources = ContextSources(
        registry=RegistrySource(registry), attestations=SignedAttestations(registry, None, attested)
    )
    verification = Verification.from_specs(VERIFY or ())
    config = GateConfig(ledger=AuditLedger(LEDGER), context=sources, verification=verification)
    gate = Gate.from_bundle(BUNDLES / "finance.tar.gz", config=config)
    desk = ControlDesk(gate, registry, gate_key=key_of("kcp-opa-gate"))

    record = desk.open(action, now=now, principal="agent_payments_001")
    d = record.decision
    console.rule("[bold]1. decide")
    console.print(f"{d.decision.value} / {d.authorization_status.value}, risk {d.risk_level.value}")
    console.print(f"action_hash {d.action_hash}")
    console.print(f"missing: {', '.join(d.missing_controls)}")
    console.print(f"[dim]written to {LEDGER} (standard_audit_logging is the ledger's)[/dim]")

    console.rule("[bold]2. controls")
    approval = ["independent_human_approval"]
    console.print(f"[green]PASSED[/] {'standard_audit_logging':28s} by the gate's ledger (signed as kcp-opa-gate)")
    (by_agent,) = evidence_for(
        record,
        approval,
        issuer="approval-app",
        key=key_of("approval-app"),
        actor_id="agent_payments_001",
        completed_at=stamp,
        reference="chat:looks-fine",
    )
    claimed = {k: v for k, v in by_agent.items() if k != "signature"} | {"actor_type": "human"}
    claimed["signature"] = {"alg": "Ed25519", "kid": key_of("approval-app").kid}
    claimed["signature"]["value"] = key_of("approval-app").sign(attestation_bytes(claimed))
    unsigned = {k: v for k, v in by_agent.items() if k != "signature"} | {"actor_id": "treasury_approver_anna"}
    attempts = [
        ("the agent approving its own payment", by_agent),
        ("the agent declaring itself human", claimed),
        ("an unsigned approval", unsigned),
    ]
    for label, attempt in attempts:
        try:
            desk.record_control_result(record, attempt, action=action)
        except EvidenceRejectedError as exc:
            console.print(f"[red]refused[/] {label}: {exc.code}")
    for control, issuer, actor in SIX[1:]:  # the ledger satisfies standard_audit_logging itself
        (item,) = evidence_for(
            record,
            [control],
            issuer=issuer,
            key=key_of(issuer),
            actor_id=actor,
            completed_at=stamp,
            reference=f"ev:{control}",
        )
        record = desk.record_control_result(record, item, action=action)
        status = record.decision.authorization_status.value
        console.print(f"[green]PASSED[/] {control:28s} by {actor:24s} signed by {issuer:14s} -> {status}")

    console.rule("[bold]3. receipt")
    signer = generate_ed25519("treasury-ed25519-1")
    receipt = desk.issue(record, signer, now=now)
    console.print(f"{receipt.receipt_id} {receipt.signature.alg} kid={receipt.signature.kid}")
    console.print(f"valid {receipt.issued_at} .. {receipt.expires_at}, nonce {receipt.nonce}")
    # For the auditor's case file: the receipt and the public key that verifies it (never the private one).
    (LEDGER.parent / "demo-receipt.json").write_text(json.dumps(receipt.to_dict(), indent=2) + "\n")
    public = Keyring({signer.kid: signer}).public().to_file_dict(include_private=False)
    (LEDGER.parent / "demo-receipt-keys.json").write_text(json.dumps(public, indent=2) + "\n")

    console.rule("[bold]4. execute (the executor holds the public key only)")
    with tempfile.TemporaryDirectory() as tmp:
        executor = Executor(
            keyring=Keyring({signer.kid: signer}).public(),
            policy_versions={record.decision.policy_version},
            store=SQLiteStore(Path(tmp) / "executor.db"),
            audit=gate.audit,
        )
        result = executor.execute_authorized_action(action, receipt, lambda a: {"payment_ref": "PAY-0001"})
        console.print(f"[green]executed[/] {result.idempotency_key}: {result.outcome}")
        try:
            executor.execute_authorized_action(action, receipt, lambda a: {"payment_ref": "PAY-0002"})
        except ReceiptVerificationError as exc:
            console.print(f"[red]refused[/] the same receipt again: {exc.code}")
        mutated = {**action, "amount": {"value_minor": 8_000_000, "currency": "USD"}}
        try:
            executor.execute_authorized_action(mutated, receipt, lambda a: {"payment_ref": "PAY-0003"})
        except ReceiptVerificationError as exc:
            console.print(f"[red]refused[/] the receipt for a changed amount: {exc.code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
