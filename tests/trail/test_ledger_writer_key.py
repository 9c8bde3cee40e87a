"""The gate's ledger signed by its writer key, in the service and on the command line.

``serve --ledger-key`` / ``open_service(config, HostParts(ledger_key=...))`` and ``decide --ledger-key`` make every
entry the service or the CLI writes carry the writer's signature, and ``audit verify --keyring``
authenticates each (the attacks on it are in tests/adversarial/test_ledger_writer_binding.py).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from trustkit import compile_with_trust

from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.service.callers import LOCAL_AGENT
from kcp_opa.service.config import HostParts, ServiceConfig
from kcp_opa.service.loading import open_service
from kcp_opa.trail.ledger import verify_ledger

#: The supplier payment, made by the local agent the tests call as (who acts is the caller).
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}


def test_the_service_signs_every_ledger_entry_with_its_writer_key(tmp_path: Path) -> None:
    key = generate_ed25519("service-writer")
    bundle = compile_with_trust(tmp_path / "finance.tar.gz")
    ledger = tmp_path / "service.jsonl"
    config = ServiceConfig(bundle, store=str(tmp_path / "s.db"), ledger=str(ledger))
    service = open_service(config, HostParts(ledger_key=key))
    answer = service.evaluate(LOCAL_AGENT, ACTION, financial=True)
    assert answer["decision_id"]
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert lines[0]["entry_auth"] == {"alg": "Ed25519", "kid": "service-writer"}
    assert lines[1:] and all(entry["entry_signature"]["kid"] == "service-writer" for entry in lines[1:])
    public = Keyring({key.kid: key}).public()
    report = verify_ledger(ledger, keyring=public)
    assert report.ok and report.authenticated and report.writer == "service-writer"
    ring = tmp_path / "public.json"
    ring.write_text(json.dumps(public.to_file_dict(include_private=False)))
    proc = run_cli("audit", "verify", str(ledger), "--keyring", str(ring), "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["entries_authenticated"] is True
    proc = run_cli("audit", "verify", str(ledger), "--format", "text")
    assert proc.returncode == 0 and "give --keyring to check them" in proc.stdout


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_with_ledger_key_signs_entries_and_checkpoints_its_head_when_it_stops(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """Ctrl-C and an orchestrator's SIGTERM alike: the head is checkpointed before the process ends."""
    import httpx2
    from servicekit import start_server

    key = generate_ed25519("serve-writer")
    ring, public = tmp_path / "ring.json", tmp_path / "public.json"
    ring.write_text(json.dumps(Keyring({key.kid: key}, key.kid).to_file_dict(include_private=True)))
    public.write_text(json.dumps(Keyring({key.kid: key}).public().to_file_dict(include_private=False)))
    bundle = compile_with_trust(tmp_path / "finance.tar.gz")
    ledger = tmp_path / "serve.jsonl"
    token = "t" * 40
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "s.db"), "--ledger", str(ledger)]
    process, url = start_server([*args, "--ledger-key", str(ring)], env={"KCP_OPA_SERVE_TOKEN": token})
    try:
        answer = httpx2.post(
            f"{url}/v1/decisions", json={"action": ACTION}, headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200, answer.text
    finally:
        process.send_signal(stop)
        assert process.wait(timeout=60) in (0, 130)
    proc = run_cli("audit", "verify", str(ledger), "--keyring", str(public), "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["entries_authenticated"] is True and report["writer"] == "serve-writer"
    checkpoints = ledger.with_name("serve.jsonl.checkpoints").read_text().splitlines()
    assert json.loads(checkpoints[-1])["seq"] == report["entries"] >= 1
