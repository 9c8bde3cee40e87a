"""A real ``kcp-opa serve`` on the support-desk deployment for the AuthZEN tests, and a gateway.

The gateway is what an MCP or API gateway does, written from the AuthZEN 1.0 text: plain HTTP
``POST`` of a JSON object with ``Content-Type: application/json``, ``Authorization: Bearer``
and ``X-Request-ID``; nothing from kcp-opa is imported to build or read a request.

The support agent ``sd-agent`` (registry: actor role support_agent, the support-desk scopes)
asks about three tool calls an MCP gateway sees: reading a customer record of its own tenant
(ALLOW), reading another tenant's (DENY ``tenant_boundary``), and a refund (HUMAN_APPROVAL).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO
from servicekit import GATE_ISSUER, SERVICE_ISSUER, start_server, stop_server, write_registry, write_tokens

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import sign_fact
from kcp_opa.core.signing import Keyring, generate_ed25519

AGENT = "sd-agent"
OTHER_AGENT = "agent_payments_001"
TOKENS = {AGENT: "t-authzen-agent-" + "a" * 32, OTHER_AGENT: "t-authzen-other-" + "b" * 32}
TOKENS["auditor_ada"] = "t-authzen-auditor-" + "c" * 32
BASE: dict[str, Any] = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]
#: What the attestor vouches for the customer user_001: evidence present, nothing new or uncertain.
SUBJECT_FACTS = {"evidence_status": "present", "new_beneficiary": False, "modified_beneficiary": False}
SUBJECT_FACTS["screening_uncertain"] = False


@dataclass
class Served:
    url: str
    ledger: Path
    bundle: Path
    process: Any


def _registry(work: Path, agent_tenants: list[str] | None = None) -> tuple[Path, Path]:
    """The service tests' registry plus the support agent (bound to ``agent_tenants`` if given)
    and an attestor for user_001's facts."""
    registry_path, keys = write_registry(work)
    registry = yaml.safe_load(registry_path.read_text())
    registry["principals"].append(
        {
            "id": AGENT,
            "type": "ai_agent",
            "actor_role": "support_agent",
            "agent_scope": list(BASE["authorization_context"]["agent_scope"]),
            "model": dict(BASE["runtime"]["model"]),
            "auth_scopes": ["support:read"],
            **({"tenants": agent_tenants} if agent_tenants is not None else {}),
        }
    )
    attestor = generate_ed25519("authzen-attestor-ed25519")
    public = Keyring({attestor.kid: attestor}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    registry["issuers"].append(
        {
            "id": "authzen-attestor",
            "type": "provider",
            "controls": [],
            "facts": sorted(SUBJECT_FACTS),
            "keys": [{"kid": attestor.kid, "alg": "Ed25519", "public_key": public}],
        }
    )
    registry_path.write_text(yaml.safe_dump(registry, sort_keys=False))
    stamps = {"issued_at": "2026-01-01T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}
    items = [
        sign_fact({"fact": f, "value": v, "subject_id": "user_001", **stamps}, "authzen-attestor", attestor)
        for f, v in SUBJECT_FACTS.items()
    ]
    (work / "attestations.json").write_text(json.dumps(items))  # serve reads the file beside the registry
    return registry_path, keys


def serve(
    work: Path,
    agent_tenants: list[str] | None = None,
    *,
    deployments: Path = DEPLOYMENTS,
    extra: tuple[str, ...] = (),
) -> Iterator[Served]:
    """The server (a generator for a pytest fixture): support-desk bundle (from ``deployments``),
    --trust, tokens, and ``extra`` serve options."""
    registry, issuer_keys = _registry(work, agent_tenants)
    base = deployments / "support-desk"
    bundle = work / "support-desk.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle, options=CompileOptions(trust_path=registry)
    )
    tokens = write_tokens(work, {token: who for who, token in TOKENS.items()})
    ledger = work / "ledger.jsonl"
    args = ["--bundle", str(bundle), "--store", str(work / "store.db"), "--ledger", str(ledger)]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER]
    args += ["--issuer-keyring", str(issuer_keys), "--tokens", str(tokens), *extra]
    process, url = start_server(args)
    try:
        yield Served(url, ledger, bundle, process)
    finally:
        stop_server(process)


