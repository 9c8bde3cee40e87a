"""Attacks on the enforcement mode: AWS AgentCore's LOG_ONLY can be flipped by anyone who may
update the gateway, and nothing records it. Here a mode change is a ledger entry, needs the
``service_admin`` role, and with ``second_approval`` one credential cannot leave ``enforce``:
asking twice, asking under a look-alike of one's own id, or asking as an agent all fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.decide.modes import ModeChangeError
from kcp_opa.service.callers import LOCAL_AGENT, AccessDeniedError, Principal
from kcp_opa.service.config import ServiceConfig
from kcp_opa.service.loading import open_service
from kcp_opa.service.reloading import Reloader
from kcp_opa.trail.ledger import AuditLedger, read_entries

FINANCE = DEPLOYMENTS / "finance"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text(encoding="utf-8"))
NOW = "2026-11-29T10:00:00Z"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("modes") / "finance.tar.gz"
    compile_bundle([FINANCE / "knowledge.yaml"], FINANCE / "matrix.yaml", POLICIES, out)
    return out


def _admin(name: str) -> Principal:
    return Principal.of(name, "human", ["service_admin"])


def test_one_credential_cannot_switch_enforcement_off(tmp_path: Path, bundle: Path) -> None:
    ledger = tmp_path / "l.jsonl"
    config = ServiceConfig(bundle, store=str(tmp_path / "s.db"), ledger=str(ledger))
    service = open_service(config)
    reloader = Reloader(service, config)
    service.gate.modes.second_approval = True
    olga = _admin("ops_olga")
    with pytest.raises(AccessDeniedError):
        reloader.admin_mode(LOCAL_AGENT, "log_only")  # an agent may not
    assert reloader.admin_mode(olga, "log_only")["changed"] is False  # held for a second principal
    assert reloader.admin_mode(olga, "log_only")["changed"] is False  # asking again is not a second one
    assert reloader.admin_mode(_admin("\uff2f\uff30\uff33_Olga"), "log_only")["changed"] is False  # nor a look-alike
    assert service.gate.modes.mode == "enforce"
    enforced = service.gate.decide(ACTION, now=NOW).to_dict()
    assert enforced.get("enforced", True) is True
    done = reloader.admin_mode(_admin("ops_omar"), "log_only")
    assert done == {"mode": "log_only", "changed": True, "from": "enforce", "by": "ops_olga", "approved_by": "ops_omar"}
    decided = service.gate.decide(ACTION, now=NOW).to_dict()
    assert decided["mode"] == "log_only" and decided["enforced"] is False
    assert decided["decision"] == enforced["decision"]  # computed as it would be, only not enforced
    assert reloader.admin_mode(olga, "enforce")["changed"] is True  # back to enforce: one admin suffices
    reloader.reload()  # a reload keeps the mode and its rule
    assert service.gate.modes.mode == "enforce" and service.gate.modes.second_approval is True
    entries = [e for _, e in read_entries(ledger)]
    changes = [(e["from"], e["to"], e["by"], e["approved_by"]) for e in entries if e["type"] == "mode_change"]
    assert changes == [("enforce", "log_only", "ops_olga", "ops_omar"), ("log_only", "enforce", "ops_olga", None)]
    logged = [e for e in entries if e["type"] == "decision" and e.get("mode") == "log_only"]
    assert len(logged) == 1 and logged[0]["enforced"] is False
    refused = [e for e in entries if e["type"] == "failure" and e.get("tool") == "mode"]
    assert [e["code"] for e in refused] == ["not_authorized"]


def test_a_mode_change_that_cannot_be_recorded_is_refused(bundle: Path) -> None:
    gate = Gate.from_bundle(bundle)
    with pytest.raises(ModeChangeError, match="recorded"):
        gate.modes.request("log_only", "ops_olga", gate.audit)
    assert gate.modes.mode == "enforce"
    with pytest.raises(ModeChangeError, match="the modes are"):
        Gate.from_bundle(bundle, config=GateConfig(ledger=AuditLedger(Path("/nonexistent-dir/l.jsonl")))).modes.request(
            "off", "ops_olga", None
        )
