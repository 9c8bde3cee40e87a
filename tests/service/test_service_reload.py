"""Reloading the service: a rotated issuer keyring, a new registry and bundle, a mismatched pair refused.

In-process through the Reloader (the same code SIGHUP and ``POST /v1/admin/reload`` run) with real
files, regopy and SQLite, decisions running concurrently with the reload; then a real server
process reloaded over HTTP by a ``service_admin`` and by SIGHUP, each reload one log line.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import REPO
from netkit import free_port
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    context_args,
    served_context,
    start_process,
    start_server,
    stop_server,
    write_registry,
    write_tokens,
)

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.signing import Keyring, generate_ed25519, load_keyring
from kcp_opa.declare.trust import load_trust
from kcp_opa.service.callers import LOCAL_AGENT, Principal
from kcp_opa.service.config import ServiceConfig
from kcp_opa.service.desk import GateService
from kcp_opa.service.issuing import bundle_approver_roles, registry_principal
from kcp_opa.service.loading import open_service
from kcp_opa.service.reloading import Reloader, ReloadError
from kcp_opa.trail.ledger import read_entries, verify_ledger

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}


def _with_next_key(registry: Path, keys: Path, work: Path) -> tuple[str, str, Path]:
    """Publish a second key for the service's issuer (the old one stays listed); its keyring file beside."""
    old = load_keyring(keys)
    new = generate_ed25519(f"{SERVICE_ISSUER}-next-ed25519")
    document = yaml.safe_load(registry.read_text())
    public = Keyring({new.kid: new}, new.kid).to_file_dict(include_private=False)["keys"][0]["public_key"]
    issuer = next(i for i in document["issuers"] if i["id"] == SERVICE_ISSUER)
    issuer["keys"].append({"kid": new.kid, "alg": "Ed25519", "public_key": public})
    registry.write_text(yaml.safe_dump(document, sort_keys=False))
    old_kid = issuer["keys"][0]["kid"]
    rotated = {kid: key for kid, key in old.keys.items() if kid != old_kid} | {new.kid: new}
    path = work / "rotated-keys.json"
    path.write_text(json.dumps(Keyring(rotated, new.kid).to_file_dict(include_private=True)))
    return old_kid, new.kid, path


def _without_key(registry: Path, kid: str) -> None:
    document = yaml.safe_load(registry.read_text())
    issuer = next(i for i in document["issuers"] if i["id"] == SERVICE_ISSUER)
    issuer["keys"] = [k for k in issuer["keys"] if k["kid"] != kid]
    registry.write_text(yaml.safe_dump(document, sort_keys=False))


def _answer(service: GateService, who: Principal, challenge_id: str) -> dict[str, Any]:
    return service.record_result(who, challenge_id, "PASSED", f"ev:{challenge_id}")


