"""What the issuing commands' tests share: a registry whose issuers attest facts and sign waivers,
their TEST-ONLY keys in owner-only keyring files, the support-desk bundle and an action it denies
(reading `phone`, which customer-records does not declare) unless a waiver covers it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.core.signing import Ed25519Key, Keyring, generate_ed25519

AGENT = "support-agent/v1"
ATTESTOR = "kyc-idp"
WAIVER_ISSUER = "change-board"
NOW = "2026-11-29T10:00:00Z"


def keyring_file(path: Path, *keys: Ed25519Key, mode: int = 0o600) -> Path:
    """A private keyring holding ``keys`` (the first signs), created with ``mode``."""
    ring = Keyring({k.kid: k for k in keys}, keys[0].kid).to_file_dict(include_private=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as handle:
        json.dump(ring, handle)
    path.chmod(mode)
    return path


def _public(key: Ed25519Key) -> dict[str, str]:
    entry = Keyring({key.kid: key}).to_file_dict(include_private=False)["keys"][0]
    return {"kid": key.kid, "alg": "Ed25519", "public_key": entry["public_key"]}


def read_action() -> dict[str, Any]:
    """The support-desk cases' base action, reading `phone` as well."""
    cases = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())
    action: dict[str, Any] = cases["base_action"]
    action["knowledge"]["fields_read"] = ["name", "email", "phone"]
    return action


def setup(tmp_path: Path) -> dict[str, Path]:
    """Keys, keyrings, the registry, the action and the support-desk bundle under ``tmp_path``."""
    from kcp_opa.compile.compiler import CompileOptions, compile_bundle

    attestor, board = generate_ed25519("kyc-idp-1"), generate_ed25519("change-board-1")
    action = read_action()
    scope = action["authorization_context"]["agent_scope"]
    model = action["runtime"]["model"]
    registry = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "issuing-test",
        "version": "1",
        "exception_grantor_roles": ["dpo"],
        "principals": [
            {"id": "dpo@example.com", "type": "human", "roles": ["dpo"]},
            {"id": "clerk@example.com", "type": "human", "roles": ["support_lead", "finance_reviewer", "manager"]},
            {"id": AGENT, "type": "ai_agent", "roles": ["support_agent"], "agent_scope": scope, "model": model},
        ],
        "issuers": [
            {"id": ATTESTOR, "type": "identity_provider", "controls": [], "facts": ["evidence_status"],
             "keys": [_public(attestor)]},
            {"id": WAIVER_ISSUER, "type": "approval_app", "controls": [], "signs_exceptions": True,
             "keys": [_public(board)]},
        ],
    }  # fmt: skip
    paths = {
        "registry": tmp_path / "registry.yaml",
        "action": tmp_path / "read.json",
        "attestor_keys": keyring_file(tmp_path / "kyc-idp-keys.json", attestor),
        "board_keys": keyring_file(tmp_path / "change-board-keys.json", board),
        "bundle": tmp_path / "support-desk.tar.gz",
    }
    paths["registry"].write_text(yaml.safe_dump(registry, sort_keys=False), encoding="utf-8")
    paths["action"].write_text(json.dumps(action), encoding="utf-8")
    base = DEPLOYMENTS / "support-desk"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, paths["bundle"],
        options=CompileOptions(engine_check=False, trust_path=paths["registry"]),
    )  # fmt: skip
    return paths


def draft(path: Path, **fields: Any) -> Path:
    """An unsigned exceptions draft: the DPO lets the agent read `phone` on customer-records."""
    entry = {
        "id": "EXC-2231",
        "scope": {"tenant_id": "tenant_a", "unit": "support-desk/customer-records"},
        "waives": ["field_access_violation"],
        "reason": "read phone to call back about the outage",
        "ticket": "CHG-2231",
        "grantor": "dpo@example.com",
        "issued_at": "2026-11-29T09:00:00Z",
        "expires_at": "2026-12-04T18:00:00Z",
        **fields,
    }
    document = {"kind": "kcp-opa/exceptions", "format_version": 1, "name": "support-desk", "exceptions": [entry]}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path
