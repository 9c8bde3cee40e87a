"""Attack class: cashing a receipt at the service after its policy stopped saying yes.

Over a real ``kcp-opa serve`` process: an agent's read is decided ALLOW and a receipt signed;
then the bundle is hot-reloaded to one that forbids the read (or the server crashes and comes
back on it). The executor presenting the receipt, through ``/v1/executions`` or
``/v1/receipts/verify``, must be refused ``policy_changed`` naming the new decision, the handler
must not run, and the ledger must hold both decisions, each replayed on OPA from its archived
input on the bundle it names. Without the re-decision the receipt would be honoured until it
expired.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uikit
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, opa_query
from exceptionkit import ISSUER, exception, key, write_file
from servicekit import GATE_ISSUER, SERVICE_ISSUER, start_server, stop_server, write_registry, write_tokens

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.context import sign_fact
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.ledger import read_entries

AGENT = "sd-agent"
WHO = {AGENT: "t-sd-agent-" + "a" * 32, "approval-desk": "t-desk-" + "b" * 32}
WHO |= {"payments-executor": "t-exec-" + "c" * 32, "ops_olga": "t-admin-" + "d" * 32}
WHO |= {"auditor_ada": "t-auditor-" + "e" * 32}
browser = uikit.browser  # the module-scoped headless Chromium
#: What the providers attest about the customer: evidence present, nothing new or uncertain.
SUBJECT = {"evidence_status": "present", "new_beneficiary": False, "modified_beneficiary": False}
SUBJECT["screening_uncertain"] = False
BASE: dict[str, Any] = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]


@dataclass
class Served:
    work: Path
    url: str
    process: Any
    live: Path
    before: Path
    after: Path
    ledger: Path
    exceptions: Path
    runs: Path
    args: list[str]
    env: dict[str, str]


def _registry(work: Path) -> tuple[Path, Path, Any]:
    """The service tests' registry, the support agent, a DPO who grants exceptions and the
    change board that signs them (its TEST-ONLY key is returned)."""
    registry_path, keys = write_registry(work)
    registry = yaml.safe_load(registry_path.read_text())
    registry["principals"].append(
        {
            "id": AGENT,
            "type": "ai_agent",
            "actor_role": "support_agent",
            "agent_scope": list(BASE["authorization_context"]["agent_scope"]),
            "model": dict(BASE["runtime"]["model"]),
            "auth_scopes": ["support:read"],
        }
    )
    registry["principals"].append({"id": "dpo@example.com", "type": "human", "roles": ["dpo"]})
    registry["exception_grantor_roles"] = ["dpo"]
    board = key()
    public = Keyring({board.kid: board}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    registry["issuers"].append(
        {
            "id": ISSUER,
            "type": "approval_app",
            "controls": [],
            "signs_exceptions": True,
            "keys": [{"kid": board.kid, "alg": "Ed25519", "public_key": public}],
        }
    )
    attestor = generate_ed25519("recheck-attestor-ed25519")
    public = Keyring({attestor.kid: attestor}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    registry["issuers"].append(
        {
            "id": "recheck-attestor",
            "type": "provider",
            "controls": [],
            "facts": sorted(SUBJECT),
            "keys": [{"kid": attestor.kid, "alg": "Ed25519", "public_key": public}],
        }
    )
    registry_path.write_text(yaml.safe_dump(registry, sort_keys=False))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    times = {"issued_at": now - dt.timedelta(hours=1), "expires_at": now + dt.timedelta(days=1)}
    stamps = {k: v.strftime("%Y-%m-%dT%H:%M:%SZ") for k, v in times.items()}
    items = [
        sign_fact({"fact": f, "value": v, "subject_id": "user_001", **stamps}, "recheck-attestor", attestor)
        for f, v in SUBJECT.items()
    ]
    (work / "attestations.json").write_text(json.dumps(items))  # serve reads the file beside the registry
    return registry_path, keys, board


def _phone_waiver(board: Any) -> dict[str, Any]:
    """The DPO lets the support agent read phone on customer-records of tenant_a for a day."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    scope = {"tenant_id": "tenant_a", "unit": "support-desk/customer-records", "agent_id": AGENT}
    return exception(board, issued=now - dt.timedelta(minutes=5), expires=now + dt.timedelta(days=1), scope=scope)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    registry, issuer_keys, board = _registry(tmp_path)
    exceptions = write_file(tmp_path / "exceptions.yaml", [_phone_waiver(board)])
    base = DEPLOYMENTS / "support-desk"
    before, after = tmp_path / "before.tar.gz", tmp_path / "after.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, before, options=CompileOptions(trust_path=registry)
    )
    matrix = yaml.safe_load((base / "matrix.yaml").read_text())
    matrix["task_types"]["read"]["data_categories"]["personal"] = "forbidden"  # same version: a bad day
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    compile_bundle(
        [base / "knowledge.yaml"],
        tmp_path / "matrix.yaml",
        POLICIES,
        after,
        options=CompileOptions(trust_path=registry),
    )
    live = tmp_path / "live.tar.gz"
    shutil.copyfile(before, live)
    handlers = tmp_path / "handlers.json"
    handlers.write_text(
        json.dumps({"handlers": {"read": {"target": "readhandlers:read", "actions": ["crm.get_customer"]}}})
    )
    tokens = write_tokens(tmp_path, {token: who for who, token in WHO.items()})
    ledger, runs = tmp_path / "ledger.jsonl", tmp_path / "handler-runs.txt"
    args = ["--bundle", str(live), "--store", str(tmp_path / "store.db"), "--ledger", str(ledger)]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER]
    args += ["--issuer-keyring", str(issuer_keys), "--tokens", str(tokens), "--handlers", str(handlers)]
    args += ["--exceptions", str(exceptions)]
    tests = str(Path(__file__).resolve().parents[1])
    env = {
        "KCP_OPA_TEST_HANDLER_LOG": str(runs),
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    }
    process, url = start_server(args, env=env)
    running = Served(tmp_path, url, process, live, before, after, ledger, exceptions, runs, args, env)
    try:
        yield running
    finally:
        stop_server(running.process)