def test_rotation_reload_refuses_a_mismatch_and_never_drops_calls_in_flight(tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    old_kid, new_kid, rotated = _with_next_key(registry, keys, tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    config = ServiceConfig(
        bundle,
        store=str(tmp_path / "s.db"),
        ledger=str(tmp_path / "l.jsonl"),
        trust=registry,
        **served_context(registry),
        issuer_ids=(SERVICE_ISSUER, GATE_ISSUER),
        issuer_keyring=keys,
    )
    service = open_service(config)
    reloader = Reloader(service, config)  # start and reload read the same config
    assert service.registry is not None
    roles = bundle_approver_roles(service.gate.bundle)
    subject = registry_principal(service.registry, "user_001", roles)
    kyc = registry_principal(service.registry, "kyc-provider", roles)
    decision = service.evaluate(LOCAL_AGENT, KYA)
    ids = {
        c["control"]: c["challenge_id"]
        for c in service.create_challenges(LOCAL_AGENT, decision["decision_id"])["challenges"]
    }
    first = _answer(service, subject, ids["user_confirmation"])
    kids = {e["control"]: e["signature"]["kid"] for e in first["decision"]["control_evidence"]}
    assert kids["user_confirmation"] == old_kid

    # 1. The issuer keyring file is rotated to the pre-published key: reload while decisions run.
    keys.write_bytes(rotated.read_bytes())
    outcomes: list[str] = []
    failures: list[BaseException] = []

    def decide() -> None:
        try:
            for _ in range(4):
                outcomes.append(service.evaluate(LOCAL_AGENT, KYA)["decision"])
        except BaseException as exc:  # any failure of a call in flight fails the test
            failures.append(exc)

    workers = [threading.Thread(target=decide) for _ in range(3)]
    for worker in workers:
        worker.start()
    done = reloader.reload()
    for worker in workers:
        worker.join(timeout=120)
    assert not failures and outcomes == ["HUMAN_APPROVAL"] * 12
    assert done["reloaded"] and done["previous_bundle_revision"] == service.gate.bundle_revision
    second = _answer(service, kyc, ids["identity_verification"])  # the same open decision, after the reload
    kids = {e["control"]: e["signature"]["kid"] for e in second["decision"]["control_evidence"]}
    assert kids["user_confirmation"] == old_kid and kids["identity_verification"] == new_kid

    # 2. A registry the bundle was not compiled with: refused, the running configuration stays.
    _without_key(registry, old_kid)
    before = service.loaded
    with pytest.raises(ReloadError, match="compiled with"):
        reloader.reload()
    assert service.loaded is before
    _answer(service, kyc, ids["authority_verification"])

    # 3. The new bundle compiled with it: accepted; the open decision was made under the old bundle
    #    and carries evidence under the removed key, so it is refused, fail closed, until re-decided.
    old_revision = service.gate.bundle_revision
    compile_finance(tmp_path / "next.tar.gz", registry).replace(bundle)
    reloader.reload()
    assert service.gate.bundle_revision != old_revision
    assert service.status()["trust"]["sha256"] == load_trust(registry).sha256
    with pytest.raises(KcpOpaError) as refused:
        _answer(service, kyc, ids["beneficiary_verification"])
    assert getattr(refused.value, "code", None) == "bundle_changed"
    again = service.evaluate(LOCAL_AGENT, KYA)
    fresh = {
        c["control"]: c["challenge_id"]
        for c in service.create_challenges(LOCAL_AGENT, again["decision_id"])["challenges"]
    }
    answered = _answer(service, subject, fresh["user_confirmation"])
    assert [
        e["signature"]["kid"] for e in answered["decision"]["control_evidence"] if e["control"] == "user_confirmation"
    ] == [new_kid]
    notes = [e for _, e in read_entries(tmp_path / "l.jsonl") if e["type"] == "note"]
    assert [n["note"] for n in notes] == ["service_reloaded", "service_reloaded"]
    assert verify_ledger(tmp_path / "l.jsonl").ok


def test_a_real_server_reloads_for_an_admin_and_on_sighup_and_refuses_others(tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    who = {"local-agent": "t-agent-" + "a" * 32, "ops_olga": "t-admin-" + "o" * 32}
    tokens = write_tokens(tmp_path, {token: principal for principal, token in who.items()})
    ledger = tmp_path / "l.jsonl"
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "s.db"), "--ledger", str(ledger)]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-keyring", str(keys)]
    args += ["--tokens", str(tokens)]
    process, url = start_server(args)

    def headers(principal: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {who[principal]}"}

    try:
        refused = httpx2.post(f"{url}/v1/admin/reload", headers=headers("local-agent"), timeout=60)
        assert refused.status_code == 403 and refused.json()["code"] == "not_authorized"
        reloaded = httpx2.post(f"{url}/v1/admin/reload", headers=headers("ops_olga"), timeout=120)
        assert reloaded.status_code == 200 and reloaded.json()["reloaded"] is True
        status = httpx2.get(f"{url}/v1/status", headers=headers("ops_olga")).json()
        assert status["trust"]["sha256"] == load_trust(registry).sha256

        # A registry written without its bundle: SIGHUP reloads nothing and the refusal is audited.
        document = yaml.safe_load(registry.read_text())
        document["version"] = "1.0.1"
        registry.write_text(yaml.safe_dump(document, sort_keys=False))
        mismatch = httpx2.post(f"{url}/v1/admin/reload", headers=headers("ops_olga"), timeout=120)
        assert mismatch.status_code == 409 and mismatch.json()["code"] == "reload_failed"
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while sum(1 for _, e in read_entries(ledger) if e.get("code") == "reload_failed") < 2:
            assert time.monotonic() < deadline, "SIGHUP's refused reload was not audited"
            time.sleep(0.2)
        # Then the bundle compiled with it, and SIGHUP: the server serves both, new callers' roles included.
        compile_finance(tmp_path / "next.tar.gz", registry).replace(bundle)
        process.send_signal(signal.SIGHUP)
        wanted = load_trust(registry).sha256
        deadline = time.monotonic() + 120
        while httpx2.get(f"{url}/v1/status", headers=headers("ops_olga")).json()["trust"]["sha256"] != wanted:
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.2)
        decided = httpx2.post(f"{url}/v1/decisions", json={"action": KYA}, headers=headers("local-agent"), timeout=60)
        assert decided.status_code == 200 and decided.json()["decision"] == "HUMAN_APPROVAL"
    finally:
        stop_server(process)
    failures = [e for _, e in read_entries(ledger) if e["type"] == "failure" and e.get("tool") == "reload"]
    assert [e["code"] for e in failures] == ["not_authorized", "reload_failed", "reload_failed"]
    assert failures[0]["principal"]["id"] == "local-agent" and failures[2]["principal"] is None
    assert verify_ledger(ledger).ok


def _logged(stderr: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines (stderr is no terminal) of ``event``."""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{") and f'"{event}"' in line]
    return [line for line in lines if line["event"] == event]


def _wait_ledger(ledger: Path, wanted: Any, what: str) -> None:
    deadline = time.monotonic() + 120
    while not (ledger.exists() and sum(1 for _, e in read_entries(ledger) if wanted(e)) >= 1):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_sighup_logs_what_it_reloaded_and_what_it_refused_without_the_secret(tmp_path: Path) -> None:
    registry, keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    token = "t-agent-" + "a" * 32
    tokens = write_tokens(tmp_path, {token: "local-agent"})
    ledger = tmp_path / "l.jsonl"
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "s.db"), "--ledger", str(ledger)]
    args += ["--trust", str(registry), "--issuer-id", SERVICE_ISSUER, "--issuer-keyring", str(keys)]
    args += ["--tokens", str(tokens)]
    port = free_port()
    command = [sys.executable, "-m", "kcp_opa", "-v", "serve", "--transport", "http", "--port", str(port)]
    process, url = start_process([*command, *args, *context_args(args)], port)
    pasted = "t-pasted-" + "p" * 32  # an operator pastes a token where its hash belongs
    try:
        process.send_signal(signal.SIGHUP)
        _wait_ledger(ledger, lambda e: e.get("note") == "service_reloaded", "SIGHUP did not reload")
        tokens.write_text(json.dumps({"tokens": {pasted: "local-agent"}}))
        process.send_signal(signal.SIGHUP)
        _wait_ledger(ledger, lambda e: e.get("code") == "reload_failed", "the refused reload was not audited")
        headers = {"Authorization": f"Bearer {token}"}  # the old callers and bundle keep serving
        decided = httpx2.post(f"{url}/v1/decisions", json={"action": KYA}, headers=headers, timeout=60)
        assert decided.status_code == 200 and decided.json()["decision"] == "HUMAN_APPROVAL"
    finally:
        stop_server(process)
    stderr = process.stderr.read() if process.stderr else ""
    [opened] = _logged(stderr, "service_opened")
    [reloaded] = _logged(stderr, "service_reloaded")
    assert reloaded["level"] == "info" and reloaded["via"] == "sighup" and reloaded["by"] is None
    assert reloaded["from_sha256"] == reloaded["to_sha256"] == opened["sha256"]
    assert reloaded["from_revision"] == reloaded["to_revision"] == opened["bundle_revision"]
    [refused] = _logged(stderr, "reload_refused")
    assert refused["level"] == "error" and refused["via"] == "sighup"
    assert refused["serving_sha256"] == opened["sha256"] and "still serving" in refused["effect"]
    assert "token hash" in refused["error"]
    assert pasted not in stderr and token not in stderr  # the reason, never the secret
