"""`kcp-opa store migrate` on both backends: creates, reports versions, refuses a newer schema."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from storekit import Backend


def test_store_migrate_creates_reports_and_refuses_a_newer_schema(backend: Backend) -> None:
    made = run_cli("store", "migrate", "--store", backend.location)
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    sqlite = backend.name == "sqlite"
    assert report["versions"] == {  # both keep the budget counters (executions: their reservations)
        "executions": 3 if sqlite else 2,
        "handoffs": 1,
        "challenges": 1,
        "decisions": 1,
        "counters": 1,
        "facts": 1,
        "ui_sessions": 1,
    }
    assert run_cli("store", "migrate", "--store", backend.location).returncode == 0  # idempotent
    backend.set_schema_version("decisions", 5)
    refused = run_cli("store", "migrate", "--store", backend.location)
    assert refused.returncode == 1 and "schema_newer" in refused.stderr and "Traceback" not in refused.stderr


def test_executions_list_and_reconcile_read_either_backend(backend: Backend) -> None:
    import time

    store = backend.open().executions
    assert store.claim_execution("idem_cli_0000000001", "h", "r1", lease_seconds=0.2) is None
    time.sleep(0.4)
    listed = run_cli("executions", "list", "--store", backend.location, "--format", "json")
    assert listed.returncode == 1 and [r["idempotency_key"] for r in json.loads(listed.stdout)] == [
        "idem_cli_0000000001"
    ]
    done = run_cli(
        "executions", "reconcile", "idem_cli_0000000001", "--outcome", "failed", "--evidence", "ticket 9",
        "--store", backend.location,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert run_cli("executions", "list", "--store", backend.location).returncode == 0
    record = store.execution("idem_cli_0000000001")
    assert record is not None and record.state == "failed"


def test_the_store_timeout_bounds_the_wait_and_a_bad_value_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """KCP_OPA_STORE_TIMEOUT is how long a call waits for an unreachable database; garbage is refused."""
    from servicekit import free_port

    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/kcp_nowhere"
    monkeypatch.setenv("KCP_OPA_STORE_TIMEOUT", "0.3")
    waited = run_cli("store", "migrate", "--store", nowhere)
    assert waited.returncode == 5 and "couldn't get a connection after 0.30 sec" in waited.stderr, waited.stderr
    monkeypatch.setenv("KCP_OPA_STORE_TIMEOUT", "soon")
    refused = run_cli("store", "migrate", "--store", nowhere)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "KCP_OPA_STORE_TIMEOUT='soon': give seconds between 0.1 and 60" in refused.stderr
