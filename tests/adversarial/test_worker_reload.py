"""Attack: a reload that reaches one worker of ``serve --workers N`` leaves the others deciding on
the bundle the operator replaced (a revoked rule keeps allowing on a share of the traffic).

Whichever worker takes ``POST /v1/admin/reload`` (or SIGHUP at the supervisor), every worker
reloads before the reload answers: after it, no decision from any worker names the old bundle's
digest, and each worker's reload is in the ledger.
"""

from __future__ import annotations

import json
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
from conftest import DEPLOYMENTS, POLICIES, REPO
from servicekit import SERVICE_ISSUER, stop_server, write_registry, write_tokens
from workerkit import start_fleet, wait_for

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.trail.ledger import read_entries, verify_ledger

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
WHO = {"local-agent": "t-agent-" + "a" * 32, "ops_olga": "t-admin-" + "o" * 32}


def _compile(out: Path, registry: Path, revision: str) -> str:
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        POLICIES,
        out,
        options=CompileOptions(trust_path=registry, revision=revision),
    )
    return read_bundle(out).sha256


def _served(url: str) -> dict[str, float]:
    text = httpx2.get(f"{url}/metrics", timeout=30).text
    return {
        w: float(n)
        for w, n in re.findall(r'kcp_opa_tool_calls_total\{tool="opa_decision",worker="(\d+)"\} (\S+)', text)
    }


def _decisions_from_every_worker(url: str) -> list[dict[str, Any]]:
    """Decisions until each worker has made at least five of them since this call."""
    before = _served(url)
    made: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {WHO['local-agent']}"}

    def decide(_: int) -> dict[str, Any]:
        answer = httpx2.post(f"{url}/v1/data/kcp/gate/decision", json={"input": KYA}, headers=headers, timeout=120)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()["result"]
        return result

    with ThreadPoolExecutor(8) as pool:
        for _ in range(25):
            made += pool.map(decide, range(16))
            after = _served(url)
            if len(after) == 2 and all(after[w] - before.get(w, 0) >= 5 for w in after):
                return made
    raise AssertionError(f"the decisions did not reach both workers: {before} -> {_served(url)}")


def test_a_reload_reaches_every_worker_before_it_answers(tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    bundle = tmp_path / "finance.tar.gz"
    first = _compile(bundle, registry, "rev-a")
    tokens = write_tokens(tmp_path, {token: principal for principal, token in WHO.items()})
    ledger = tmp_path / "l.jsonl"
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "s.db"), "--ledger", str(ledger)]
    args += [
        "--trust",
        str(registry),
        "--issuer-id",
        SERVICE_ISSUER,
        "--issuer-keyring",
        str(keys),
        "--tokens",
        str(tokens),
    ]
    process, url = start_fleet(args, 2)
    try:
        assert {d["bundle_sha256"] for d in _decisions_from_every_worker(url)} == {first}
        # The admin's reload, taken by one worker: every worker decides on the new bundle once it answers.
        second = _compile(tmp_path / "next.tar.gz", registry, "rev-b")
        (tmp_path / "next.tar.gz").replace(bundle)
        headers = {"Authorization": f"Bearer {WHO['ops_olga']}"}
        reloaded = httpx2.post(f"{url}/v1/admin/reload", headers=headers, timeout=600)
        assert reloaded.status_code == 200 and reloaded.json()["workers"] == 2, reloaded.text
        assert {d["bundle_sha256"] for d in _decisions_from_every_worker(url)} == {second}
        # SIGHUP at the supervisor: the same, for every worker.
        third = _compile(tmp_path / "third.tar.gz", registry, "rev-c")
        (tmp_path / "third.tar.gz").replace(bundle)
        process.send_signal(signal.SIGHUP)

        def reloaded_to_third() -> bool:
            notes = [e for _, e in read_entries(ledger) if e.get("note") == "service_reloaded"]
            return sum(1 for n in notes if n["detail"]["to_sha256"] == third) == 2

        wait_for(reloaded_to_third, "SIGHUP did not reload both workers", timeout=600)
        assert {d["bundle_sha256"] for d in _decisions_from_every_worker(url)} == {third}
    finally:
        stop_server(process)
    notes = [e for _, e in read_entries(ledger) if e.get("note") == "service_reloaded"]
    assert sorted(n["detail"]["to_sha256"] for n in notes) == sorted([second, second, third, third])
    assert [n["principal"]["id"] for n in notes if n["detail"]["to_sha256"] == second] == ["ops_olga", "ops_olga"]
    assert verify_ledger(ledger).ok


def test_a_worker_restarted_on_a_replaced_bundle_file_brings_the_fleet_to_it(tmp_path: Path) -> None:
    """The bundle file replaced without a reload, then a worker dies: the restarted worker loads
    the new file, and the supervisor reloads the others to it before the restarted one serves."""
    import os

    from workerkit import worker_pids

    registry, keys = write_registry(tmp_path)
    bundle = tmp_path / "finance.tar.gz"
    first = _compile(bundle, registry, "rev-a")
    tokens = write_tokens(tmp_path, {token: principal for principal, token in WHO.items()})
    ledger = tmp_path / "l.jsonl"
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "s.db"), "--ledger", str(ledger)]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-keyring", str(keys)]
    args += ["--tokens", str(tokens)]
    process, url = start_fleet(args, 2)
    try:
        assert {d["bundle_sha256"] for d in _decisions_from_every_worker(url)} == {first}
        second = _compile(tmp_path / "next.tar.gz", registry, "rev-b")
        (tmp_path / "next.tar.gz").replace(bundle)  # no reload asked
        victim = min(worker_pids(process.pid))
        os.kill(victim, signal.SIGKILL)

        def fleet_on_second() -> bool:
            notes = [e for _, e in read_entries(ledger) if e.get("note") == "service_reloaded"]
            return any(n["detail"]["to_sha256"] == second and n["detail"]["from_sha256"] == first for n in notes)

        wait_for(fleet_on_second, "the surviving worker was not reloaded to the restarted one's bundle", 600)
        assert {d["bundle_sha256"] for d in _decisions_from_every_worker(url)} == {second}
    finally:
        stop_server(process)
    assert verify_ledger(ledger).ok
