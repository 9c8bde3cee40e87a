"""Done means: a new deployment (tests/deployments/hr-leave, not a reference one) goes from its
manifest to a signed receipt and an executed action with the CLI only, following the docs. This
runs docs/getting-started.md's script as written, then checks what it produced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, run_cli

GUIDE = REPO / "docs" / "getting-started.md"
DEPLOY = REPO / "tests" / "deployments" / "hr-leave"


def _script() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = [b.split("\n```", 1)[0] for b in text.split("```sh\n")[1:]]
    assert len(blocks) == 1, "the guide has one script"
    return blocks[0]


def test_the_guide_takes_a_new_deployment_to_an_executed_action(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "WORK": str(tmp_path),
        "DEPLOY": "tests/deployments/hr-leave",
        "POLICIES": "policies",
    }
    proc = subprocess.run(
        ["bash", "-c", _script()], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # The bundle is named after the manifest's project, and the matrix routed the approval.
    assert (tmp_path / "bundles" / "hr-leave.tar.gz").is_file()
    assert "hr_manager" in proc.stdout and "matrix_approve" in proc.stdout
    # Every fact from the registry, the gate and a signed attestation: none missing, none in conflict.
    assert "context_missing" not in proc.stdout and "context_conflict" not in proc.stdout
    attested = json.loads((tmp_path / "attestations.json").read_text())
    assert [(a["fact"], a["issuer"]) for a in attested] == [("evidence_status", "hr-records")]
    recorded = json.loads((tmp_path / "recorded.json").read_text())
    assert recorded["authorization_status"] == "APPROVED"

    # A signed receipt for this action, which verifies with the public key alone...
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    action = json.loads((DEPLOY / "action.json").read_text())
    assert receipt["signature"]["alg"] == "Ed25519" and receipt["action_hash"] == recorded["action_hash"]
    assert "independent_human_approval" in receipt["required_controls"]

    # ... consumed by the one execution, whose handler ran once.
    executed = json.loads((tmp_path / "executed.json").read_text())
    assert executed == {
        "ok": True, "idempotency_key": action["idempotency_key"], "receipt_id": receipt["receipt_id"],
        "replayed": False, "outcome": {"leave": "granted"},
    }  # fmt: skip
    again = run_cli(
        "executions", "run", "--action", str(DEPLOY / "action.json"), "--receipt", str(tmp_path / "receipt.json"),
        "--keyring", str(tmp_path / "receipt-public.json"), "--policy-version", receipt["policy_version"],
        "--store", str(tmp_path / "executor.db"), "--now", "2026-11-29T10:02:40Z", "--", "false",
    )  # fmt: skip
    assert again.returncode == 1 and json.loads(again.stderr)["code"] == "replay"

    # The auditor's view: the chain verifies and records the decision, the control and the execution.
    assert "chain intact" in proc.stdout
    verified = json.loads(run_cli("audit", "verify", str(tmp_path / "ledger.jsonl"), "--format", "json").stdout)
    assert verified["ok"] is True and verified["entries"] >= 3
    kinds = [json.loads(line).get("type") for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert "execution" in kinds


def test_an_employee_cannot_approve_their_own_leave(tmp_path: Path) -> None:
    # The guide's step 5 with the employee as approver: refused, and no receipt can follow.
    env = {**os.environ, "KCP_OPA_DESK_SECRET": "desk-seal-secret-for-tests-0123456789"}
    bundle = tmp_path / "hr.tar.gz"
    compiled = run_cli(
        "compile", str(DEPLOY / "knowledge.yaml"), "--matrix", str(DEPLOY / "matrix.yaml"),
        "--trust", str(DEPLOY / "trust.yaml"), "-o", str(bundle), "--no-engine-check", "--format", "json",
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    keys = str(DEPLOY / "TEST-ONLY-keys.json")
    desk = ["--bundle", str(bundle), "--trust", str(DEPLOY / "trust.yaml"), "--ledger", str(tmp_path / "l.jsonl")]
    desk += ["--gate-keyring", keys, "--context", str(DEPLOY / "context.yaml")]
    record = str(tmp_path / "record.json")
    opened = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "controls", "challenge", *desk, "--action", str(DEPLOY / "action.json"),
         "--record", record, "--now", "2026-11-29T10:00:00Z"],
        env=env, capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert opened.returncode == 0, opened.stderr
    state = json.loads(opened.stdout)
    attested = run_cli(
        "controls", "attest", "--issuer", "hr-approvals", "--keyring", keys, "--kid", "hr-approvals-ed25519-test",
        "--control", "independent_human_approval", "--actor", "emp_042", "--decision-id", state["decision_id"],
        "--action-hash", state["action_hash"], "--reference", "self", "--output", str(tmp_path / "self.json"),
        "--now", "2026-11-29T10:01:00Z",
    )  # fmt: skip
    assert attested.returncode == 0, attested.stderr
    recorded = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "controls", "record", *desk, "--record", record,
         "--evidence", str(tmp_path / "self.json"), "--action", str(DEPLOY / "action.json")],
        env=env, capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert recorded.returncode != 0 and json.loads(recorded.stderr)["code"] == "self_approval"


def test_a_failing_step_of_the_pasted_guide_leaves_the_shell_running(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "WORK": str(tmp_path),
        "DEPLOY": str(tmp_path),  # no deployment there: step 1 fails
        "POLICIES": "policies",
    }
    pasted = _script() + "\necho the-shell-is-still-here\n"
    proc = subprocess.run(
        ["bash", "-c", pasted], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert "the-shell-is-still-here" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no such file" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "bundles").exists()  # the walk-through stopped at the failing step