def _post(served: Served, path: str, who: str, body: dict[str, Any]) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {WHO[who]}"}
    return httpx2.post(f"{served.url}{path}", json=body, headers=headers, timeout=120)


def _action(key: str, fields: tuple[str, ...] = ("name", "email")) -> dict[str, Any]:
    action = copy.deepcopy(BASE)
    action["knowledge"]["fields_read"] = list(fields)
    action["idempotency_key"] = key
    action["action_id"] = f"act_{key}"
    action["subject_id"] = "user_001"  # the subject the registry's attestations are for
    action["agent_id"] = AGENT  # who acts is the caller
    action["created_at"] = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    context = action["authorization_context"]
    context.update(requested_by="user_001", authenticated_principal=AGENT, principal_scopes=["support:read"])
    return action


def _receipt(served: Served, key: str, *fields: str) -> tuple[dict[str, Any], dict[str, Any]]:
    action = _action(key, fields or ("name", "email"))
    decided = _post(served, "/v1/decisions", AGENT, {"action": action})
    assert decided.status_code == 200, decided.text
    decision = decided.json()
    assert decision["decision"] == "ALLOW" and decision["execution_allowed"], decision["reason_codes"]
    issued = _post(served, "/v1/receipts", "approval-desk", {"decision_id": decision["decision_id"]})
    assert issued.status_code == 200, issued.text
    return action, issued.json()["receipt"]


def _execute(served: Served, action: dict[str, Any], receipt: dict[str, Any]) -> httpx2.Response:
    body = {"action": action, "receipt": receipt, "handler": "read"}
    return _post(served, "/v1/executions", "payments-executor", body)


def _ran(served: Served) -> list[str]:
    return served.runs.read_text().split() if served.runs.exists() else []


def _reload_to_deny(served: Served) -> None:
    shutil.copyfile(served.after, served.live)
    reloaded = _post(served, "/v1/admin/reload", "ops_olga", {})
    assert reloaded.status_code == 200, reloaded.text


def _both_decisions_replay(served: Served, receipt: dict[str, Any], code: str = "matrix_forbidden") -> None:
    """The decision the receipt names (ALLOW, on the first bundle), then a re-decision (DENY, on
    the reloaded one) under a new id; each replays on OPA from its archived input."""
    entries = [e for _, e in read_entries(served.ledger) if e.get("type") == "decision"]
    mine = [e for e in entries if e.get("action_hash") == receipt["action_hash"]]
    original = [e for e in mine if e["decision_id"] == receipt["decision_id"]]
    redecided = [e for e in mine if e["decision_id"] != receipt["decision_id"]]
    assert original and {e["result"]["decision"] for e in original} == {"ALLOW"}
    assert redecided and redecided[-1]["result"]["decision"] == "DENY"
    assert code in redecided[-1]["result"]["reason_codes"]
    revisions = {read_bundle(b).revision: b for b in (served.before, served.after)}
    for entry in [*original, redecided[-1]]:
        bundle = read_bundle(revisions[entry["input"]["context"]["bundle_revision"]])
        replayed = opa_query(bundle, "data.kcp.gate.decision", entry["input"])
        assert replayed["decision"] == entry["result"]["decision"], entry["decision_id"]


