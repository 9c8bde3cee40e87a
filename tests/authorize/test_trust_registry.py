"""The trust registry file: what it refuses at load, what it compiles into the bundle (no keys),
and what verifying an attestation against it costs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import run_cli
from trustkit import DECIDED, KYA, REGISTRY, registry, signed

from kcp_opa.authorize.attestations import verify_attestation
from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.compile.bundle import read_bundle


def test_the_registry_compiles_into_data_without_keys(trust_bundle: Path) -> None:
    trust = read_bundle(trust_bundle).data["kcp_data"]["trust"]
    assert trust["principals"]["treasury_approver_anna"] == {"type": "human", "roles": ["treasury_approver"]}
    assert trust["issuers"]["approval-app"]["controls"] == ["compliance_review", "independent_human_approval"]
    text = json.dumps(trust)
    assert "public_key" not in text and "kid" not in text


def test_validate_reports_registry_errors_with_lines(tmp_path: Path) -> None:
    bad = (
        REGISTRY.read_text()
        .replace("{id: orchestrator,", '{id: "User_001 ",')
        .replace("type: otp_service", "type: sms_gateway")
    )
    path = tmp_path / "registry.yaml"
    path.write_text(bad)
    result = run_cli("validate", "--format", "json", str(path))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    found = {(d["code"], d["line"]) for d in report["errors"]}
    lines = bad.splitlines()
    dup_line = next(i for i, line in enumerate(lines, 1) if "User_001 " in line)
    otp_line = next(i for i, line in enumerate(lines, 1) if "sms_gateway" in line)
    assert ("duplicate_id", dup_line) in found
    assert any(line == otp_line for _, line in found)
    assert json.loads(run_cli("validate", "--format", "json", str(REGISTRY)).stdout)["valid"] is True


def test_attestation_verify_cost(desk: ControlDesk) -> None:
    """Measured for the report: Ed25519 verify + registry lookup per attestation."""
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna")
    trust = registry()
    started = time.perf_counter()
    for _ in range(200):
        verify_attestation(item, trust, None)
    per = (time.perf_counter() - started) / 200
    print(f"attestation verify: {per * 1e6:.0f} us")
    assert per < 0.05
