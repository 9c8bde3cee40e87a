"""A second deployment written only from the docs (tests/deployments/hr-sick-leave): health data
under GDPR Art. 9(2)(b), with its own matrix, trust registry and decision cases, taken from the
manifest to an executed action with the CLI and with the service."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
from conftest import POLICIES, REPO, run_cli
from servicekit import start_server, stop_server, write_tokens

DEPLOY = REPO / "tests" / "deployments" / "hr-sick-leave"
KEYS = str(DEPLOY / "TEST-ONLY-keys.json")
ACTION = json.loads((DEPLOY / "action.json").read_text())
HOUR = dt.timedelta(hours=1)
SECRET = {"KCP_OPA_DESK_SECRET": "desk-seal-secret-for-tests-0123456789"}


def _compile(out: Path) -> Path:
    compiled = run_cli(
        "compile", str(DEPLOY / "knowledge.yaml"), "--matrix", str(DEPLOY / "matrix.yaml"),
        "--trust", str(DEPLOY / "trust.yaml"), "-o", str(out), "--no-engine-check", "--format", "json",
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kcp_opa", *args], env={**os.environ, **SECRET}, capture_output=True, text=True,
        check=False, cwd=REPO, timeout=300,
    )  # fmt: skip


def test_the_declarations_validate_strictly_and_the_ropa_records_article_9_2_b() -> None:
    files = [str(DEPLOY / n) for n in ("knowledge.yaml", "matrix.yaml", "trust.yaml")]
    validated = run_cli("validate", "--strict", *files, "--format", "json")
    assert validated.returncode == 0, validated.stdout
    warnings = {w["code"] for r in json.loads(validated.stdout) for w in r["warnings"]}
    notes = {w["code"] for r in json.loads(validated.stdout) for w in r["notes"]}
    assert not warnings and notes == {"advisory_declaration"}, (warnings, notes)  # GDPR: recorded, not decided on
    ropa = run_cli("ropa", str(DEPLOY / "knowledge.yaml"))
    assert ropa.returncode == 0 and "sick-notes" not in ropa.stderr, ropa.stderr  # the policy unit holds none
    record = {r["activity"]: r for r in json.loads(ropa.stdout)["records"]}["hr-sick-leave/sick-notes"]
    assert record["article_9_condition"].startswith("Art. 9(2)(b) employment")
    assert record["controller"] == "Example HR GmbH" and record["special_categories"] is True


def test_its_decision_cases_pass_on_both_engines() -> None:
    proc = run_cli(
        "test", str(POLICIES), "--cases", str(DEPLOY / "cases"), "--deployments", str(DEPLOY.parent),
        "--cases-only", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    metrics = json.loads(proc.stdout)["cases"]["metrics"]
    assert metrics["passed"] == metrics["cases"] == 3 and metrics["divergences"] == []


REGO_TEST = DEPLOY / "rego" / "hr_sick_leave_test.rego"


def test_its_rego_test_passes_on_both_engines() -> None:
    """kcp-opa test runs the deployment's own Rego test beside the policies it tests."""
    proc = run_cli(
        "test", str(POLICIES), str(DEPLOY), "--run", "hr_sick_leave", "--rego-only", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    tests = json.loads(proc.stdout)["tests"]
    names = {t["name"].rsplit(".", 1)[1] for t in tests}
    assert len(tests) >= 7 and all(t["file"].endswith("hr_sick_leave_test.rego") for t in tests), names
    assert {"test_hr_sick_leave_recording_a_sick_note_needs_human_approval",
            "test_hr_sick_leave_reading_health_data_is_denied"} <= names  # fmt: skip
    assert all(t["engines"]["regopy"]["outcome"] == t["engines"]["opa"]["outcome"] == "PASS" for t in tests), tests


def test_its_rego_test_decides_over_its_compiled_data(tmp_path: Path) -> None:
    """The Rego test's `_compiled` is this deployment's compiled data, not a hand-written likeness."""
    from kcp_opa.compile.bundle import read_bundle

    text = REGO_TEST.read_text(encoding="utf-8")
    start = text.index("_compiled := ") + len("_compiled := ")
    fixture = json.loads(text[start : text.index("\n}\n", start) + 2])
    data = read_bundle(_compile(tmp_path / "hr-sick-leave.tar.gz")).data["kcp_data"]
    fresh = {key: data[key] for key in ("units", "profiles", "tasks")}
    assert fixture == fresh, "recompile and paste kcp_data's units, profiles and tasks: " + json.dumps(fresh)


def test_the_cli_takes_it_from_manifest_to_an_executed_action(tmp_path: Path) -> None:
    bundle = _compile(tmp_path / "hr-sick-leave.tar.gz")
    desk = ["--bundle", str(bundle), "--trust", str(DEPLOY / "trust.yaml"), "--ledger", str(tmp_path / "l.jsonl")]
    desk += ["--gate-keyring", KEYS, "--context", str(DEPLOY / "context.yaml")]
    record = str(tmp_path / "record.json")
    opened = _cli("controls", "challenge", *desk, "--action", str(DEPLOY / "action.json"), "--record", record,
                  "--now", "2026-11-29T10:00:00Z")  # fmt: skip
    assert opened.returncode == 0, opened.stderr
    state = json.loads(opened.stdout)
    attested = run_cli(
        "controls", "attest", "--issuer", "hr-approvals", "--keyring", KEYS, "--kid", "hr-approvals-ed25519-test",
        "--control", "independent_human_approval", "--actor", "hr_manager_hana", "--decision-id",
        state["decision_id"], "--action-hash", state["action_hash"], "--reference", "approvals:sick_2026_031",
        "--output", str(tmp_path / "approval.json"), "--now", "2026-11-29T10:01:00Z",
    )  # fmt: skip
    assert attested.returncode == 0, attested.stderr
    recorded = _cli("controls", "record", *desk, "--record", record, "--evidence", str(tmp_path / "approval.json"),
                    "--action", str(DEPLOY / "action.json"))  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads(recorded.stdout)["authorization_status"] == "APPROVED"
    ring, public = str(tmp_path / "receipt-keys.json"), str(tmp_path / "receipt-public.json")
    assert run_cli("receipt", "keygen", "--kid", "receipts-1", "--keyring", ring, "--public", public).returncode == 0
    issued = _cli("controls", "issue", *desk, "--record", record, "--keyring", ring,
                  "--output", str(tmp_path / "receipt.json"), "--now", "2026-11-29T10:02:00Z")  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    handler = tmp_path / "record-sick-note.sh"
    handler.write_text('#!/bin/sh\ncat >/dev/null\necho \'{"sick_note": "recorded"}\'\n')
    handler.chmod(0o755)
    executed = run_cli(
        "executions", "run", "--action", str(DEPLOY / "action.json"), "--receipt", str(tmp_path / "receipt.json"),
        "--keyring", public, "--policy-version", json.loads(issued.stdout)["policy_version"],
        "--store", str(tmp_path / "executor.db"), "--bundle", str(bundle), "--ledger", str(tmp_path / "l.jsonl"),
        "--now", "2026-11-29T10:02:30Z", "--", str(handler),
    )  # fmt: skip
    assert executed.returncode == 0, executed.stderr
    assert json.loads(executed.stdout)["outcome"] == {"sick_note": "recorded"}
    assert json.loads(run_cli("audit", "verify", str(tmp_path / "l.jsonl"), "--format", "json").stdout)["ok"]


WHO = {
    "agent_hr_001": "t-agent-" + "a" * 32,
    "hr_manager_hana": "t-manager-" + "m" * 32,
    "hr-desk": "t-desk-" + "d" * 32,
    "leave-executor": "t-exec-" + "e" * 32,
}


def _post(url: str, path: str, who: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {WHO[who]}"}, timeout=60)


def test_the_service_takes_it_from_manifest_to_an_executed_action(tmp_path: Path) -> None:
    bundle = _compile(tmp_path / "hr-sick-leave.tar.gz")
    tokens = write_tokens(tmp_path, {token: principal for principal, token in WHO.items()})
    (tmp_path / "sick_notes.py").write_text(
        "def record(action):\n    return {'sick_note': 'recorded', 'ref': action['target']['reference']}\n"
    )
    (tmp_path / "handlers.json").write_text(json.dumps({"handlers": {"hr.sick_note.record": "sick_notes:record"}}))
    args = ["--bundle", str(bundle), "--trust", str(DEPLOY / "trust.yaml"), "--tokens", str(tokens)]
    args += ["--issuer-id", "kcp-opa-gate", "--issuer-id", "hr-approvals", "--issuer-keyring", KEYS]
    args += ["--store", str(tmp_path / "service.db"), "--ledger", str(tmp_path / "service.jsonl")]
    args += ["--handlers", str(tmp_path / "handlers.json"), "--region", "EU"]
    # The HR system attests the employee's sick-note evidence (a signed fact, bound to the subject).
    from kcp_opa.context import sign_fact
    from kcp_opa.core.signing import load_keyring

    now = dt.datetime.now(dt.UTC)
    times = {k: (now + d).strftime("%Y-%m-%dT%H:%M:%SZ") for k, d in (("issued_at", -HOUR), ("expires_at", HOUR))}
    fact = {"fact": "evidence_status", "value": "present", "subject_id": "emp_042", **times}
    signed = sign_fact(fact, "hr-facts", load_keyring(KEYS).keys["hr-facts-ed25519-test"])
    (tmp_path / "attestations.json").write_text(json.dumps([signed]))
    args += ["--attestations", str(tmp_path / "attestations.json")]
    # Over the service the caller is the agent: the action states it as the authenticated principal.
    action = json.loads(json.dumps(ACTION))
    action["authorization_context"]["authenticated_principal"] = "agent_hr_001"
    action["created_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # the service's clock decides
    server, url = start_server(args)
    try:
        decided = _post(url, "/v1/decisions", "agent_hr_001", {"action": action})
        assert decided.status_code == 200, decided.text
        assert decided.json()["decision"] == "HUMAN_APPROVAL", decided.text[:1500]
        opened = _post(url, f"/v1/decisions/{decided.json()['decision_id']}/challenges", "agent_hr_001", {})
        assert opened.status_code == 200, opened.text
        ids = {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}
        body = {"status": "PASSED", "evidence_reference": "approvals:sick_2026_031"}
        answered = _post(url, f"/v1/challenges/{ids['independent_human_approval']}/result", "hr_manager_hana", body)
        assert answered.status_code == 200, answered.text
        assert answered.json()["decision"]["authorization_status"] == "APPROVED"
        issued = _post(url, "/v1/receipts", "hr-desk", {"decision_id": decided.json()["decision_id"]})
        assert issued.status_code == 200, issued.text
        receipt = issued.json()["receipt"]
        run = {"action": action, "receipt": receipt, "handler": "hr.sick_note.record"}
        executed = _post(url, "/v1/executions", "leave-executor", run)
        assert executed.status_code == 200, executed.text
        assert executed.json()["outcome"] == {"sick_note": "recorded", "ref": "sick_2026_031"}
        again = _post(url, "/v1/executions", "leave-executor", run)
        assert (again.status_code, again.json()["code"]) == (409, "replay"), again.text  # once only
    finally:
        stop_server(server)
    assert run_cli("audit", "verify", str(tmp_path / "service.jsonl")).returncode == 0
