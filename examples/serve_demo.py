"""The KYA supplier payment through the MCP server, over streamable HTTP, by authenticated clients.

    make serve-demo

An agent, the subject, a verification provider, an approver, a receipt issuer and an executor
each hold their own bearer token (the server keeps only sha256 hashes). The agent decides and
opens challenges, and is refused when it tries to approve; each party answers the challenge
addressed to it; the issuer signs the receipt; the executor runs the payment once; the same
receipt again is refused; a call without a token gets 401. Every step is in the ledger.

The principals, their kinds and roles come from the reference trust registry
(fixtures/trust/registry.yaml, which the bundle is compiled with); the server keeps token hashes
mapped to principal ids, as ``kcp-opa serve --trust --tokens`` does. Each answer is signed by the
service as the registered issuer allowed for that control, with the TEST-ONLY keys of
fixtures/trust/TEST-ONLY-issuer-keys.json (published: never trust them in a deployment).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rich.console import Console

from kcp_opa.context import sign_fact
from kcp_opa.core.signing import Keyring, load_keyring
from kcp_opa.declare.trust import load_trust
from kcp_opa.service.callers import token_hash
from kcp_opa.service.config import HostParts, ServiceConfig
from kcp_opa.service.handlers import bound
from kcp_opa.service.http import build_app
from kcp_opa.service.issuing import bundle_approver_roles, registry_authenticator
from kcp_opa.service.loading import open_service

ROOT = Path(__file__).resolve().parent.parent
LEDGER = Path(os.environ.get("KCP_OPA_LEDGER", ROOT / "audit" / "serve-demo.jsonl"))
BUNDLES = Path(os.environ.get("KCP_OPA_BUNDLES", ROOT / "bundles"))
#: `make demo` signs the bundles: the public key they must verify under (unset: unsigned bundles).
VERIFY = [os.environ["KCP_OPA_VERIFICATION_KEY"]] if os.environ.get("KCP_OPA_VERIFICATION_KEY") else None
TRUST = ROOT / "fixtures" / "trust" / "registry.yaml"
TEST_ONLY_KEYS = ROOT / "fixtures" / "trust" / "TEST-ONLY-issuer-keys.json"
#: The registered issuers the service signs answers as (per control, the first allowed for it).
ISSUERS = ("kcp-opa-gate", "bank-idp", "bank-registry", "approval-app")
#: Registered principal ids; the registry says what each is (a system principal may ask for receipts).
PARTIES = {
    "agent": "agent_payments_001",
    "subject": "user_001",
    "provider": "kyc-provider",
    "approver": "treasury_approver_anna",
    "issuer": "scope-service",
    "executor": "payments-executor",
}
ANSWERS = {
    "user_confirmation": "subject",
    "identity_verification": "provider",
    "authority_verification": "provider",
    "beneficiary_verification": "provider",
    "independent_human_approval": "approver",
}


def pay(action: dict[str, Any]) -> dict[str, Any]:
    return {"payment_ref": "PAY-0001", "amount": action["amount"]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def flow(url: str, tokens: dict[str, str], console: Console) -> None:
    action = json.loads((ROOT / "fixtures" / "kya-supplier-payment-action.json").read_text())

    async def call(party: str, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {tokens[party]}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool(tool, args)
        content = result.structured_content if isinstance(result.structured_content, dict) else {}
        return result.is_error, content

    console.rule("[bold]1. the agent decides and opens challenges")
    _, decision = await call("agent", "evaluate_financial_action", {"action": action})
    console.print(
        f"{decision['decision']} / {decision['authorization_status']}: {', '.join(decision['missing_controls'])}"
    )
    _, opened = await call("agent", "create_control_challenge", {"decision_id": decision["decision_id"]})
    ids = {c["control"]: c["challenge_id"] for c in opened["challenges"]}
    summary = opened["challenges"][0]["summary"]
    console.print(f"challenge summary: {summary['consequence']}")
    error, refused = await call(
        "agent",
        "record_control_result",
        {"challenge_id": ids["independent_human_approval"], "status": "PASSED", "evidence_reference": "chat:ok"},
    )
    console.print(f"[red]refused[/] the agent approving: {refused['code']}")

    console.rule("[bold]2. each party answers the challenge addressed to it")
    for control, party in ANSWERS.items():
        args = {"challenge_id": ids[control], "status": "PASSED", "evidence_reference": f"ev:{control}"}
        error, answered = await call(party, "record_control_result", args)
        if error:
            raise SystemExit(f"{control}: {answered}")
        status = answered["decision"]["authorization_status"]
        console.print(f"[green]PASSED[/] {control:28s} by {party}:{PARTIES[party]:24s} -> {status}")

    console.rule("[bold]3. the issuer signs, the executor runs it once")
    _, issued = await call("issuer", "issue_delegation_receipt", {"decision_id": decision["decision_id"]})
    receipt = issued["receipt"]
    console.print(f"{receipt['receipt_id']} {receipt['signature']['alg']}, expires {receipt['expires_at']}")
    _, verified = await call("executor", "verify_and_consume_receipt", {"receipt": receipt, "action": action})
    console.print(f"verified and consumed by the executor: {verified['receipt_id']}")
    run = {"action": action, "receipt": receipt, "handler": "pay"}
    _, done = await call("executor", "execute_authorized_action", run)
    console.print(f"[green]executed[/] {done['idempotency_key']}: {done['outcome']['payment_ref']}")
    _, again = await call("executor", "execute_authorized_action", run)
    console.print(f"[red]refused[/] the same receipt again: {again['code']}")
    answer = httpx2.post(f"{url}/v1/data/kcp/gate/decision", json={"input": action})
    console.print(f"[red]refused[/] a call without a token: HTTP {answer.status_code} {answer.json()['code']}")


def attest_subject(keys: Keyring, path: Path) -> Path:
    """What the providers attest about the customer's payment (TEST-ONLY keys): the beneficiary
    registry says the supplier is a new beneficiary and screening is clear, the IdP that the
    evidence is current. The gate reads these, never what the agent's action says."""
    now = dt.datetime.now(dt.UTC)
    times = {"issued_at": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    times["expires_at"] = (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    facts = [
        ("bank-registry", "new_beneficiary", True),
        ("bank-registry", "modified_beneficiary", False),
        ("bank-registry", "screening_uncertain", False),
        ("bank-idp", "evidence_status", "present"),
    ]
    items = [
        sign_fact(
            {"fact": f, "value": v, "subject_id": "user_001", **times}, issuer, keys.keys[f"{issuer}-ed25519-test"]
        )
        for issuer, f, v in facts
    ]
    path.write_text(json.dumps(items))
    return path


def main() -> int:
    console = Console() if sys.stdout.isatty() else Console(width=120)
    tokens = {party: secrets.token_urlsafe(32) for party in PARTIES}
    registry = load_trust(TRUST)
    with tempfile.TemporaryDirectory() as tmp:
        keys = load_keyring(TEST_ONLY_KEYS)
        config = ServiceConfig(
            BUNDLES / "finance.tar.gz",
            # KCP_OPA_STORE=postgresql://... runs the demo on a database, as replicas would share it.
            store=os.environ.get("KCP_OPA_STORE") or str(Path(tmp) / "service.db"),
            ledger=str(LEDGER),
            trust=TRUST,
            issuer_ids=ISSUERS,
            issuer_keyring=TEST_ONLY_KEYS,
            region="EU",
            attestations=attest_subject(keys, Path(tmp) / "attestations.json"),
            verification_keys=tuple(VERIFY or ()),
        )
        service = open_service(config, HostParts(handlers={"pay": bound(pay, "execute_payment")}))
        authenticator = registry_authenticator(
            registry,
            {token_hash(tokens[party]): principal for party, principal in PARTIES.items()},
            approver_roles=bundle_approver_roles(service.gate.bundle),
        )
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(build_app(service, authenticator), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            anyio.run(flow, f"http://127.0.0.1:{port}", tokens, console)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    console.print(f"[dim]ledger: {LEDGER}[/dim]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
