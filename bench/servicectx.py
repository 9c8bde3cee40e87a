"""The served gate's context for bench_service.py: a trust registry, fact attestations, a region.

A service decides with the facts its registry, configuration and attestations establish; an
agent's own statements are only compared (docs/service.md). Without them the benchmark would
time a hold for missing context. Written to a work directory (keys generated per run, never
kept): the registry names the paying agent (scope, model, hosting) and a fact issuer that
attests the subject's evidence, beneficiary and screening status; the bundle is compiled with
the same registry, as ``--trust`` requires.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from kcp_opa.context import StaticGateConfig, sign_fact
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.trust import load_trust
from kcp_opa.service.loading import service_context

AGENT = "agent_payments_001"
SUBJECT_FACTS = {"evidence_status": "present", "new_beneficiary": True, "modified_beneficiary": False}
SUBJECT_FACTS["screening_uncertain"] = False


def write_context(work: Path, token: str) -> dict[str, Path]:
    """registry, issuer keyring, attestations and tokens files in ``work``."""
    approvals, facts = generate_ed25519("bench-approvals-ed25519"), generate_ed25519("bench-facts-ed25519")
    ring = Keyring({approvals.kid: approvals, facts.kid: facts}, approvals.kid)
    public = {e["kid"]: e["public_key"] for e in ring.to_file_dict(include_private=False)["keys"]}
    agent: dict[str, Any] = {"id": AGENT, "type": "ai_agent", "agent_scope": ["prepare_payment", "execute_payment"]}
    agent["model"] = {"id": "treasury-llm", "hosting": "self_hosted"}
    registry = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "bench-service",
        "version": "1",
        "principals": [agent, {"id": "user_001", "type": "human", "roles": ["customer"]},
                       # compile --trust refuses an approver role of the matrix that no principal holds
                       {"id": "treasury_approver_anna", "type": "human", "roles": ["treasury_approver"]},
                       {"id": "payroll_controller_paula", "type": "human", "roles": ["payroll_controller"]}],
        "issuers": [
            {"id": "bench-approvals", "type": "approval_app", "controls": ["user_confirmation"],
             "keys": [{"kid": approvals.kid, "alg": "Ed25519", "public_key": public[approvals.kid]}]},
            {"id": "bench-facts", "type": "provider", "controls": [], "facts": sorted(SUBJECT_FACTS),
             "keys": [{"kid": facts.kid, "alg": "Ed25519", "public_key": public[facts.kid]}]},
        ],
    }  # fmt: skip
    paths = {name: work / name for name in ("trust.yaml", "issuer-keys.json", "attestations.json", "tokens.json")}
    paths["trust.yaml"].write_text(yaml.safe_dump(registry, sort_keys=False))
    paths["issuer-keys.json"].write_text(json.dumps(ring.to_file_dict(include_private=True)))
    paths["issuer-keys.json"].chmod(0o600)
    now = dt.datetime.now(dt.UTC)
    times = {"issued_at": now - dt.timedelta(hours=1), "expires_at": now + dt.timedelta(days=1)}
    stamps = {k: v.strftime("%Y-%m-%dT%H:%M:%SZ") for k, v in times.items()}
    items = [
        sign_fact({"fact": f, "value": v, "subject_id": "user_001", **stamps}, "bench-facts", facts)
        for f, v in SUBJECT_FACTS.items()
    ]
    paths["attestations.json"].write_text(json.dumps(items))
    hashed = {"sha256:" + hashlib.sha256(token.encode()).hexdigest(): AGENT}
    paths["tokens.json"].write_text(json.dumps({"tokens": hashed}))
    return paths


def serve_args(paths: dict[str, Path]) -> list[str]:
    """``kcp-opa serve`` options for the context (with ``--issuer-id``, which ``--trust`` needs)."""
    return [
        "--trust", str(paths["trust.yaml"]), "--issuer-id", "bench-approvals",
        "--issuer-keyring", str(paths["issuer-keys.json"]), "--tokens", str(paths["tokens.json"]),
        "--attestations", str(paths["attestations.json"]), "--region", "EU",
    ]  # fmt: skip


def in_process_gate(bundle: Path, paths: dict[str, Path], **options: Any) -> Gate:
    """The gate the service builds, in this process: the same registry, attestations and region."""
    registry = load_trust(paths["trust.yaml"])
    context = service_context(registry, StaticGateConfig(deployment_region="EU"), paths["attestations.json"])
    return Gate.from_bundle(bundle, config=GateConfig(context=context, **options))
