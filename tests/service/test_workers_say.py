"""``kcp-opa serve --workers N`` says what a single server says, and logs at the CLI's ``-v``.

A fleet whose --issuer-id may not sign a control says so once at start, in the single server's
words (not once per worker, and not again when a worker is restarted); so does every warning its
workers compute from the files they load. A reload is one log line, as on a single server: what
it reloaded (revisions and digests, who asked), or why it was refused and what still serves.
``kcp-opa -v`` reaches every worker, a restarted one too, through its spawn message. One real
fleet of two worker processes: started with ``-v``, one worker killed with -9 and restarted,
reloaded by an admin, then refused a reload of a broken tokens file, then stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import httpx2
import pytest
from netkit import free_port
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    context_args,
    start_process,
    stop_server,
    write_registry,
    write_tokens,
)
from workerkit import ready_workers, wait_for, worker_pids

#: The single server's line (kcp_opa.service.loading.unsignable_warnings): the registry's gate
#: issuer alone may attest standard_audit_logging, and the fleet signs only as SERVICE_ISSUER.
UNSIGNABLE = (
    "kcp-opa: warning: no --issuer-id may sign standard_audit_logging: answers to its challenges are refused "
    f"issuer_not_allowed (add --issuer-id {GATE_ISSUER} with its key in the issuer keyring)"
)

ADMIN = "t-say-admin-" + "o" * 32
PASTED = "t-pasted-" + "p" * 32


@pytest.fixture(scope="module")
def fleet_stderr(tmp_path_factory: pytest.TempPathFactory) -> str:
    """stderr of ``kcp-opa -v serve --workers 2`` (one worker killed and restarted), once stopped."""
    work = tmp_path_factory.mktemp("workers-say")
    registry, keys = write_registry(work)
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {"t-say-" + "s" * 32: "local-agent", ADMIN: "ops_olga"})
    args = ["--bundle", str(bundle), "--store", str(work / "s.db"), "--ledger", str(work / "l.jsonl")]
    args += ["--tokens", str(tokens), "--trust", str(registry), "--issuer-id", SERVICE_ISSUER]
    args += ["--issuer-keyring", str(keys), "--workers", "2"]
    port = free_port()
    command = [sys.executable, "-m", "kcp_opa", "-v", "serve", "--transport", "http", "--port", str(port)]
    process: subprocess.Popen[str]
    process, url = start_process([*command, *args, *context_args(args)], port)
    try:
        wait_for(lambda: len(ready_workers(url)) == 2, "the workers did not all start", timeout=180)
        before = worker_pids(process.pid)
        os.kill(min(before), signal.SIGKILL)
        wait_for(lambda: len(worker_pids(process.pid) - before) == 1, "the killed worker was not restarted")
        wait_for(lambda: len(ready_workers(url)) == 2, "the restarted worker did not get ready", timeout=180)
        headers = {"Authorization": f"Bearer {ADMIN}"}
        reloaded = httpx2.post(f"{url}/v1/admin/reload", headers=headers, timeout=300)
        assert reloaded.status_code == 200 and reloaded.json()["workers"] == 2, reloaded.text
        tokens.write_text(json.dumps({"tokens": {PASTED: "ops_olga"}}))  # a token pasted where its hash belongs
        refused = httpx2.post(f"{url}/v1/admin/reload", headers=headers, timeout=300)
        assert refused.status_code == 409, refused.text
    finally:
        stop_server(process)
    stderr = process.stderr.read() if process.stderr else ""
    assert "restarted (pid" in stderr and "Traceback" not in stderr, stderr
    return stderr


def _events(stderr: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines (stderr is no terminal) of ``event``."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            entry = json.loads(line)
            if entry.get("event") == event:
                found.append(entry)
    return found


def test_a_fleet_says_each_unsignable_control_once(fleet_stderr: str) -> None:
    said = [line for line in fleet_stderr.splitlines() if "no --issuer-id may sign" in line]
    assert said == [UNSIGNABLE], fleet_stderr  # once: not per worker, not again for the restarted one


def test_kcp_opa_v_reaches_every_worker_a_restarted_one_too(fleet_stderr: str) -> None:
    opened = _events(fleet_stderr, "service_opened")  # only a worker opens a service; the supervisor never
    assert len(opened) == 3, fleet_stderr  # the two workers at start and the restarted one
    assert {e["level"] for e in opened} == {"info"} and {e["trust"] for e in opened} == {True}


def test_a_fleet_says_each_warning_once_per_load(fleet_stderr: str) -> None:
    warned = [json.loads(line) for line in fleet_stderr.splitlines() if line.startswith("{") and "warning" in line]
    events = [line["event"] for line in warned if line["level"] == "warning"]
    # The registry's agents are bound to no tenant: said at start, at the admin's reload and at the
    # refused one (the tokens are read after it), never once per worker nor for the restarted one.
    assert events == ["tenants_unbound"] * 3, fleet_stderr


def test_a_fleet_reload_is_one_line_and_a_refused_one_says_what_still_serves(fleet_stderr: str) -> None:
    [reloaded] = _events(fleet_stderr, "service_reloaded")
    opened = _events(fleet_stderr, "service_opened")[0]
    assert reloaded["level"] == "info" and reloaded["via"] == "admin" and reloaded["by"] == "ops_olga"
    assert reloaded["from_sha256"] == reloaded["to_sha256"] == opened["sha256"]
    assert reloaded["from_revision"] == reloaded["to_revision"] == opened["bundle_revision"]
    [refused] = _events(fleet_stderr, "reload_refused")
    assert refused["level"] == "error" and refused["via"] == "admin" and refused["by"] == "ops_olga"
    assert refused["serving_sha256"] == opened["sha256"] and "still serving" in refused["effect"]
    assert PASTED not in fleet_stderr and ADMIN not in fleet_stderr  # the reason, never the secret
