"""Two real `kcp-opa serve` replicas on one PostgreSQL store count budgets and rate limits together.

The store is opened from the ``postgresql://`` location alone (``KCP_OPA_STORE``), and its
counter store is the database's: a unit limited to three reads a minute gets the matrix's
outcome on the fourth read, whichever replica each read reached, and no declared limit is held
``context_missing`` for want of counts (what a PostgreSQL service answered before it counted).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from conftest import DEPLOYMENTS, POLICIES
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    start_server,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

from kcp_opa.compile.compiler import CompileOptions, compile_bundle

pytestmark = pytest.mark.postgres
TOKEN = "t-payments-" + "m" * 32


@pytest.fixture(scope="module")
def replicas(postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    work = tmp_path_factory.mktemp("budget-replicas")
    dsn = postgres.database("kcp_budget_replicas")
    registry, issuer_keys = write_registry(work)
    base = DEPLOYMENTS / "budget"
    bundle = work / "budget.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle, options=CompileOptions(trust_path=registry)
    )
    tokens = write_tokens(work, {TOKEN: "agent_payments_001"})
    common = ["--bundle", str(bundle), "--trust", str(registry), "--tokens", str(tokens)]
    common += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    common += ["--keyring", str(write_receipt_keyring(work))]
    env = {"KCP_OPA_STORE": dsn, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    processes, urls = [], []
    try:
        for name in "ab":
            process, url = start_server([*common, "--ledger", str(work / f"{name}.jsonl")], env=env)
            processes.append(process)
            urls.append(url)
        yield urls, dsn
    finally:
        for process in processes:
            stop_server(process)


def read(n: int) -> dict[str, Any]:
    return {
        "schema_version": "2.0",
        "action_id": f"act_read_{n}",
        "idempotency_key": f"idem_budget_read_{n:06d}",
        "tenant_id": "tenant_demo",
        "subject_id": "user_001",
        "agent_id": "agent_payments_001",
        "action_type": "read",
        "requested_action": "read_payments",
        "target": {"type": "document", "reference": "suppliers", "tenant_id": "tenant_demo"},
        "knowledge": {"project": "treasury-budget", "unit": "supplier-payments", "fields_read": ["amount"]},
        "authorization_context": {
            "requested_by": "user_001",
            "session_id": "session_001",
            "agent_scope": ["prepare_payment", "execute_payment"],
        },
        "trace": {"traceparent": "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"},
        "created_at": "2026-11-29T09:59:00Z",
    }


def test_replicas_on_postgres_count_one_rate_limit_together(replicas: tuple[list[str], str]) -> None:
    import psycopg

    urls, dsn = replicas
    decisions = []
    for n in range(4):  # alternating replicas, well inside one minute
        response = httpx2.post(
            f"{urls[n % 2]}/v1/decisions",
            json={"action": read(n)},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        decisions.append(response.json())
    rules = [{(r["code"], r["rule"]) for r in d["reasons"]} for d in decisions]
    assert [("rate_limited", "budget.rate_limit") in found for found in rules] == [False, False, False, True]
    assert not any(("context_missing", "budget.counters") in found for found in rules), rules
    # The reads are refused on access too (the agent holds no treasury:payments scope): what is
    # asserted is the counting, shared by both replicas through the database.
    assert all(d["decision"] in {"ESCALATE", "COMPLIANCE_REVIEW", "DENY"} for d in decisions[3:])
    with psycopg.connect(dsn) as connection:
        assert connection.execute("SELECT count(*) FROM requests").fetchone() == (4,)
    status = httpx2.get(f"{urls[0]}/v1/status", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()
    assert json.dumps(status).count("StoreCounters") >= 1
