"""`kcp-opa serve` as a user starts it: the done-means check over stdio, and its refusals."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from netkit import free_port
from servicekit import GATE_ISSUER, SERVICE_ISSUER, compile_finance, write_registry

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.service.tools import TOOL_NAMES

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
LOCAL_KYA = KYA | {"agent_id": "local-agent"}  # who acts is the caller: the local agent's own payment


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("serve")
    (work / "bundles").mkdir()
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, work / "bundles" / "finance.tar.gz")
    return work


def test_stdio_with_only_a_bundle_lists_nine_tools_and_holds_a_payment_it_knows_nothing_about(workdir: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kcp_opa", "serve", "--transport", "stdio", "--bundle", "bundles/finance.tar.gz"],
        cwd=str(workdir),
        env={k: v for k, v in os.environ.items() if k != "KCP_OPA_SERVE_TOKEN"},
    )

    async def main() -> None:
        async with Client(params) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("evaluate_financial_action", {"action": LOCAL_KYA})
        assert tools == list(TOOL_NAMES)
        assert not result.is_error and isinstance(result.structured_content, dict)
        decision = result.structured_content
        # Without a registry the server knows neither the agent's scope nor the beneficiary's
        # status: the payment is held, whatever the action states about them.
        assert decision["decision"] == "ESCALATE" and "context_missing" in decision["reason_codes"]

    anyio.run(main)
    # The defaults: the store and the ledger under ./audit, the decision written to the ledger.
    assert (workdir / "audit" / "service.db").exists()
    assert '"type":"decision"' in (workdir / "audit" / "service.jsonl").read_text()


def test_stdio_with_trust_serves_a_registered_principal_and_records_through_the_registry(tmp_path: Path) -> None:
    """`serve --trust`: the caller's kind and roles come from the registry; the desk checks the bundle's registry."""
    registry, keys = write_registry(tmp_path)
    compile_finance(tmp_path / "finance.tar.gz", registry)
    args = ["-m", "kcp_opa", "serve", "--bundle", "finance.tar.gz", "--trust", "trust.yaml"]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--principal", "Local-Agent"]
    env = {**os.environ, "KCP_OPA_ISSUER_KEYRING": str(keys)}  # the key file by environment, as documented
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path), env=env)

    async def main() -> None:
        async with Client(params) as client:
            decided = await client.call_tool("evaluate_financial_action", {"action": LOCAL_KYA})
            assert isinstance(decided.structured_content, dict) and not decided.is_error
            decision = decided.structured_content
            # The gate's own control is already signed evidence (its ledger entry, as the registered gate issuer).
            assert [e["issuer"] for e in decision["control_evidence"]] == [GATE_ISSUER]
            opened = await client.call_tool("create_control_challenge", {"decision_id": decision["decision_id"]})
            assert isinstance(opened.structured_content, dict) and not opened.is_error
            challenge = opened.structured_content["challenges"][0]["challenge_id"]
            answer = {"challenge_id": challenge, "status": "PASSED", "evidence_reference": "chat:ok"}
            refused = await client.call_tool("record_control_result", answer)
        assert refused.is_error and refused.structured_content == {
            "error": "agent local-agent (agent) may not record control results",
            "code": "not_authorized",
        }

    anyio.run(main)


def test_http_with_trust_maps_token_hashes_from_the_tokens_file_to_registry_principals(tmp_path: Path) -> None:
    import subprocess
    import time

    import httpx2

    from kcp_opa.service.callers import token_hash

    registry, keys = write_registry(tmp_path)
    compile_finance(tmp_path / "finance.tar.gz", registry)
    approver, agent = "t" * 40, "u" * 40
    tokens = {token_hash(approver): "Treasury_Approver_Anna", token_hash(agent): "agent_payments_001"}
    (tmp_path / "tokens.json").write_text(json.dumps({"tokens": tokens}))
    port = free_port()
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--bundle", "finance.tar.gz"]
    command += ["--trust", "trust.yaml", "--issuer-id", SERVICE_ISSUER, "--tokens", "tokens.json", "--port", str(port)]
    command += ["--attestations", "attestations.json"]  # write_registry's: the subject's beneficiary status
    env = {**os.environ, "KCP_OPA_ISSUER_KEYRING": str(keys)}
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, process.stderr
            time.sleep(0.1)
        status = httpx2.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {approver}"}, timeout=30)
        assert status.status_code == 200 and status.json()["trust"]["name"] == "service-tests"
        decided = httpx2.post(
            f"{url}/v1/decisions", json={"action": KYA}, headers={"Authorization": f"Bearer {agent}"}, timeout=30
        )
        assert decided.status_code == 200 and decided.json()["decision"] == "HUMAN_APPROVAL"
        # The agent is an ai_agent in the registry: it may not ask for a receipt.
        refused = httpx2.post(
            f"{url}/v1/receipts",
            json={"decision_id": decided.json()["decision_id"]},
            headers={"Authorization": f"Bearer {agent}"},
            timeout=30,
        )
        assert refused.status_code == 403 and refused.json()["code"] == "not_authorized"
        assert httpx2.get(f"{url}/v1/status", headers={"Authorization": "Bearer " + "v" * 40}).status_code == 401
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_trust_options_are_checked_before_serving(workdir: Path, tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    base = ["serve", "--bundle", "bundles/finance.tar.gz"]
    trusted = [*base, "--trust", str(registry), "--issuer-keyring", str(keys), "--principal", "local-agent"]
    cases = [
        ([*base, "--issuer-id", SERVICE_ISSUER], "need --trust"),
        ([*base, "--trust", str(registry)], "--trust needs --issuer-id and --issuer-keyring"),
        (
            [*base, "--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-keyring", str(keys)],
            "--principal",
        ),
        ([*trusted, "--transport", "http", "--issuer-id", SERVICE_ISSUER], "--tokens"),
        # The bundle was compiled without this registry: the desk refuses it.
        ([*trusted, "--issuer-id", SERVICE_ISSUER], "compile with --trust"),
        ([*trusted, "--issuer-id", "approval-app"], "not in the trust registry"),
    ]
    for args, message in cases:
        proc = run_cli(*args, cwd=workdir)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_http_without_a_token_refuses_to_start(workdir: Path) -> None:
    proc = run_cli("serve", "--transport", "http", "--bundle", "bundles/finance.tar.gz", cwd=workdir)
    assert proc.returncode == 2 and "KCP_OPA_SERVE_TOKEN" in proc.stderr


def test_a_missing_bundle_is_one_line_and_exit_2(workdir: Path) -> None:
    proc = run_cli("serve", "--bundle", "bundles/nope.tar.gz", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope.tar.gz" in proc.stderr


def test_handlers_name_importable_callables_or_serve_refuses_to_start(workdir: Path) -> None:
    from kcp_opa.core.errors import CodedError
    from kcp_opa.service.handlers import bound, load_handlers

    assert load_handlers({"dumps": "json:dumps"}) == {"dumps": bound(json.dumps, "dumps")}
    assert load_handlers({"d": {"target": "json:dumps", "actions": ["x"]}}) == {"d": bound(json.dumps, "x")}
    for bad in ("json", "json:nope", "no_such_module_kcp:run", "json:__doc__"):
        with pytest.raises(CodedError) as refused:
            load_handlers({"x": bad})
        assert refused.value.code == "bad_handler"
    (workdir / "handlers.json").write_text(json.dumps({"handlers": {"pay": "no_such_module_kcp:pay"}}))
    proc = run_cli("serve", "--bundle", "bundles/finance.tar.gz", "--handlers", "handlers.json", cwd=workdir)
    assert proc.returncode == 2 and "handler pay: cannot import no_such_module_kcp:pay" in proc.stderr
