"""Two real `kcp-opa serve` replicas writing one PostgreSQL ledger (``--ledger postgresql://...``).

Decisions posted to both at once land in one chain that `audit verify` accepts on the database;
`/v1/status` asks the database whether the ledger answers and never shows a password; with
``--ledger-key`` each replica signs with the writer key and checkpoints the head when it stops.
"""

from __future__ import annotations

import json
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import REPO, run_cli
from servicekit import compile_finance, start_server, stop_server

from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.ledger import read_entries, verify_ledger
from kcp_opa.trail.locations import readable

pytestmark = pytest.mark.postgres
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
TOKEN = "t-ledger-replicas-" + "l" * 32


def test_two_replicas_write_one_chain_in_the_database(postgres: Any, tmp_path: Path) -> None:
    dsn = postgres.database("kcp_serve_ledger")
    bundle = compile_finance(tmp_path / "finance.tar.gz", None)
    key = generate_ed25519("replicas-writer")
    private, public = tmp_path / "writer.json", tmp_path / "public.json"
    private.write_text(json.dumps(Keyring({key.kid: key}, key.kid).to_file_dict(include_private=True)))
    private.chmod(0o600)
    public.write_text(json.dumps(Keyring({key.kid: key}).public().to_file_dict(include_private=False)))
    env = {"KCP_OPA_SERVE_TOKEN": TOKEN, "KCP_OPA_STORE": dsn}
    args = ["--bundle", str(bundle), "--ledger", dsn, "--ledger-key", str(private)]
    started = [start_server(args, env=env) for _ in range(2)]
    try:
        urls = [url for _, url in started]
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def decide(index: int) -> int:
            url = f"{urls[index % 2]}/v1/data/kcp/gate/decision"
            answer = httpx2.post(url, json={"input": ACTION}, headers=headers, timeout=120)
            return answer.status_code

        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(decide, range(40)))
        assert codes == [200] * 40
        for url in urls:
            status = httpx2.get(f"{url}/v1/status", headers=headers, timeout=60).json()
            assert status["ledger"]["ok"] is True
            assert "password" not in json.dumps(status).lower()
    finally:
        for process, _ in started:  # SIGINT: serve's clean stop, which checkpoints the head
            process.send_signal(signal.SIGINT)
        for process, _ in started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_server(process)
    with readable(dsn) as path:
        report = verify_ledger(path, keyring=Keyring({key.kid: key}).public(), writer=key.kid)
        decisions = [e for _, e in read_entries(path) if e.get("type") == "decision"]
    assert report.ok and report.authenticated, report.problems
    assert len(decisions) == 40
    verified = run_cli("audit", "verify", dsn, "--keyring", str(public), "--writer", key.kid, "--format", "json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    out = tmp_path / "auditor.jsonl"
    assert run_cli("audit", "dump", dsn, "-o", str(out)).returncode == 0
    marks = [json.loads(line) for line in (tmp_path / "auditor.jsonl.checkpoints").read_text().splitlines()]
    assert max(mark["seq"] for mark in marks) == report.head_seq  # a replica stopping checkpointed the head
