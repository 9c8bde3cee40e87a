"""A database outage is a fault, never a policy answer: a real `kcp-opa serve` on PostgreSQL (the
stores and the ledger), the server really stopped (`pg_ctl stop -m fast`).

While it is down every route answers ``503 store_unavailable`` within 2 s (the JSON API, the
OPA-compatible route, the controls, the UI, MCP ``tools/call`` as a tool error naming it), never
a 422 that reads as a decision (``hold_stands``) nor a 200 carrying a DENY built from the outage;
``/ready`` is 503 naming the store and the ledger while ``/health`` stays 200; the outage is
counted in ``/metrics``; the log says one line when the outage starts and one when it ends, not
one per reconnect attempt. Once the server is back the same requests succeed, and nothing that
was acknowledged is lost (every decision answered 200 is in the ledger and the store, every
execution ran its handler once).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from authzenkit import as_authzen
from conftest import REPO, run_cli
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    context_args,
    free_port,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

pytestmark = pytest.mark.postgres
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
WHO = {
    "local-agent": "t-agent-" + "a" * 32,
    "user_001": "t-subject-" + "s" * 32,
    "treasury_approver_anna": "t-approver-" + "p" * 32,
    "kyc-provider": "t-kyc-" + "k" * 32,
    "approval-desk": "t-issuer-" + "i" * 32,
    "payments-executor": "t-exec-" + "e" * 32,
}
ANSWERS = [
    ("user_001", "user_confirmation"),
    ("kyc-provider", "identity_verification"),
    ("kyc-provider", "authority_verification"),
    ("kyc-provider", "beneficiary_verification"),
    ("treasury_approver_anna", "independent_human_approval"),
]
DOWN = ("idem_outage_down_0001", "idem_outage_down_0002", "idem_outage_down_0003")
BOUND_S = 2.0  # what the docs promise: the refusal comes within this
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    log: Path
    dsn: str


@pytest.fixture
def served(postgres: Any, tmp_path: Path) -> Iterator[Served]:
    import psycopg

    dsn = postgres.database("kcp_outage_fault")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE handler_runs (idempotency_key TEXT NOT NULL, pid INTEGER NOT NULL)")
    registry, issuer_keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    tokens = write_tokens(tmp_path, {token: principal for principal, token in WHO.items()})
    handlers = tmp_path / "handlers.json"
    pay = {"target": "replica_handlers:pay", "actions": ["execute_payment"]}
    handlers.write_text(json.dumps({"handlers": {"pay": pay}}))
    args = ["--bundle", str(bundle), "--trust", str(registry), "--handlers", str(handlers), "--ledger", dsn]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    args += ["--tokens", str(tokens), "--keyring", str(write_receipt_keyring(tmp_path))]
    args += context_args(args)
    port = free_port()
    tests = str(Path(__file__).resolve().parents[1])
    env = {
        **os.environ,
        "KCP_OPA_STORE": dsn,
        "KCP_OPA_TEST_HANDLER_DSN": dsn,
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    }
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--port", str(port), *args]
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=env, stderr=sink, stdout=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx2.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    try:
        yield Served(url, process, log, dsn)
    finally:
        stop_server(process)


def call(served: Served, method: str, path: str, who: str, body: Any = None, **kw: Any) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {WHO[who]}", **kw.pop("headers", {})}
    return httpx2.request(method, f"{served.url}{path}", json=body, headers=headers, timeout=30, **kw)


def timed(send: Any) -> tuple[httpx2.Response, float]:
    started = time.monotonic()
    response = send()
    return response, time.monotonic() - started


def decide(served: Served, key: str) -> dict[str, Any]:
    decided = call(served, "POST", "/v1/decisions", "local-agent", {"action": {**KYA, "idempotency_key": key}})
    assert decided.status_code == 200, decided.text
    body: dict[str, Any] = decided.json()
    return body


def open_challenges(served: Served, decision_id: str) -> dict[str, str]:
    opened = call(served, "POST", f"/v1/decisions/{decision_id}/challenges", "local-agent", {})
    assert opened.status_code == 200, opened.text
    return {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}


def answer(served: Served, challenge_id: str, who: str, control: str) -> httpx2.Response:
    body = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
    return call(served, "POST", f"/v1/challenges/{challenge_id}/result", who, body)


def approved(served: Served, key: str) -> tuple[dict[str, Any], str]:
    decision = decide(served, key)
    ids = open_challenges(served, decision["decision_id"])
    for who, control in ANSWERS:
        answered = answer(served, ids[control], who, control)
        assert answered.status_code == 200, answered.text
    return {**KYA, "idempotency_key": key}, decision["decision_id"]


def issue(served: Served, decision_id: str) -> httpx2.Response:
    return call(served, "POST", "/v1/receipts", "approval-desk", {"decision_id": decision_id})


def execute(served: Served, action: dict[str, Any], receipt: dict[str, Any]) -> httpx2.Response:
    body = {"action": action, "receipt": receipt, "handler": "pay"}
    return call(served, "POST", "/v1/executions", "payments-executor", body)


def ui_session(served: Served, who: str) -> httpx2.Client:
    client = httpx2.Client(base_url=served.url, timeout=30)
    page = client.get("/ui/login")
    nonce = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert nonce is not None, page.text
    signed = client.post("/ui/login", data={"csrf": nonce.group(1), "token": WHO[who]})
    assert signed.status_code == 303, signed.text
    return client


def mcp_session(served: Served, who: str) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {WHO[who]}"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    opened = httpx2.post(f"{served.url}/mcp", json=init, headers={**MCP_HEADERS, **auth}, timeout=30)
    assert opened.status_code == 200, opened.text
    session = {**auth, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    httpx2.post(f"{served.url}/mcp", json=notified, headers={**MCP_HEADERS, **session}, timeout=30)
    return session


def mcp_evaluate(served: Served, session: dict[str, str], key: str) -> dict[str, Any]:
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "evaluate_action", "arguments": {"action": {**KYA, "idempotency_key": key}}},
    }
    response = httpx2.post(f"{served.url}/mcp", json=request, headers={**MCP_HEADERS, **session}, timeout=30)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def outage_count(served: Served) -> float:
    text = httpx2.get(f"{served.url}/metrics", timeout=10).text
    found = re.findall(r"^kcp_opa_store_unavailable_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.MULTILINE)
    return sum(float(n) for n in found)


def pool_lines(served: Served) -> list[str]:
    """The log lines about the database connection itself (not the per-request refusals)."""
    lines = served.log.read_text(errors="replace").splitlines()
    return [line for line in lines if re.search(r"database_(unavailable|recovered)|error connecting|pool", line)]


def test_a_stopped_database_is_503_on_every_route_then_served_again_with_nothing_lost(
    postgres: Any, served: Served
) -> None:
    import psycopg

    if not postgres.port:
        pytest.skip("an external server (KCP_OPA_TEST_POSTGRES) is not stopped by the tests")
    acknowledged: list[str] = []
    # Before: an execution done (acknowledged), an approved decision not yet receipted, open challenges.
    paid, paid_id = approved(served, "idem_outage_paid_0001")
    receipt = issue(served, paid_id)
    assert receipt.status_code == 200, receipt.text
    done = execute(served, paid, receipt.json()["receipt"])
    assert done.status_code == 200 and done.json()["replayed"] is False, done.text
    waiting, waiting_id = approved(served, "idem_outage_wait_0001")
    early = issue(served, waiting_id)
    assert early.status_code == 200, early.text
    pending = decide(served, "idem_outage_pend_0001")
    pending_ids = open_challenges(served, pending["decision_id"])
    acknowledged += [paid_id, waiting_id, pending["decision_id"]]
    inbox = ui_session(served, "treasury_approver_anna")
    assert inbox.get("/ui/inbox").status_code == 200
    mcp = mcp_session(served, "local-agent")
    assert outage_count(served) == 0

    postgres.stop("fast")
    try:
        refusals = {
            "decide": lambda: call(
                served, "POST", "/v1/decisions", "local-agent", {"action": {**KYA, "idempotency_key": DOWN[0]}}
            ),
            "opa": lambda: call(
                served,
                "POST",
                "/v1/data/kcp/gate/decision",
                "local-agent",
                {"input": {**KYA, "idempotency_key": DOWN[1]}},
            ),
            "receipt": lambda: issue(served, waiting_id),
            "execute": lambda: execute(served, waiting, early.json()["receipt"]),
            "open_challenges": lambda: call(
                served, "POST", f"/v1/decisions/{pending['decision_id']}/challenges", "local-agent", {}
            ),
            "answer": lambda: answer(served, pending_ids["user_confirmation"], "user_001", "user_confirmation"),
            "inbox_api": lambda: call(served, "GET", "/v1/challenges?addressed_to=me", "treasury_approver_anna"),
            "audit_note": lambda: call(served, "POST", "/v1/audit-events", "local-agent", {"event": "down"}),
            # AuthZEN: a fault is a 503, never "decision": false (a batch ends at the first one)
            "authzen": lambda: call(served, "POST", "/access/v1/evaluation", "local-agent", as_authzen(KYA)),
            "authzen_batch": lambda: call(
                served, "POST", "/access/v1/evaluations", "local-agent", {"evaluations": [as_authzen(KYA)] * 2}
            ),
        }
        answered = {name: timed(send) for name, send in refusals.items()}
        wrong = {
            name: (response.status_code, round(took, 1), response.text[:160])
            for name, (response, took) in answered.items()
            if response.status_code != 503 or response.json().get("code") != "store_unavailable" or took >= BOUND_S
        }
        print({name: (response.status_code, round(took, 2)) for name, (response, took) in answered.items()})
        assert wrong == {}
        routes = {
            "decide": "/v1/decisions", "opa": "/v1/data/kcp/gate/decision", "receipt": "/v1/receipts",
            "execute": "/v1/executions", "open_challenges": "/v1/decisions/{decision_id}/challenges",
            "answer": "/v1/challenges/{challenge_id}/result", "inbox_api": "/v1/challenges",
            "audit_note": "/v1/audit-events", "authzen": "/access/v1/evaluation",
            "authzen_batch": "/access/v1/evaluations",
        }  # fmt: skip
        paths = httpx2.get(f"{served.url}/v1/openapi.json", timeout=10).json()["paths"]
        documented = {name: "503" in next(iter(paths[path].values()))["responses"] for name, path in routes.items()}
        assert documented == dict.fromkeys(refusals, True)  # each route's OpenAPI operation lists the 503 it answered
        page, took = timed(lambda: inbox.get("/ui/inbox"))
        assert page.status_code == 503 and "store_unavailable" in page.text, (page.status_code, page.text[:500])
        assert took < BOUND_S, took
        result, took = timed(lambda: mcp_evaluate(served, mcp, DOWN[2]))
        assert result["isError"] is True and result["structuredContent"]["code"] == "store_unavailable", result
        assert "decision" not in result["structuredContent"], result  # a fault, not a DENY
        assert took < BOUND_S, took
        ready, took = timed(lambda: httpx2.get(f"{served.url}/ready", timeout=10))
        assert ready.status_code == 503, ready.text
        assert ready.json()["store"]["ok"] is False and ready.json()["ledger"]["ok"] is False, ready.text
        assert took < BOUND_S, took
        assert httpx2.get(f"{served.url}/health", timeout=10).status_code == 200  # liveness: the process runs
        assert outage_count(served) >= len(refusals) + 2
        time.sleep(3)  # the pool keeps trying to reconnect meanwhile: its log must not say so each time
    finally:
        postgres.start()

    deadline = time.monotonic() + 60
    while httpx2.get(f"{served.url}/ready", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "the service never became ready again"
        time.sleep(0.2)
    after = decide(served, "idem_outage_after_001")
    acknowledged.append(after["decision_id"])
    issued = issue(served, waiting_id)
    assert issued.status_code == 200, issued.text
    ran = execute(served, waiting, early.json()["receipt"])
    assert ran.status_code == 200 and ran.json()["replayed"] is False, ran.text
    again = execute(served, paid, receipt.json()["receipt"])
    assert again.status_code == 409 and again.json()["code"] == "replay", again.text  # consumed before: kept
    assert answer(served, pending_ids["user_confirmation"], "user_001", "user_confirmation").status_code == 200
    assert inbox.get("/ui/inbox").status_code == 200
    assert mcp_evaluate(served, mcp, "idem_outage_after_002")["isError"] is False
    assert call(served, "GET", "/v1/challenges?addressed_to=me", "treasury_approver_anna").status_code == 200

    with psycopg.connect(served.dsn) as connection:
        runs = connection.execute("SELECT idempotency_key, count(*) FROM handler_runs GROUP BY 1").fetchall()
        kept = {row[0] for row in connection.execute("SELECT decision_id FROM service_decisions").fetchall()}
        lines = [row[0] for row in connection.execute("SELECT line FROM ledger_entries").fetchall()]
    assert dict(runs) == {"idem_outage_paid_0001": 1, "idem_outage_wait_0001": 1}
    assert set(acknowledged) <= kept
    ledgered = {json.loads(line).get("decision_id") for line in lines}
    assert set(acknowledged) <= ledgered
    verified = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "audit", "verify", served.dsn], capture_output=True, text=True, timeout=120
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr

    about = pool_lines(served)
    assert len([line for line in about if "database_unavailable" in line]) == 1, about
    assert len([line for line in about if "database_recovered" in line]) == 1, about
    assert len(about) == 2, about  # nothing per retry (psycopg's "error connecting in 'pool-1'" is not logged)


def test_the_cli_answers_an_unreachable_database_in_one_line_and_exit_5() -> None:
    """One line naming the fault and exit 5: never a usage error (2) nor a decision's exit (4)."""
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/kcp_nowhere"
    for command in (("store", "migrate"), ("executions", "list")):
        started = time.monotonic()
        proc = run_cli(*command, "--store", nowhere)
        assert time.monotonic() - started < 30
        assert proc.returncode == 5, (command, proc.returncode, proc.stdout, proc.stderr)
        assert proc.stdout == ""
        errors = [line for line in proc.stderr.splitlines() if line.startswith("kcp-opa: error:")]
        assert len(errors) == 1 and errors[0].startswith("kcp-opa: error: store_unavailable: "), proc.stderr
        assert "Traceback" not in proc.stderr and "password" not in proc.stderr
