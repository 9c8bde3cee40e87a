"""The reference trust registry and its TEST-ONLY issuer keys, for tests that record controls."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import REPO

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.evidence import evidence_for
from kcp_opa.core.signing import ED25519, HMAC_SHA256, Key, Keyring, generate_ed25519, hmac_key, load_keyring
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


def issuer_key(issuer: str) -> Key:
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
    """The finance deployment compiled with the reference registry, written to ``out``.

    Compiled once per content: the bundle is kept in the system temp dir under a key over every
    input (the compiler's and the policies' source, the deployment, the registry, the engine
    versions) and copied to ``out``. mutmut runs a fresh pytest per mutant (docs/testing.md),
    so this turns a 10-15 s compile per mutant into a copy.
    """
    import shutil
    import tempfile

    from conftest import DEPLOYMENTS, POLICIES

    from kcp_opa.compile.compiler import CompileOptions, compile_bundle

    base = DEPLOYMENTS / "finance"
    cached = bundle_cache() / f"finance-{_inputs_key(base)}.tar.gz"
    if not cached.exists():
        partial = Path(tempfile.mkdtemp(dir=bundle_cache())) / "finance.tar.gz"
        compile_bundle(
            [base / "knowledge.yaml"],
            base / "matrix.yaml",
            POLICIES,
            partial,
            options=CompileOptions(trust_path=REGISTRY),
        )
        partial.replace(cached)  # atomic: a parallel run sees the whole bundle or none
        shutil.rmtree(partial.parent, ignore_errors=True)
    shutil.copyfile(cached, out)
    return out


def bundle_cache() -> Path:
    """Where compiled test bundles and their rego-cpp plans are kept between test runs."""
    import tempfile

    path = Path(tempfile.gettempdir()) / f"kcp-opa-test-bundles-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _inputs_key(deployment: Path) -> str:
    import hashlib
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from conftest import POLICIES

    import kcp_opa

    digest = hashlib.sha256(sys.version.encode())
    for dist in ("regopy", "opa-golib-python-bindings"):
        try:
            digest.update(f"{dist}={version(dist)}".encode())
        except PackageNotFoundError:
            digest.update(dist.encode())
    package = Path(kcp_opa.__file__).parent
    files = [f for f in package.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
    files += [*POLICIES.rglob("*.rego"), REGISTRY]
    files += [f for f in deployment.rglob("*") if f.is_file()]
    for path in sorted(files):
        name = path.relative_to(REPO) if path.is_relative_to(REPO) else path  # the same key in every checkout
        digest.update(str(name).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


#: The KYA supplier payment's six controls and who answers each (their usual issuers sign).
KYA_APPROVALS = (
    ("standard_audit_logging", "kcp-opa-ledger"),
    ("user_confirmation", "user_001"),
    ("identity_verification", "kyc-provider"),
    ("authority_verification", "scope-service"),
    ("beneficiary_verification", "bank-registry"),
    ("independent_human_approval", "treasury_approver_anna"),
)


#: The KYA supplier payment every control test opens, and when it is decided.
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
DECIDED = "2026-11-29T10:00:00Z"


def approve_all(
    desk: ControlDesk, action: dict[str, Any] = KYA, now: str = DECIDED, skip: str | None = None
) -> GateDecision:
    """Open ``action`` at the desk and record every KYA approval for it (but ``skip``)."""
    record = desk.open(action, now=now)
    for control, actor in KYA_APPROVALS:
        if control != skip:
            record = desk.record_control_result(record, signed(record, control, actor), action=action)
    return record


def refusal_code(desk: ControlDesk, record: GateDecision, item: Any, action: Any = None) -> str:
    """The code the desk refuses ``item`` with (it must refuse it)."""
    import pytest

    from kcp_opa.core.errors import EvidenceRejectedError

    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(record, item, action=KYA if action is None else action)
    return caught.value.code


#: A receipt signing key of each algorithm the executor accepts, made fresh per call.
RECEIPT_SIGNERS: dict[str, Callable[[], Key]] = {
    HMAC_SHA256: lambda: hmac_key("kya-1", b"kya-receipt-secret-0123456789abcdef"),
    ED25519: lambda: generate_ed25519("ed-1"),
}
