"""A trust registry for the service tests, built in tmp_path with freshly generated Ed25519 keys.

The service signs control results as ``serve-approvals`` (an approval app allowed for every
control a person or provider answers through it); the bundle is compiled with this registry.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES
from netkit import free_port

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.signing import Keyring, generate_ed25519

HOUR, DAY = dt.timedelta(hours=1), dt.timedelta(days=1)
SERVICE_ISSUER = "serve-approvals"
GATE_ISSUER = "serve-gate"  # signs the gate's own standard_audit_logging (its ledger entry)
CONFIRM_ONLY = "confirm-idp"  # a second issuer the service can sign as, allowed for one control only
ANSWERED = [
    "user_confirmation",
    "step_up_authentication",
    "identity_verification",
    "authority_verification",
    "beneficiary_verification",
    "independent_human_approval",
    "compliance_review",
]
#: What the gate knows about the agents (trusted context, docs/contract.md "Facts").
AGENT_FACTS = {
    "agent_scope": ["prepare_payment", "execute_payment"],
    "model": {"id": "treasury-llm", "hosting": "self_hosted"},
}
FACT_ISSUER = "serve-facts"  # attests the subjects' evidence, beneficiary and screening status
#: Attested per subject: the KYA payment's beneficiary is new; evidence current; screening clear.
SUBJECT_FACTS = {"evidence_status": "present", "new_beneficiary": True, "modified_beneficiary": False}
SUBJECT_FACTS["screening_uncertain"] = False
PRINCIPALS = [
    {"id": "local-agent", "type": "ai_agent", **AGENT_FACTS},
    # The KCP auth scopes it holds: all an action through the service may state as principal_scopes.
    {"id": "agent_payments_001", "type": "ai_agent", "auth_scopes": ["payments:read", "ledger:view"], **AGENT_FACTS},
    {"id": "agent_rogue_002", "type": "ai_agent"},  # another agent: it may not touch the others' decisions
    # The subject also holds the approver's role: only the policy's separation of duties stops it.
    {"id": "user_001", "type": "human", "roles": ["customer", "treasury_approver"]},
    {"id": "treasury_approver_anna", "type": "human", "roles": ["treasury_approver"]},
    {"id": "clerk_bob", "type": "human", "roles": ["clerk"]},
    # The reference matrices' other approver roles: compile --trust refuses a role no principal holds.
    {"id": "payroll_controller_paula", "type": "human", "roles": ["payroll_controller"]},
    {"id": "support_manager_max", "type": "human", "roles": ["support_lead", "finance_reviewer", "manager"]},
    {"id": "compliance_officer_omar", "type": "human", "roles": ["compliance_officer", "onboarding_supervisor"]},
    {"id": "kyc-provider", "type": "provider"},
    {"id": "approval-desk", "type": "system"},
    {"id": "kcp-opa-ledger", "type": "system"},  # the actor of the gate's own audit-logging evidence
    {"id": "payments-executor", "type": "executor"},
    {"id": "batch-executor", "type": "executor"},
    {"id": "auditor_ada", "type": "auditor"},
    {"id": "ops_olga", "type": "human", "roles": ["service_admin"]},  # may reload the service
]


def write_registry(work: Path) -> tuple[Path, Path]:
    """The registry YAML and the issuer keyring file (private key; TEST-ONLY, generated per run)."""
    key, idp = generate_ed25519(f"{SERVICE_ISSUER}-ed25519"), generate_ed25519(f"{CONFIRM_ONLY}-ed25519")
    gate, facts = generate_ed25519(f"{GATE_ISSUER}-ed25519"), generate_ed25519(f"{FACT_ISSUER}-ed25519")
    keyring = Keyring({key.kid: key, idp.kid: idp, gate.kid: gate, facts.kid: facts}, key.kid)
    public = {e["kid"]: e["public_key"] for e in keyring.to_file_dict(include_private=False)["keys"]}
    registry = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "service-tests",
        "version": "1.0.0",
        "principals": PRINCIPALS,
        "issuers": [
            {
                "id": SERVICE_ISSUER,
                "type": "approval_app",
                "controls": ANSWERED,
                "keys": [{"kid": key.kid, "alg": "Ed25519", "public_key": public[key.kid]}],
            },
            {
                "id": GATE_ISSUER,
                "type": "gate",
                "controls": ["standard_audit_logging"],
                "keys": [{"kid": gate.kid, "alg": "Ed25519", "public_key": public[gate.kid]}],
            },
            {
                "id": CONFIRM_ONLY,
                "type": "identity_provider",
                "controls": ["user_confirmation"],
                "keys": [{"kid": idp.kid, "alg": "Ed25519", "public_key": public[idp.kid]}],
            },
            {
                "id": FACT_ISSUER,
                "type": "provider",
                "controls": [],
                "facts": sorted(SUBJECT_FACTS),
                "keys": [{"kid": facts.kid, "alg": "Ed25519", "public_key": public[facts.kid]}],
            },
        ],
    }
    write_attestations(work, facts)
    registry_path, keys_path = work / "trust.yaml", work / "issuer-keys.json"
    registry_path.write_text(yaml.safe_dump(registry, sort_keys=False))
    keys_path.write_text(json.dumps(keyring.to_file_dict(include_private=True)))
    keys_path.chmod(0o600)
    return registry_path, keys_path


def write_attestations(work: Path, key: Any) -> Path:
    """``work/attestations.json``: SUBJECT_FACTS for user_001, signed by FACT_ISSUER (valid a day)."""
    from kcp_opa.context import sign_fact

    now = dt.datetime.now(dt.UTC)
    times = {k: (now + d).strftime("%Y-%m-%dT%H:%M:%SZ") for k, d in (("issued_at", -HOUR), ("expires_at", DAY))}
    items = [
        sign_fact({"fact": f, "value": v, "subject_id": "user_001", **times}, FACT_ISSUER, key)
        for f, v in SUBJECT_FACTS.items()
    ]
    path = work / "attestations.json"
    path.write_text(json.dumps(items))
    return path


def context_args(args: list[str]) -> list[str]:
    """A server with --trust also gets its region and the attestations written beside the registry."""
    if "--trust" not in args or "--attestations" in args:
        return []
    attestations = Path(args[args.index("--trust") + 1]).parent / "attestations.json"
    extra = ["--attestations", str(attestations)] if attestations.exists() else []
    return [*extra, "--region", "EU"] if "--region" not in args else extra


def compile_finance(out: Path, trust: Path | None) -> Path:
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(trust_path=trust)
    )
    return out


def write_tokens(work: Path, principals: dict[str, str]) -> Path:
    """A tokens file (hashes only) for ``{token: principal id}``."""
    path = work / "tokens.json"
    hashed = {"sha256:" + hashlib.sha256(t.encode()).hexdigest(): p for t, p in principals.items()}
    path.write_text(json.dumps({"tokens": hashed}))
    return path


def write_receipt_keyring(work: Path) -> Path:
    """One receipt-signing keyring for every replica (TEST-ONLY, generated per run)."""
    key = generate_ed25519("serve-receipts-ed25519")
    path = work / "receipt-keys.json"
    path.write_text(json.dumps(Keyring({key.kid: key}, key.kid).to_file_dict(include_private=True)))
    path.chmod(0o600)
    return path


def start_server(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """``kcp-opa serve --transport http ARGS`` on a free loopback port, once /health answers."""
    port = free_port()
    args = [*args, *context_args(args)]
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--port", str(port), *args]
    return start_process(command, port, env)


def start_process(
    command: list[str], port: int, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``command`` (a server listening on ``port``), once its /health answers."""
    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, cwd=cwd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx2.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"server did not start: {process.stderr.read() if process.stderr else ''}")
        time.sleep(0.1)


