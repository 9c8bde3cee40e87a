"""The reference trust registry and its TEST-ONLY issuer keys, for tests that record controls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import REPO

from kcp_opa.authorize.controls import ControlDesk, GateDecision, evidence_for
from kcp_opa.core.signing import Keyring, ReceiptKey, load_keyring
from kcp_opa.declare.trust import TrustRegistry, load_trust

REGISTRY = REPO / "fixtures" / "trust" / "registry.yaml"
TEST_KEYS = REPO / "fixtures" / "trust" / "TEST-ONLY-issuer-keys.json"
ISSUER_OF = {
    "standard_audit_logging": "kcp-opa-gate",
    "authority_verification": "kcp-opa-gate",
    "user_confirmation": "bank-idp",
    "identity_verification": "bank-idp",
    "step_up_authentication": "otp-service",
    "beneficiary_verification": "bank-registry",
    "independent_human_approval": "approval-app",
    "compliance_review": "approval-app",
}


def registry() -> TrustRegistry:
    return load_trust(REGISTRY)


def issuer_keys() -> Keyring:
    return load_keyring(TEST_KEYS)


def issuer_key(issuer: str) -> ReceiptKey:
    return issuer_keys().keys[f"{issuer}-ed25519-test"]


def make_desk(gate: Any, **kwargs: Any) -> ControlDesk:
    return ControlDesk(gate, registry(), gate_key=issuer_key("kcp-opa-gate"), **kwargs)


def signed(
    record: GateDecision,
    control: str,
    actor: str,
    *,
    issuer: str | None = None,
    status: str = "PASSED",
    done: str = "2026-11-29T10:01:00Z",
    reference: str | None = None,
) -> dict[str, Any]:
    """One attestation for ``control`` by ``actor``, signed by its usual issuer (or ``issuer``)."""
    by = issuer or ISSUER_OF[control]
    (item,) = evidence_for(
        record,
        [control],
        issuer=by,
        key=issuer_key(by),
        actor_id=actor,
        completed_at=done,
        reference=reference or f"ev:{control}",
        status=status,
    )
    return item


def compile_with_trust(out: Path) -> Path:
    from conftest import DEPLOYMENTS, POLICIES

    from kcp_opa.compile.compiler import compile_bundle

    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, trust_path=REGISTRY)
    return out
