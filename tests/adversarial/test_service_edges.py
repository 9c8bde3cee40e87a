"""Attack class: the service's edges (issue 26, class 7), against a real `kcp-opa serve` process
with a trust registry, bearer tokens and two registered handlers.

Each error path is an audited refusal, never a 500 or a traceback: a TTL of 1e309, an unknown
MCP tool, arguments outside a tool's input schema. A receipt for ``execute_payment`` runs only
a handler bound to ``execute_payment``. ``/metrics`` checks Host like the rest; ``/v1/status``
shows no file paths to an agent. A ``safe_stop`` challenge goes to someone the policy accepts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import REPO
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    start_server,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

from kcp_opa.trail.ledger import read_entries

#: The supplier payment, made by the local agent the tests call as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
WHO = {
    "local-agent": "t-agent-" + "a" * 32,
    "user_001": "t-subject-" + "s" * 32,
    "treasury_approver_anna": "t-approver-" + "p" * 32,
    "kyc-provider": "t-kyc-" + "k" * 32,
    "approval-desk": "t-issuer-" + "i" * 32,
    "payments-executor": "t-exec-" + "e" * 32,
    "ops_olga": "t-admin-" + "o" * 32,
}
ANSWERS = [
    ("user_001", "user_confirmation"),
    ("kyc-provider", "identity_verification"),
    ("kyc-provider", "authority_verification"),
    ("kyc-provider", "beneficiary_verification"),
    ("treasury_approver_anna", "independent_human_approval"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    work = tmp_path_factory.mktemp("edges")
    registry, issuer_keys = write_registry(work)
    data = yaml.safe_load(registry.read_text())
    data["issuers"][0]["controls"].append("safe_stop")  # serve-approvals may also sign a safe stop
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {token: principal for principal, token in WHO.items()})
    handlers = work / "handlers.json"
    # Two handlers: the payment one, and one that must never run under a payment's receipt.
    handlers.write_text(json.dumps({"handlers": {"execute_payment": "json:dumps", "wipe_ledger": "json:dumps"}}))
    ledger = work / "ledger.jsonl"
    args = ["--bundle", str(bundle), "--store", str(work / "service.db"), "--trust", str(registry)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    args += ["--tokens", str(tokens), "--keyring", str(write_receipt_keyring(work)), "--ledger", str(ledger)]
    args += ["--handlers", str(handlers)]
    process, url = start_server(args)
    try:
        yield url, ledger, work
    finally:
        stop_server(process)


def _post(url: str, path: str, who: str, body: Any, **headers: str) -> httpx2.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    heads = {"Authorization": f"Bearer {WHO[who]}", "Content-Type": "application/json", **headers}
    return httpx2.post(f"{url}{path}", content=content, headers=heads, timeout=60)


def _failures(ledger: Path, code: str) -> list[dict[str, Any]]:
    return [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("code") == code]


def _decide(url: str, action: dict[str, Any] = KYA) -> str:
    decided = _post(url, "/v1/decisions", "local-agent", {"action": action})
    assert decided.status_code == 200, decided.text
    return str(decided.json()["decision_id"])


def test_a_ttl_of_1e309_is_an_audited_refusal_not_a_500(served: tuple[str, Path, Path]) -> None:
    url, ledger, _ = served
    decision_id = _decide(url)
    codes = ("bad_request", "bad_arguments", "bad_ttl")
    before = sum(len(_failures(ledger, code)) for code in codes)
    for ttl in (b"1e309", b"-1e309", b"1e400"):
        answer = _post(url, f"/v1/decisions/{decision_id}/challenges", "local-agent", b'{"ttl_seconds": ' + ttl + b"}")
        assert answer.status_code == 400, (ttl, answer.status_code, answer.text[:300])
        assert "Traceback" not in answer.text and answer.json()["code"] in ("bad_request", "bad_arguments")
    huge = _post(url, f"/v1/decisions/{decision_id}/challenges", "local-agent", {"ttl_seconds": 10**30})
    assert huge.status_code in (400, 422) and huge.json()["code"] in codes, huge.text
    after = sum(len(_failures(ledger, code)) for code in codes)
    assert after - before == 4  # every one of them in the ledger


def _mcp(url: str, who: str) -> Any:
    accept = {"Accept": "application/json, text/event-stream"}
    client = {"name": "t", "version": "1"}
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
    opened = _post(url, "/mcp", who, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, **accept)
    assert opened.status_code == 200, opened.text
    session = {**accept, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    _post(url, "/mcp", who, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **session)

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        answer = _post(url, "/mcp", who, body, **session)
        assert answer.status_code == 200, answer.text[:300]
        result: dict[str, Any] = answer.json()["result"]
        return result

    return call


def test_an_unknown_mcp_tool_and_bad_arguments_are_audited_refusals(served: tuple[str, Path, Path]) -> None:
    url, ledger, _ = served
    call = _mcp(url, "local-agent")
    unknown = call("drop_all_tables", {})
    assert unknown["isError"] and unknown["structuredContent"]["code"] == "unknown_tool"
    audited = _failures(ledger, "unknown_tool")
    assert audited and audited[-1]["principal"]["id"] == "local-agent" and "drop_all_tables" in audited[-1]["message"]
    # input schemas are enforced: a number where a string belongs, an argument no tool takes
    decision_id = _decide(url)
    for arguments in (
        {"decision_id": 12345},
        {"decision_id": decision_id, "controls": "user_confirmation"},
        {"decision_id": decision_id, "ttl_seconds": 10},
        {"decision_id": decision_id, "as_principal": "treasury_approver_anna"},
    ):
        refused = call("create_control_challenge", arguments)
        assert refused["isError"] and refused["structuredContent"]["code"] == "bad_arguments", (arguments, refused)
    assert len(_failures(ledger, "bad_arguments")) >= 4


def _receipt(url: str, action: dict[str, Any]) -> dict[str, Any]:
    decision_id = _decide(url, action)
    opened = _post(url, f"/v1/decisions/{decision_id}/challenges", "local-agent", {})
    assert opened.status_code == 200, opened.text
    ids = {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}
    for who, control in ANSWERS:
        body = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
        answered = _post(url, f"/v1/challenges/{ids[control]}/result", who, body)
        assert answered.status_code == 200, answered.text
    issued = _post(url, "/v1/receipts", "approval-desk", {"decision_id": decision_id})
    assert issued.status_code == 200, issued.text
    receipt: dict[str, Any] = issued.json()["receipt"]
    return receipt


def test_a_payment_receipt_runs_only_the_handler_bound_to_execute_payment(served: tuple[str, Path, Path]) -> None:
    url, ledger, _ = served
    action = copy.deepcopy(KYA) | {"action_id": "act_handler_bound", "idempotency_key": "idem_handler_bound_01"}
    receipt = _receipt(url, action)
    wrong = _post(
        url, "/v1/executions", "payments-executor", {"action": action, "receipt": receipt, "handler": "wipe_ledger"}
    )
    assert wrong.status_code == 403 and wrong.json()["code"] == "handler_not_bound", wrong.text
    assert _failures(ledger, "handler_not_bound")
    assert not [e for _, e in read_entries(ledger) if e["type"] == "execution"]
    # the receipt was not spent by the refusal: the bound handler runs with it
    right = {"action": action, "receipt": receipt, "handler": "execute_payment"}
    ran = _post(url, "/v1/executions", "payments-executor", right)
    assert ran.status_code == 200, ran.text
    assert json.loads(ran.json()["outcome"])["requested_action"] == "execute_payment"


def test_metrics_check_host_and_status_shows_no_paths_to_an_agent(served: tuple[str, Path, Path]) -> None:
    url, ledger, work = served
    assert httpx2.get(f"{url}/metrics", timeout=30).status_code == 200
    rebound = httpx2.get(f"{url}/metrics", headers={"Host": "attacker.example:8181"}, timeout=30)
    assert rebound.status_code == 421 and "kcp_opa" not in rebound.text
    assert _failures(ledger, "bad_host")
    status = httpx2.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {WHO['local-agent']}"}, timeout=30)
    assert status.status_code == 200
    assert str(work) not in status.text and "path" not in status.json()["store"] | status.json()["ledger"]
    admin = httpx2.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {WHO['ops_olga']}"}, timeout=30)
    assert admin.json()["ledger"]["path"] == str(ledger)  # the operator still sees where the files are


def test_a_safe_stop_challenge_goes_to_someone_the_policy_accepts(served: tuple[str, Path, Path]) -> None:
    url, _, _ = served
    screening = copy.deepcopy(KYA) | {"action_id": "act_safe_stop", "idempotency_key": "idem_safe_stop_0001"}
    screening["attributes"] = {**KYA["attributes"], "screening_uncertain": True}
    decision_id = _decide(url, screening)
    opened = _post(url, f"/v1/decisions/{decision_id}/challenges", "local-agent", {"controls": ["safe_stop"]})
    assert opened.status_code == 200, opened.text
    (challenge,) = opened.json()["challenges"]
    assert "provider" not in challenge["addressed_to"]["kinds"]  # the control policy admits no provider
    assert "human" in challenge["addressed_to"]["kinds"]
    body = {"status": "PASSED", "evidence_reference": "ev:safe_stop"}
    provider = _post(url, f"/v1/challenges/{challenge['challenge_id']}/result", "kyc-provider", body)
    assert provider.status_code == 403  # not addressed to it: the challenge is not spent on a refusal
    answered = _post(url, f"/v1/challenges/{challenge['challenge_id']}/result", "treasury_approver_anna", body)
    assert answered.status_code == 200, answered.text
    assert "safe_stop" in answered.json()["decision"]["satisfied_controls"]
