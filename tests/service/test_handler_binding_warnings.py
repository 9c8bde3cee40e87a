"""`serve --handlers` says when the handlers' tools and the bundle's task types do not fit.

A handler runs for a ``requested_action`` (its tool); the matrix binds tools to task types. A
bundle whose matrix binds none lets any task type request any handler's tool; a handler's tool
listed under no task type is denied to every action, so its handler never runs. Both are one
warning line on stderr at start and on reload (SIGHUP); a ``--workers`` fleet says it once, not
once per worker: warnings, not refusals, as either may be meant. Real ``serve`` processes, and the
check itself on the real compiled bundles.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import POLICIES, REPO
from servicekit import compile_finance, start_server, stop_server
from workerkit import ready_workers, start_fleet, wait_for, worker_pids

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.service.handlers import binding_gaps, load_handlers
from kcp_opa.trail.ledger import read_entries

HR = REPO / "tests" / "deployments" / "hr-leave"
UNBOUND = "tools_unbound"
UNLISTED = "handler_tools_unlisted"
TOKEN = {"KCP_OPA_SERVE_TOKEN": "t-binding-" + "b" * 32}  # the local agent's, without --trust (TEST-ONLY)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """finance (its matrix lists each task type's tools) and hr-leave (its matrix lists none)."""
    work = tmp_path_factory.mktemp("binding")
    hr = work / "hr.tar.gz"
    compile_bundle(
        [HR / "knowledge.yaml"], HR / "matrix.yaml", POLICIES, hr, options=CompileOptions(engine_check=False)
    )
    return {"finance": compile_finance(work / "finance.tar.gz", None), "hr": hr}


def _handlers(work: Path, tools: dict[str, list[str]]) -> Path:
    (work / "binding_tools.py").write_text("def run(action):\n    return {'ran': action['requested_action']}\n")
    spec = {name: {"target": "binding_tools:run", "actions": actions} for name, actions in tools.items()}
    path = work / "handlers.json"
    path.write_text(json.dumps({"handlers": spec}))
    return path


def _lines(stderr: str, event: str) -> list[str]:
    return [line for line in stderr.splitlines() if event in line]


def test_the_check_names_an_unbound_matrix_and_an_unlisted_tool(bundles: dict[str, Path], tmp_path: Path) -> None:
    spec = json.loads(_handlers(tmp_path, {"pay": ["execute_payment"], "wire": ["wire.send"]}).read_text())
    handlers = load_handlers(spec["handlers"], base=tmp_path)
    finance, hr = read_bundle(bundles["finance"]).data, read_bundle(bundles["hr"]).data
    [(event, fields)] = binding_gaps(handlers, finance)
    assert event == UNLISTED and fields["tools"] == {"wire": ["wire.send"]}
    assert binding_gaps({"pay": handlers["pay"]}, finance) == []  # execute_payment is cross_border_payment's
    [(event, fields)] = binding_gaps(handlers, hr)
    assert event == UNBOUND and fields["handlers"] == ["pay", "wire"]
    assert binding_gaps({}, hr) == []  # no handler, nothing a receipt could run


def test_serve_warns_at_start_and_on_reload(bundles: dict[str, Path], tmp_path: Path) -> None:
    bundle = tmp_path / "served.tar.gz"
    bundle.write_bytes(bundles["finance"].read_bytes())
    ledger = tmp_path / "l.jsonl"
    handlers = _handlers(tmp_path, {"pay": ["execute_payment"], "wire": ["wire.send"]})
    args = ["--bundle", str(bundle), "--handlers", str(handlers), "--store", str(tmp_path / "s.db")]
    process, _ = start_server([*args, "--ledger", str(ledger)], env=TOKEN)
    try:
        bundle.write_bytes(bundles["hr"].read_bytes())
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while not (ledger.exists() and any(e.get("note") == "service_reloaded" for _, e in read_entries(ledger))):
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.2)
    finally:
        stop_server(process)
    stderr = process.stderr.read() if process.stderr else ""
    [unlisted] = _lines(stderr, UNLISTED)  # at start: finance lists no task type for wire.send
    assert "wire.send" in unlisted and "execute_payment" not in unlisted, unlisted
    [unbound] = _lines(stderr, UNBOUND)  # after the reload: hr-leave binds no tools
    assert "pay" in unbound and "wire" in unbound, unbound
    assert process.returncode is not None and "Traceback" not in stderr


def test_a_fleet_warns_once_at_start_and_once_per_reload(bundles: dict[str, Path], tmp_path: Path) -> None:
    handlers = _handlers(tmp_path, {"pay": ["execute_payment"]})
    ledger = tmp_path / "l.jsonl"
    args = ["--bundle", str(bundles["hr"]), "--handlers", str(handlers), "--store", str(tmp_path / "s.db")]
    process, _ = start_fleet([*args, "--ledger", str(ledger)], 2, env=TOKEN)
    try:
        process.send_signal(signal.SIGHUP)  # every worker reloads, each checking the same files again
        deadline = time.monotonic() + 120
        while not ledger.exists() or sum(1 for _, e in read_entries(ledger) if e.get("note") == "service_reloaded") < 2:
            assert time.monotonic() < deadline, "SIGHUP did not reload both workers"
            time.sleep(0.2)
        time.sleep(1)  # the supervisor logs once both workers answered
    finally:
        stop_server(process)
    stderr = process.stderr.read() if process.stderr else ""
    assert len(_lines(stderr, UNBOUND)) == 2, stderr  # at start and at the reload: not once per worker


def test_a_fleet_says_what_a_restarted_worker_finds_new_and_nothing_it_already_said(
    bundles: dict[str, Path], tmp_path: Path
) -> None:
    handlers = _handlers(tmp_path, {"pay": ["execute_payment"]})
    args = ["--bundle", str(bundles["hr"]), "--handlers", str(handlers), "--store", str(tmp_path / "s.db")]
    process, url = start_fleet([*args, "--ledger", str(tmp_path / "l.jsonl")], 2, env=TOKEN)
    try:
        first = worker_pids(process.pid)
        os.kill(min(first), signal.SIGKILL)  # restarted on the same files: it has nothing new to say
        wait_for(lambda: len(worker_pids(process.pid) - first) == 1, "the killed worker was not restarted")
        wait_for(lambda: len(ready_workers(url)) == 2, "the restarted worker did not get ready")
        _handlers(tmp_path, {"pay": ["execute_payment"], "wire": ["wire.send"]})  # changed, not reloaded
        second = worker_pids(process.pid)
        os.kill(max(second & first), signal.SIGKILL)  # the other one, restarted on the changed file
        wait_for(lambda: len(worker_pids(process.pid) - second) == 1, "the other worker was not restarted")
        wait_for(lambda: len(ready_workers(url)) == 2, "the second restarted worker did not get ready")
    finally:
        stop_server(process)
    stderr = process.stderr.read() if process.stderr else ""
    said = [json.loads(line)["handlers"] for line in stderr.splitlines() if f'"{UNBOUND}"' in line]
    assert said == [["pay"], ["pay", "wire"]], stderr  # at start once, then only what the restart found new
