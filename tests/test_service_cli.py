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

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.service.tools import TOOL_NAMES

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("serve")
    (work / "bundles").mkdir()
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, work / "bundles" / "finance.tar.gz")
    return work


def test_stdio_with_only_a_bundle_lists_nine_tools_and_routes_the_payment_to_human_approval(workdir: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kcp_opa", "serve", "--transport", "stdio", "--bundle", "bundles/finance.tar.gz"],
        cwd=str(workdir),
        env={k: v for k, v in os.environ.items() if k != "KCP_OPA_SERVE_TOKEN"},
    )

    async def main() -> None:
        async with Client(params) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("evaluate_financial_action", {"action": KYA})
        assert tools == list(TOOL_NAMES)
        assert not result.is_error and isinstance(result.structured_content, dict)
        decision = result.structured_content
        assert decision["decision"] == "HUMAN_APPROVAL"
        assert sorted(decision["required_controls"]) == [
            "authority_verification",
            "beneficiary_verification",
            "identity_verification",
            "independent_human_approval",
            "standard_audit_logging",
            "user_confirmation",
        ]

    anyio.run(main)
    # The defaults: the store and the ledger under ./audit, the decision written to the ledger.
    assert (workdir / "audit" / "service.db").exists()
    assert '"type":"decision"' in (workdir / "audit" / "service.jsonl").read_text()


def test_trust_is_refused_until_the_registry_lands(workdir: Path) -> None:
    proc = run_cli("serve", "--bundle", "bundles/finance.tar.gz", "--trust", "trust.yaml", cwd=workdir)
    assert proc.returncode == 2
    assert "--trust (the trust registry) is not available" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_http_without_a_token_refuses_to_start(workdir: Path) -> None:
    proc = run_cli("serve", "--transport", "http", "--bundle", "bundles/finance.tar.gz", cwd=workdir)
    assert proc.returncode == 2 and "KCP_OPA_SERVE_TOKEN" in proc.stderr


def test_a_missing_bundle_is_one_line_and_exit_2(workdir: Path) -> None:
    proc = run_cli("serve", "--bundle", "bundles/nope.tar.gz", cwd=workdir)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope.tar.gz" in proc.stderr


def test_handlers_name_importable_callables_or_serve_refuses_to_start(workdir: Path) -> None:
    from kcp_opa.core.errors import CodedError
    from kcp_opa.service.handlers import load_handlers

    assert load_handlers({"dumps": "json:dumps"}) == {"dumps": json.dumps}
    for bad in ("json", "json:nope", "no_such_module_kcp:run", "json:__doc__"):
        with pytest.raises(CodedError) as refused:
            load_handlers({"x": bad})
        assert refused.value.code == "bad_handler"
    (workdir / "handlers.json").write_text(json.dumps({"handlers": {"pay": "no_such_module_kcp:pay"}}))
    proc = run_cli("serve", "--bundle", "bundles/finance.tar.gz", "--handlers", "handlers.json", cwd=workdir)
    assert proc.returncode == 2 and "handler pay: cannot import no_such_module_kcp:pay" in proc.stderr