def stop_server(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def served_context(registry: Path) -> dict[str, Any]:
    """ServiceConfig settings: the gate's region and the attestations beside ``registry``."""
    return {"region": "EU", "attestations": registry.parent / "attestations.json"}


def open_local(bundle: Path, work: Path, host: Any = None, **settings: Any) -> Any:
    """``open_service`` with the store and the ledger in ``work`` (``settings``: ServiceConfig fields)."""
    from kcp_opa.service.config import ServiceConfig
    from kcp_opa.service.loading import open_service

    config = ServiceConfig(bundle, store=str(work / "service.db"), ledger=str(work / "ledger.jsonl"), **settings)
    return open_service(config, host)


def local_context(subject: str, facts: dict[str, Any] | None = None, **agent: Any) -> Any:
    """Real sources for a service without --trust: the local agent's registry entry (support
    agent, self-hosted model, the support-desk and payment scopes) and ``facts`` (default
    SUBJECT_FACTS) attested for ``subject`` by a fact issuer with a key generated here; the gate
    runs in EU."""
    from kcp_opa.context import ContextSources, RegistrySource, SignedAttestations, StaticGateConfig, sign_fact
    from kcp_opa.declare.trust import TrustRegistry

    key = generate_ed25519(f"{FACT_ISSUER}-local-ed25519")
    public = Keyring({key.kid: key}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    entry = {"actor_role": "support_agent", **AGENT_FACTS, **agent}
    entry["agent_scope"] = [*AGENT_FACTS["agent_scope"], "crm.get_customer", "email.send", "refunds.create"]
    data = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "local",
        "version": "1",
        "principals": [{"id": "local-agent", "type": "ai_agent", **entry}],
        "issuers": [
            {
                "id": FACT_ISSUER,
                "type": "provider",
                "controls": [],
                "facts": sorted(SUBJECT_FACTS),
                "keys": [{"kid": key.kid, "alg": "Ed25519", "public_key": public}],
            }
        ],
    }
    registry = TrustRegistry("(local)", "", data)
    now = dt.datetime.now(dt.UTC)
    times = {k: (now + d).strftime("%Y-%m-%dT%H:%M:%SZ") for k, d in (("issued_at", -HOUR), ("expires_at", DAY))}
    items = [
        sign_fact({"fact": f, "value": v, "subject_id": subject, **times}, FACT_ISSUER, key)
        for f, v in (SUBJECT_FACTS if facts is None else facts).items()
    ]
    return ContextSources(
        registry=RegistrySource(registry),
        config=StaticGateConfig(deployment_region="EU"),
        attestations=SignedAttestations(registry, None, items),
    )
