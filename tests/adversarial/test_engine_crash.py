"""Attack class: an input that crashes rego-cpp, sent to a real `kcp-opa serve` (issue 30).

regopy runs rego-cpp inside the calling process; an input that makes it crash (SIGSEGV) would
end the service with every client's work in flight. The bundle here is the finance deployment
over the shipped policies plus a TEST-ONLY module (tests/crashkit.py) that runs the
`regex.match` of docs/engine-findings.md item 31 on every decision: 50,000 characters of field
names end the evaluating process with SIGSEGV. The service evaluates in a pool of worker
processes: the crashing request gets an audited DENY ``engine_error`` naming the signal, never
an allow; the next request from another client is decided; the service's pid is unchanged; a
worker killed mid-decision costs that decision only; the pool replaces every worker it loses.
On the code before the pool, the first crashing request kills the server and every check here
fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import REPO, vouched_gate
from crashkit import KYA, crashing, probe_bundle, slow
from servicekit import GATE_ISSUER, SERVICE_ISSUER, start_server, stop_server, write_registry, write_tokens

from kcp_opa.decide.pool import ProcessEngine
from kcp_opa.trail.ledger import read_entries, verify_ledger

WHO = {"local-agent": "t-agent-" + "a" * 32, "agent_payments_001": "t-payments-" + "p" * 32}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    work = tmp_path_factory.mktemp("crash")
    registry, issuer_keys = write_registry(work)
    bundle = probe_bundle(work, trust=registry)
    ledger = work / "ledger.jsonl"
    args = ["--bundle", str(bundle), "--store", str(work / "service.db"), "--trust", str(registry)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    args += ["--tokens", str(write_tokens(work, {t: p for p, t in WHO.items()})), "--ledger", str(ledger)]
    process, url = start_server(args)
    try:
        yield url, ledger, process
    finally:
        stop_server(process)


def _decide(url: str, who: str, action: dict[str, Any]) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {WHO[who]}"}
    with httpx2.Client(headers=headers, timeout=120) as client:  # a client of its own per call
        return client.post(f"{url}/v1/decisions", json={"action": {**action, "agent_id": who}})  # who acts: the caller


def _entry(ledger: Path, decision_id: str) -> dict[str, Any]:
    found = [e for _, e in read_entries(ledger) if e.get("type") == "decision" and e["decision_id"] == decision_id]
    assert len(found) == 1, f"decision {decision_id} is not in the ledger once"
    return found[0]


def test_a_crashing_input_costs_one_decision_not_the_service(
    served: tuple[str, Path, subprocess.Popen[str]],
) -> None:
    url, ledger, process = served
    pid = process.pid
    crashed = _decide(url, "local-agent", crashing())
    assert crashed.status_code == 200, crashed.text[:300]
    answer = crashed.json()
    assert answer["decision"] == "DENY" and answer["reason_codes"] == ["engine_error"], answer
    assert answer["execution_allowed"] is False
    audited = _entry(ledger, answer["decision_id"])
    assert audited["decision"] == "DENY" and "SIGSEGV" in str(audited["engine_error"]), audited["engine_error"]
    # Another client, right after: decided by the policy, by the same server process.
    after = _decide(url, "agent_payments_001", KYA)
    assert after.status_code == 200, after.text[:300]
    assert after.json()["decision"] == "HUMAN_APPROVAL" and "engine_error" not in after.json()["reason_codes"]
    assert process.poll() is None and process.pid == pid
    assert httpx2.get(f"{url}/health", timeout=10).status_code == 200


def test_more_crashes_than_workers_in_a_row_and_the_pool_recovers(
    served: tuple[str, Path, subprocess.Popen[str]],
) -> None:
    url, ledger, process = served
    workers = os.cpu_count() or 1
    for index in range(workers + 2):
        crashed = _decide(url, "local-agent", crashing(action_id=f"act_crash_{index:03d}"))
        assert crashed.status_code == 200 and crashed.json()["reason_codes"] == ["engine_error"], crashed.text[:300]
    decided = None
    for _ in range(60):  # the replacements load the bundle; until one is ready a decision is refused
        decided = _decide(url, "agent_payments_001", KYA).json()
        if decided["reason_codes"] != ["engine_error"]:
            break
        time.sleep(1)
    assert decided is not None and decided["decision"] == "HUMAN_APPROVAL", decided
    assert process.poll() is None
    assert verify_ledger(ledger).ok  # every refusal written, the chain intact


def test_concurrent_clients_lose_only_the_crashing_decision(
    served: tuple[str, Path, subprocess.Popen[str]],
) -> None:
    url, _, process = served
    with ThreadPoolExecutor(max_workers=4) as pool:
        crash = pool.submit(_decide, url, "local-agent", crashing(action_id="act_crash_concurrent"))
        others = [pool.submit(_decide, url, "agent_payments_001", KYA) for _ in range(6)]
        crashed = crash.result().json()
        decided = [future.result().json() for future in others]
    assert crashed["reason_codes"] == ["engine_error"]
    # Each other decision is the policy's, or (while a replacement loads) an engine_error: never an allow.
    assert all(d["decision"] in ("HUMAN_APPROVAL", "DENY") for d in decided), decided
    assert any(d["decision"] == "HUMAN_APPROVAL" for d in decided), decided
    assert process.poll() is None


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return probe_bundle(tmp_path_factory.mktemp("probe"))


def test_a_worker_killed_mid_decision_costs_that_decision(probe: Path) -> None:
    gate = vouched_gate(probe, isolation="process")
    engine = gate.engine
    assert isinstance(engine, ProcessEngine)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            busy = pool.submit(gate.decide, slow(), now="2026-11-29T10:00:00Z")
            assert _eventually(lambda: bool(engine.describe()["busy"]), 30.0)  # it holds one worker for seconds
            (victim,) = engine.describe()["busy"]
            os.kill(victim, signal.SIGKILL)
            decision = busy.result(timeout=120)
        assert decision.decision == "DENY" and decision.reason_codes == ("engine_error",)
        assert f"worker {victim} died of SIGKILL" in str(decision.engine_error), decision.engine_error
        assert _eventually(lambda: gate.decide(KYA, now="2026-11-29T10:00:00Z").decision == "HUMAN_APPROVAL")
        assert engine.lost >= 1
    finally:
        engine.close()


def test_a_decision_over_the_deadline_is_refused_and_its_worker_replaced(probe: Path) -> None:
    gate = vouched_gate(probe, isolation="process")
    engine = gate.engine
    assert isinstance(engine, ProcessEngine)
    try:
        engine.deadline_s = 0.5
        decision = gate.decide(slow(), now="2026-11-29T10:00:00Z")
        assert decision.decision == "DENY" and decision.reason_codes == ("engine_error",)
        assert "deadline" in str(decision.engine_error)
        engine.deadline_s = 60.0
        assert _eventually(lambda: gate.decide(KYA, now="2026-11-29T10:00:00Z").decision == "HUMAN_APPROVAL")
    finally:
        engine.close()


def test_in_process_evaluation_of_the_same_input_ends_the_process(probe: Path) -> None:
    """Why the pool exists: the same decision in-process (isolation="inline") kills the caller."""
    script = (
        "import json, sys\n"
        f"sys.path[:0] = [{str(REPO / 'tests')!r}]\n"
        "from conftest import vouched_gate\n"
        "from crashkit import crashing\n"
        f"gate = vouched_gate({str(probe)!r}, preflight=False)\n"
        "print(gate.decide(crashing(), now='2026-11-29T10:00:00Z').decision)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stdout[-300:], done.stderr[-300:])


def _eventually(check: Any, seconds: float = 90.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def test_the_probe_decides_short_inputs_as_the_shipped_policy(probe: Path) -> None:
    gate = vouched_gate(probe, isolation="process")
    try:
        decision = gate.decide(KYA, now="2026-11-29T10:00:00Z")
        assert decision.decision == "HUMAN_APPROVAL", json.dumps(decision.to_dict())[:300]
    finally:
        gate.engine.close()
