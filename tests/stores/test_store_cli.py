"""`kcp-opa store migrate` on both backends: creates, reports versions, refuses a newer schema."""

from __future__ import annotations

import json

from conftest import run_cli
from storekit import Backend


def test_store_migrate_creates_reports_and_refuses_a_newer_schema(backend: Backend) -> None:
    made = run_cli("store", "migrate", "--store", backend.location)
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["versions"] == {
        "executions": 2 if backend.name == "sqlite" else 1,
        "handoffs": 1,
        "challenges": 1,
        "decisions": 1,
    }
    assert run_cli("store", "migrate", "--store", backend.location).returncode == 0  # idempotent
    backend.set_schema_version("decisions", 5)
    refused = run_cli("store", "migrate", "--store", backend.location)
    assert refused.returncode == 1 and "schema_newer" in refused.stderr and "Traceback" not in refused.stderr
