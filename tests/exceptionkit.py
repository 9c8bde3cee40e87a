"""A trust registry that lets a DPO grant exceptions, its TEST-ONLY signing key, and signed files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from kcp_opa.core.signing import Ed25519Key, Keyring, generate_ed25519
from kcp_opa.declare.exceptionfile import sign_exception
from kcp_opa.declare.trust import TrustRegistry, load_trust

ISSUER = "change-board"
GRANTOR = "dpo@example.com"
AGENT = "support-agent/v1"
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def key(kid: str = "change-board-ed25519-test") -> Ed25519Key:
    """TEST-ONLY: generated per call, never leaves memory."""
    return generate_ed25519(kid)


def write_registry(path: Path, signer: Ed25519Key, *, grantor_roles: tuple[str, ...] = ("dpo",)) -> TrustRegistry:
    public = Keyring({signer.kid: signer}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    data: dict[str, Any] = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "exceptions-test",
        "version": "1",
        "exception_grantor_roles": list(grantor_roles),
        "principals": [
            {"id": GRANTOR, "type": "human", "roles": ["dpo"]},
            {"id": "clerk@example.com", "type": "human", "roles": ["support_lead"]},
            {"id": AGENT, "type": "ai_agent", "roles": ["support_agent"], "agent_scope": ["crm.get_customer"]},
        ],
        "issuers": [
            {
                "id": ISSUER,
                "type": "approval_app",
                "controls": [],
                "signs_exceptions": True,
                "keys": [{"kid": signer.kid, "alg": "Ed25519", "public_key": public}],
            },
            {
                "id": "other-app",
                "type": "approval_app",
                "controls": [],
                "keys": [{"kid": signer.kid, "alg": "Ed25519", "public_key": public}],
            },
        ],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_trust(path)


def exception(
    signer: Ed25519Key,
    *,
    issued: dt.datetime,
    expires: dt.datetime,
    issuer: str = ISSUER,
    **fields: Any,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": "EXC-1",
        "scope": {"tenant_id": "tenant_a", "unit": "support-desk/customer-records"},
        "waives": ["field_access_violation"],
        "reason": "read phone to call back about an outage",
        "ticket": "CHG-2231",
        "grantor": GRANTOR,
        "issued_at": issued.strftime(STAMP),
        "expires_at": expires.strftime(STAMP),
        **fields,
    }
    return sign_exception(item, issuer, signer)


def write_file(path: Path, items: list[dict[str, Any]]) -> Path:
    document = {"kind": "kcp-opa/exceptions", "format_version": 1, "name": "support-desk", "exceptions": items}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path
