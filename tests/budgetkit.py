"""The budget deployment (fixtures/deployments/budget) and one payment's whole path through it.

Each call builds its own gate, desk and executor on a shared store (a SQLite file, or a
``postgresql://`` database), as a separate process does: decide -> record the required
controls -> issue (reserving the budget) -> execute.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from conftest import DEPLOYMENTS, POLICIES, vouched_gate
from trustkit import REGISTRY, _inputs_key, bundle_cache, make_desk, signed

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.compile.compiler import CompileOptions
from kcp_opa.context import ContextSources
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.gate import Gate
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.opening import Stores, is_database, open_stores
from kcp_opa.stores.protocols import CounterStore, ExecutorStore
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
        compile_bundle(
            [base / "knowledge.yaml"],
            base / "matrix.yaml",
            POLICIES,
            partial,
            options=CompileOptions(trust_path=REGISTRY),
        )
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
        "requested_action": "execute_domestic_payment",  # the tool budget's matrix binds to payment
        "target": {"type": "beneficiary", "reference": beneficiary, "tenant_id": "tenant_demo"},
        "amount": {"value_minor": value, "currency": "USD"},
        "authorization_context": {
            "requested_by": "user_001",
            "agent_scope": ["prepare_payment", "execute_domestic_payment"],
            "session_id": "session_001",
        },
        "attributes": {"new_beneficiary": False},
        "created_at": "2026-11-29T09:59:00Z",
        **extra,
    }


#: One pool per database and process: each ``parts`` call on SQLite opens its own connections
#: (as another process would); on PostgreSQL they share the process's pool, as a replica does.
_DATABASES: dict[str, Stores] = {}


TRACE = {"traceparent": "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"}


def unit_read(n: int, principal: str = "user_001") -> dict[str, Any]:
    """A read of the rate-limited unit (three a minute per principal; a read needs an approver)."""
    action = payment(n, action_type="read", requested_action="read_payments", trace=TRACE)
    del action["amount"]
    action["target"] = {"type": "document", "reference": "suppliers", "tenant_id": "tenant_demo"}
    action["knowledge"] = {"project": "treasury-budget", "unit": "supplier-payments", "fields_read": ["amount"]}
    action["authorization_context"] = {
        **action["authorization_context"],
        "authenticated_principal": principal,
        "principal_scopes": ["treasury:payments"],
    }
    action["runtime"] = {
        "deployment_region": "EU",
        "model": {"id": "treasury-llm", "hosting": "self_hosted"},
        "evidence_status": "present",
        "budget_state": "within_budget",
    }
    return action


def stores_at(store: Path | str) -> tuple[CounterStore, ExecutorStore]:
    """The counter store and the executor store at ``store`` (one SQLite file or one database)."""
    if is_database(store):
        location = str(store)
        if location not in _DATABASES:
            _DATABASES[location] = open_stores(location)
        opened = _DATABASES[location]
        assert opened.counters is not None
        return opened.counters, opened.executions
    return SQLiteCounterStore(Path(store)), SQLiteStore(Path(store))


def rows(store: Path | str, query: str) -> list[tuple[Any, ...]]:
    """``query``'s rows on a fresh connection to ``store``, past the stores' API (what a test checks)."""
    if is_database(store):
        import psycopg

        with psycopg.connect(str(store), autocommit=True) as connection:
            return [tuple(row) for row in connection.execute(query.encode()).fetchall()]
    with sqlite3.connect(store) as connection:
        return [tuple(row) for row in connection.execute(query).fetchall()]


def parts(
    bundle: Path, store: Path | str, *, plan_cache: Path | None = None, context: ContextSources | None = None
) -> tuple[Gate, ControlDesk, Executor]:
    counters, executions = stores_at(store)
    gate = vouched_gate(bundle, preflight=False, plan_cache=plan_cache)
    gate.context = replace(context or ContextSources(), counters=StoreCounters.for_bundle(counters, gate.bundle.data))
    keyring = Keyring({KEY.kid: KEY}, KEY.kid)
    executor = Executor(keyring=keyring, policy_versions=[gate.policy_version], store=executions)
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
    store: Path | str,
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
    return "executed", receipt.receipt_id
