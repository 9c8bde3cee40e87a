"""The budget deployment (fixtures/deployments/budget) and one payment's whole path through it.

Each call builds its own gate, desk and executor on a shared store file, as a separate process
does: decide -> record the required controls -> issue (reserving the budget) -> execute.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from conftest import DEPLOYMENTS, POLICIES, vouched_gate
from trustkit import REGISTRY, _inputs_key, bundle_cache, make_desk, signed

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.context import ContextSources
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.counting import StoreCounters
from kcp_opa.decide.gate import Gate
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite import SQLiteCounterStore, SQLiteStore

SECRET = b"budget-receipt-secret-0123456789abcdef"
KEY = hmac_key("budget-1", SECRET)
T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
ACTORS = {
    "standard_audit_logging": "kcp-opa-ledger",
    "user_confirmation": "user_001",
    "identity_verification": "kyc-provider",
    "authority_verification": "scope-service",
    "beneficiary_verification": "bank-registry",
    "independent_human_approval": "treasury_approver_anna",
}


def compile_budget(out: Path) -> Path:
    """The budget deployment compiled with the reference trust registry (cached per content)."""
    from kcp_opa.compile.compiler import compile_bundle

    base = DEPLOYMENTS / "budget"
    cached = bundle_cache() / f"budget-{_inputs_key(base)}.tar.gz"
    if not cached.exists():
        partial = Path(tempfile.mkdtemp(dir=bundle_cache())) / "budget.tar.gz"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, partial, trust_path=REGISTRY)
        partial.replace(cached)
        shutil.rmtree(partial.parent, ignore_errors=True)
    shutil.copyfile(cached, out)
    return out


def payment(n: int, *, value: int = 100000, beneficiary: str = "supplier_1", **extra: Any) -> dict[str, Any]:
    """A USD payment to a known beneficiary; ``n`` makes its ids unique."""
    return {
        "schema_version": "2.0",
        "action_id": f"act_budget_{n}",
        "idempotency_key": f"idem_budget_payment_{n:06d}",
        "tenant_id": "tenant_demo",
        "subject_id": "user_001",
        "agent_id": "agent_payments_001",
        "action_type": "payment",
        "requested_action": "execute_payment",
        "target": {"type": "beneficiary", "reference": beneficiary, "tenant_id": "tenant_demo"},
        "amount": {"value_minor": value, "currency": "USD"},
        "authorization_context": {
            "requested_by": "user_001",
            "agent_scope": ["prepare_payment", "execute_payment"],
            "session_id": "session_001",
        },
        "attributes": {"new_beneficiary": False},
        "created_at": "2026-11-29T09:59:00Z",
        **extra,
    }


def parts(bundle: Path, store: Path, *, plan_cache: Path | None = None) -> tuple[Gate, ControlDesk, Executor]:
    counters = SQLiteCounterStore(store)
    gate = vouched_gate(bundle, preflight=False, plan_cache=plan_cache)
    gate.context = ContextSources(counters=StoreCounters.for_bundle(counters, gate.bundle.data))
    keyring = Keyring({KEY.kid: KEY}, KEY.kid)
    executor = Executor(keyring=keyring, policy_versions=[gate.policy_version], store=SQLiteStore(store))
    return gate, make_desk(gate), executor


def approve(desk: ControlDesk, action: Mapping[str, Any], now: dt.datetime) -> GateDecision:
    """Open the decision and record every control it requires."""
    record = desk.open(action, now=now)
    for control in record.decision.required_controls:
        if control not in record.passed_controls:
            record = desk.record_control_result(record, signed(record, control, ACTORS[control]), action=action)
    return record


def pay(
    bundle: Path,
    store: Path,
    action: Mapping[str, Any],
    *,
    now: dt.datetime = T0,
    handler: Callable[[Mapping[str, Any]], Any] | None = None,
) -> tuple[str, str]:
    """("executed" | "refused" | "failed", detail) for one payment's whole path."""
    from kcp_opa.core.errors import CodedError

    _, desk, executor = parts(bundle, store)
    try:
        record = approve(desk, action, now)
        receipt = desk.issue(record, KEY, now=now)
        executor.execute_authorized_action(action, receipt, handler or (lambda a: {"paid": a["action_id"]}), now=now)
    except CodedError as exc:
        return ("failed" if exc.code == "handler_failed" else "refused"), exc.code
    return "executed", receipt["receipt_id"]