# --- the gateway: AuthZEN requests as the spec writes them ---------------------------------------------------------


def subject(agent: str = AGENT) -> dict[str, Any]:
    """The acting agent (AuthZEN subject) with its authorization context as properties."""
    return {
        "type": "agent",
        "id": agent,
        "properties": {
            "requested_by": "user_001",
            "agent_scope": list(BASE["authorization_context"]["agent_scope"]),
            "session_id": "sess_1",
            "principal_scopes": ["support:read"],
        },
    }


def context(tenant: str = "tenant_a", **extra: Any) -> dict[str, Any]:
    """The rest of the action: tenant, the customer the agent acts for, runtime and trace."""
    stated = {"tenant_id": tenant, "subject_id": "user_001", "scenario": "customer_support"}
    return {**stated, "runtime": copy.deepcopy(BASE["runtime"]), "trace": dict(BASE["trace"]), **extra}


def read_customer(tenant: str = "tenant_a", fields: tuple[str, ...] = ("name", "email")) -> dict[str, Any]:
    """``crm.get_customer`` on customer cust_9 of ``tenant`` (tenant_a: the agent's own)."""
    return {
        "subject": subject(),
        "resource": {
            "type": "customer_record",
            "id": "cust_9",
            "properties": {
                "tenant_id": tenant,
                "knowledge": {"project": "support-desk", "unit": "customer-records", "fields_read": list(fields)},
            },
        },
        "action": {"name": "crm.get_customer", "properties": {"action_type": "read"}},
        "context": context(),
    }


def refund(amount_minor: int = 1500) -> dict[str, Any]:
    """``refunds.create`` for order_78: the support-desk matrix holds a refund for a human."""
    return {
        "subject": subject(),
        "resource": {
            "type": "refund",
            "id": "order_78",
            "properties": {
                "tenant_id": "tenant_a",
                "knowledge": {"project": "support-desk", "unit": "refunds", "fields_read": ["order_id", "amount"]},
            },
        },
        "action": {
            "name": "refunds.create",
            "properties": {"action_type": "refund", "amount": {"value_minor": amount_minor, "currency": "EUR"}},
        },
        "context": context(),
    }


def ask(
    url: str, path: str, body: Any, *, who: str = AGENT, request_id: str | None = None, raw: bytes | None = None
) -> httpx2.Response:
    """One gateway call: POST a JSON object, bearer token, X-Request-ID."""
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {TOKENS[who]}",
        "X-Request-ID": request_id or str(uuid.uuid4()),
    }
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx2.post(f"{url}{path}", content=content, headers=headers, timeout=120)


def as_authzen(action: dict[str, Any]) -> dict[str, Any]:
    """An action intent as a gateway asks it (docs/service.md, "AuthZEN": the table, forwards)."""
    rest = ("tenant_id", "subject_id", "scenario", "action_id", "idempotency_key", "created_at", "attributes")
    rest += ("evidence_references", "runtime", "delegation_chain", "trace")
    target = dict(action["target"])
    resource = {"type": target.pop("type"), "id": target.pop("reference"), "properties": target}
    if "knowledge" in action:
        resource["properties"]["knowledge"] = action["knowledge"]
    verb = {"action_type": action["action_type"], **({"amount": action["amount"]} if "amount" in action else {})}
    authorization = {k: v for k, v in action["authorization_context"].items() if k != "authenticated_principal"}
    return {
        "subject": {"type": "agent", "id": action["agent_id"], "properties": authorization},
        "resource": resource,
        "action": {"name": action["requested_action"], "properties": verb},
        "context": {key: action[key] for key in rest if key in action},
    }
