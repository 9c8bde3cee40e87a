"""The service set up by hand from docs/service.md (issue 32, items 8-10), with real servers.

- the docs' `--trust ... --issuer-id` example runs as written and every control can be signed;
  a service started with too few issuers says at start which controls none of them may sign;
- a handler module next to the handlers file is found, and a wrong one stops the start;
- without --keyring, a receipt issued before a restart is still honoured after it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
from conftest import REPO
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    free_port,
    start_server,
    stop_server,
    write_registry,
    write_tokens,
)

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
REGISTRY = REPO / "fixtures" / "trust" / "registry.yaml"


def _docs_trust_example() -> str:
    """docs/service.md's lines from the issuer keyring to the `kcp-opa serve --trust` command."""
    text = (REPO / "docs" / "service.md").read_text()
    block = text.split("```sh\n", 1)[1].split("\n```", 1)[0]
    start = block.index("export KCP_OPA_ISSUER_KEYRING")
    end = block.index("make serve-demo")
    return block[start:end]


def _serve_until_healthy(script: str, cwd: Path) -> tuple[int, str]:
    """Run ``script`` (its last command a server) in bash; once /health answers, stop it; (port, stderr)."""
    port = free_port()
    script = script.replace("kcp-opa serve --transport http", f"exec kcp-opa serve --transport http --port {port}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)

    deadline = time.monotonic() + 120
    healthy = False
    while time.monotonic() < deadline and process.poll() is None:
        try:
            healthy = httpx2.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx2.TransportError:
            healthy = False
        if healthy:
            break
        time.sleep(0.2)
    stop_server(process)  # type: ignore[arg-type]
    stderr = process.stderr.read() if process.stderr else ""
    assert healthy, stderr
    return port, stderr


def test_the_docs_trust_example_runs_as_written_and_every_control_can_be_signed(tmp_path: Path) -> None:
    (tmp_path / "bundles").mkdir()
    compile_finance(tmp_path / "bundles" / "finance.tar.gz", REGISTRY)  # what `make bundle` makes
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    _, stderr = _serve_until_healthy(_docs_trust_example(), tmp_path)
    assert "warning: no --issuer-id may sign" not in stderr, stderr
    assert json.loads((tmp_path / "tokens.json").read_text())["tokens"]


def test_the_service_says_at_start_which_controls_no_issuer_can_sign(tmp_path: Path) -> None:
    (tmp_path / "bundles").mkdir()
    compile_finance(tmp_path / "bundles" / "finance.tar.gz", REGISTRY)
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    one_issuer = re.sub(r"--issuer-id .*", "--issuer-id approval-app", _docs_trust_example(), flags=re.DOTALL)
    _, stderr = _serve_until_healthy(one_issuer, tmp_path)
    unsignable = set(re.findall(r"warning: no --issuer-id may sign (\w+)", stderr))
    assert {"identity_verification", "user_confirmation", "step_up_authentication"} <= unsignable, stderr
    assert "beneficiary_verification" in unsignable and "independent_human_approval" not in unsignable
    assert "add --issuer-id bank-idp" in stderr


# -- item 9: handlers ---------------------------------------------------------------------------


def _serve_with_handlers(tmp_path: Path, module: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    bundle = tmp_path / "no-bundle.tar.gz"  # the handlers load first; then the start stops on this
    (tmp_path / "grant_leave.py").write_text(module)
    (tmp_path / "handlers.json").write_text(json.dumps({"handlers": {"grant_leave": "grant_leave:grant"}}))
    env = {**os.environ, "KCP_OPA_SERVE_TOKEN": "t" * 40}  # the module's directory is on no import path
    command = [sys.executable, "-m", "kcp_opa", "serve", "--transport", "http", "--port", "0"]
    command += ["--bundle", str(bundle), "--handlers", str(tmp_path / "handlers.json")]
    command += ["--store", str(tmp_path / "s.db"), "--ledger", str(tmp_path / "l.jsonl")]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_handler_with_the_wrong_signature_stops_the_start(tmp_path: Path) -> None:
    proc = _serve_with_handlers(tmp_path, "def grant(action, extra):\n    return {}\n", cwd=tmp_path.parent)
    assert proc.returncode == 2
    assert "must take one argument, the action (fn(action))" in proc.stderr, proc.stderr


def test_a_handler_module_that_fails_to_import_stops_the_start_in_one_line(tmp_path: Path) -> None:
    proc = _serve_with_handlers(tmp_path, "def grant(action:\n", cwd=tmp_path.parent)
    assert proc.returncode == 2
    assert "importing grant_leave failed: SyntaxError" in proc.stderr and "Traceback" not in proc.stderr


def test_a_handler_module_next_to_the_handlers_file_is_found(tmp_path: Path) -> None:
    proc = _serve_with_handlers(tmp_path, "def grant(action):\n    return {'ok': True}\n", cwd=tmp_path.parent)
    assert proc.returncode == 2 and "no-bundle.tar.gz" in proc.stderr, proc.stderr  # past the handlers
    assert "handler grant_leave" not in proc.stderr, proc.stderr


# -- item 10: the receipt key across a restart --------------------------------------------------

WHO = {
    "local-agent": "t-agent-" + "a" * 32,
    "user_001": "t-subject-" + "s" * 32,
    "treasury_approver_anna": "t-approver-" + "p" * 32,
    "kyc-provider": "t-kyc-" + "k" * 32,
    "approval-desk": "t-issuer-" + "i" * 32,
    "payments-executor": "t-exec-" + "e" * 32,
}


def _post(url: str, path: str, who: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {WHO[who]}"}, timeout=60)


def test_a_receipt_issued_before_a_restart_without_keyring_is_honoured_after_it(tmp_path: Path) -> None:
    registry, issuer_keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    tokens = write_tokens(tmp_path, {token: principal for principal, token in WHO.items()})
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "service.db"), "--trust", str(registry)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    args += ["--tokens", str(tokens), "--ledger", str(tmp_path / "ledger.jsonl")]  # no --keyring
    first, url = start_server(args)
    try:
        decided = _post(url, "/v1/decisions", "local-agent", {"action": KYA}).json()
        opened = _post(url, f"/v1/decisions/{decided['decision_id']}/challenges", "local-agent", {}).json()
        ids = {c["control"]: c["challenge_id"] for c in opened["challenges"]}
        for who, control in [
            ("user_001", "user_confirmation"),
            ("kyc-provider", "identity_verification"),
            ("kyc-provider", "authority_verification"),
            ("kyc-provider", "beneficiary_verification"),
            ("treasury_approver_anna", "independent_human_approval"),
        ]:
            body = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
            answered = _post(url, f"/v1/challenges/{ids[control]}/result", who, body)
            assert answered.status_code == 200, answered.text
        issued = _post(url, "/v1/receipts", "approval-desk", {"decision_id": decided["decision_id"]})
        assert issued.status_code == 200, issued.text
        receipt = issued.json()["receipt"]
    finally:
        stop_server(first)
    second, url = start_server(args)
    try:
        verified = _post(url, "/v1/receipts/verify", "payments-executor", {"receipt": receipt, "action": KYA})
        assert verified.status_code == 200, verified.text
        assert verified.json()["consumed"] is True
    finally:
        stop_server(second)