def test_a_receipt_issued_before_a_hot_reload_that_denies_is_refused_at_the_service(served: Served) -> None:
    """/v1/executions and /v1/receipts/verify after POST /v1/admin/reload to a bundle that denies."""
    kept_action, kept = _receipt(served, "idem_svc_recheck_kept")
    done = _execute(served, kept_action, kept)
    assert done.status_code == 200 and done.json()["outcome"] == {"read": "cust_9"}, done.text  # still allowed
    action, receipt = _receipt(served, "idem_svc_recheck_refused")
    verified_action, verified = _receipt(served, "idem_svc_recheck_verified")
    _reload_to_deny(served)

    refused = _execute(served, action, receipt)
    assert refused.status_code == 422 and refused.json()["code"] == "policy_changed", refused.text
    message = refused.json()["error"]
    assert "DENY" in message and "matrix_forbidden" in message and receipt["decision_id"] in message
    assert _ran(served) == ["idem_svc_recheck_kept"]  # the handler never ran for it
    _both_decisions_replay(served, receipt)
    # Verify-and-consume (the hand-off to an outside executor) re-decides as well: not consumed.
    body = {"receipt": verified, "action": verified_action}
    handed = _post(served, "/v1/receipts/verify", "payments-executor", body)
    assert handed.status_code == 422 and handed.json()["code"] == "policy_changed", handed.text
    _both_decisions_replay(served, verified)
    failures = [e for _, e in read_entries(served.ledger) if e.get("type") == "failure"]
    assert sum(1 for f in failures if f.get("code") == "policy_changed") >= 2


def test_a_retry_after_a_crash_is_re_decided_on_the_bundle_it_came_back_with(served: Served) -> None:
    action, receipt = _receipt(served, "idem_svc_recheck_crash")
    served.process.send_signal(signal.SIGKILL)  # the execution never arrived; the server is gone
    served.process.wait(timeout=30)
    shutil.copyfile(served.after, served.live)  # and comes back on the bundle deployed meanwhile
    served.process, served.url = start_server(served.args, env=served.env)
    retried = _execute(served, action, receipt)  # the client retries, same receipt, same key
    assert retried.status_code == 422 and retried.json()["code"] == "policy_changed", retried.text
    assert _ran(served) == []
    _both_decisions_replay(served, receipt)


def test_a_receipt_that_relied_on_an_exception_is_refused_once_the_exceptions_are_reloaded_without_it(
    served: Served,
) -> None:
    action, receipt = _receipt(served, "idem_svc_recheck_waived", "name", "email", "phone")  # ALLOW by EXC-1
    original = [
        e for _, e in read_entries(served.ledger) if e.get("decision_id") == receipt["decision_id"] and "result" in e
    ]
    assert "exception_applied" in original[0]["result"]["reason_codes"]
    write_file(served.exceptions, [])  # the waiver is withdrawn: the file is re-signed without it
    reloaded = _post(served, "/v1/admin/reload", "ops_olga", {})
    assert reloaded.status_code == 200, reloaded.text
    refused = _execute(served, action, receipt)
    assert refused.status_code == 422 and refused.json()["code"] == "policy_changed", refused.text
    assert "field_access_violation" in refused.json()["error"] and _ran(served) == []
    _both_decisions_replay(served, receipt, "field_access_violation")


def test_the_dashboard_shows_the_exceptions_applied_as_overrides(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    action, receipt = _receipt(served, "idem_svc_dashboard_waived", "name", "email", "phone")
    # decided, then re-decided at execution: one decision's use of the waiver (the re-decision is linked to it)
    assert _execute(served, action, receipt).status_code == 200
    uikit._sign_in(browser, {"url": served.url, "tokens": {"auditor": WHO["auditor_ada"]}}, "auditor")
    browser.get(f"{served.url}/ui/dashboard")
    table = uikit._wait_for(browser, "exceptions")
    headers = [h.text for h in table.find_elements(By.TAG_NAME, "th")]
    assert headers == ["exception", "scope", "codes waived", "grantor", "ticket", "expires_at", "uses"]
    cells = [c.get_attribute("textContent") for c in table.find_elements(By.CSS_SELECTOR, "tbody tr td")]
    assert cells[:5] == [
        "EXC-1",
        f"agent_id={AGENT}, tenant_id=tenant_a, unit=support-desk/customer-records",
        "field_access_violation",
        "dpo@example.com",
        "CHG-2231",
    ]
    assert cells[5].endswith("Z") and cells[6] == "1"
    assert not browser.find_elements(By.TAG_NAME, "script")
