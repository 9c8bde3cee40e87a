"""Two real `kcp-opa serve` processes on one store file: decision records live in the store.

A decision made on server A is challenged, answered and given a receipt on server B (and the
receipt is consumed on A): what one replica decided survives it and every replica serves it.
An agent may open challenges only for its own decisions; the refusal is audited.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import REPO
from servicekit import (
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    served_context,
    start_server,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

from kcp_opa.trail.ledger import read_entries, verify_ledger

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
WHO = {
    "local-agent": "t-agent-" + "a" * 32,
    "agent_rogue_002": "t-rogue-" + "r" * 32,
    "agent_payments_001": "t-payments-" + "m" * 32,
    "user_001": "t-subject-" + "s" * 32,
    "treasury_approver_anna": "t-approver-" + "p" * 32,
    "kyc-provider": "t-kyc-" + "k" * 32,
    "approval-desk": "t-issuer-" + "i" * 32,
    "payments-executor": "t-exec-" + "e" * 32,
}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path, Path]]:
    """Servers A and B: one store, one receipt keyring, one registry; each its own ledger."""
    work = tmp_path_factory.mktemp("shared")
    registry, issuer_keys = write_registry(work)
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {token: principal for principal, token in WHO.items()})
    common = ["--bundle", str(bundle), "--store", str(work / "service.db"), "--trust", str(registry)]
    common += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(issuer_keys)]
    common += ["--tokens", str(tokens), "--keyring", str(write_receipt_keyring(work))]
    a, url_a = start_server([*common, "--ledger", str(work / "a.jsonl")])
    try:
        b, url_b = start_server([*common, "--ledger", str(work / "b.jsonl")])
        try:
            yield url_a, url_b, work / "a.jsonl", work / "b.jsonl"
        finally:
            stop_server(b)
    finally:
        stop_server(a)


def post(url: str, path: str, who: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {WHO[who]}"}, timeout=60)


def test_a_decision_made_on_one_server_is_answered_and_receipted_on_another(
    replicas: tuple[str, str, Path, Path],
) -> None:
    url_a, url_b, ledger_a, ledger_b = replicas
    decided = post(url_a, "/v1/decisions", "local-agent", {"action": KYA})
    assert decided.status_code == 200 and decided.json()["decision"] == "HUMAN_APPROVAL"
    decision_id = decided.json()["decision_id"]
    opened = post(url_b, f"/v1/decisions/{decision_id}/challenges", "local-agent", {})
    assert opened.status_code == 200, opened.text
    ids = {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}
    answers = [
        ("user_001", "user_confirmation"),
        ("kyc-provider", "identity_verification"),
        ("kyc-provider", "authority_verification"),
        ("kyc-provider", "beneficiary_verification"),
        ("treasury_approver_anna", "independent_human_approval"),
    ]
    for index, (who, control) in enumerate(answers):
        url = url_b if index % 2 == 0 else url_a  # answers land on both replicas; none is lost
        body = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
        answered = post(url, f"/v1/challenges/{ids[control]}/result", who, body)
        assert answered.status_code == 200, answered.text
    assert answered.json()["decision"]["authorization_status"] == "APPROVED"
    assert len(answered.json()["decision"]["control_evidence"]) == 6
    issued = post(url_b, "/v1/receipts", "approval-desk", {"decision_id": decision_id})
    assert issued.status_code == 200, issued.text
    receipt = issued.json()["receipt"]
    assert receipt["decision_id"] == decision_id and receipt["approver_ids"] == ["treasury_approver_anna"]
    verified = post(url_a, "/v1/receipts/verify", "payments-executor", {"receipt": receipt, "action": KYA})
    assert verified.status_code == 200 and verified.json()["consumed"] is True
    again = post(url_b, "/v1/receipts/verify", "payments-executor", {"receipt": receipt, "action": KYA})
    assert again.status_code == 409 and again.json()["code"] == "replay"
    status = httpx2.get(f"{url_b}/v1/status", headers={"Authorization": f"Bearer {WHO['local-agent']}"}).json()
    assert status["decisions_held"] >= 1
    assert verify_ledger(ledger_a).ok and verify_ledger(ledger_b).ok
    receipts = [e for _, e in read_entries(ledger_b) if e["type"] == "receipt" and "issued_at" in e]
    assert [e["decision_id"] for e in receipts] == [decision_id]


def test_an_agent_opens_challenges_only_for_its_own_decisions_and_each_refusal_is_audited(
    replicas: tuple[str, str, Path, Path],
) -> None:
    url_a, url_b, _, ledger_b = replicas
    decision_id = post(url_a, "/v1/decisions", "local-agent", {"action": KYA}).json()["decision_id"]
    for url in (url_a, url_b):
        refused = post(url, f"/v1/decisions/{decision_id}/challenges", "agent_rogue_002", {})
        assert refused.status_code == 403 and refused.json()["code"] == "not_your_decision"
    audited = [e for _, e in read_entries(ledger_b) if e["type"] == "failure" and e.get("code") == "not_your_decision"]
    assert [e["principal"]["id"] for e in audited] == ["agent_rogue_002"]
    # A decision the rogue made (for itself: who acts is the caller) is its own.
    rogues = KYA | {"agent_id": "agent_rogue_002"}
    own = post(url_b, "/v1/decisions", "agent_rogue_002", {"action": rogues}).json()["decision_id"]
    opened = post(url_a, f"/v1/decisions/{own}/challenges", "agent_rogue_002", {})
    assert opened.status_code == 200 and len(opened.json()["challenges"]) == 5
    unknown = post(url_b, "/v1/decisions/dec_nope/challenges", "agent_rogue_002", {})
    assert unknown.status_code == 404 and unknown.json()["code"] == "unknown_decision"


def test_concurrent_answers_through_two_services_on_one_store_are_all_kept(tmp_path: Path) -> None:
    """Five answers at once, through two services (two connections each) on one store: none is lost."""
    import threading

    from kcp_opa.service.callers import LOCAL_AGENT
    from kcp_opa.service.config import ServiceConfig
    from kcp_opa.service.issuing import bundle_approver_roles, registry_principal
    from kcp_opa.service.loading import open_service

    registry, keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    services = [
        open_service(
            ServiceConfig(
                bundle,
                store=str(tmp_path / "service.db"),
                ledger=str(tmp_path / f"{name}.jsonl"),
                trust=registry,
                **served_context(registry),
                issuer_ids=(SERVICE_ISSUER, GATE_ISSUER),
                issuer_keyring=keys,
            )
        )
        for name in ("a", "b")
    ]
    trust = services[0].registry
    assert trust is not None
    roles = bundle_approver_roles(services[0].gate.bundle)
    who = {p: registry_principal(trust, p, roles) for p in ("user_001", "kyc-provider", "treasury_approver_anna")}
    answerers = {
        "user_confirmation": who["user_001"],
        "identity_verification": who["kyc-provider"],
        "authority_verification": who["kyc-provider"],
        "beneficiary_verification": who["kyc-provider"],
        "independent_human_approval": who["treasury_approver_anna"],
    }
    decision_id = services[0].evaluate(LOCAL_AGENT, KYA)["decision_id"]
    opened = services[1].create_challenges(LOCAL_AGENT, decision_id)["challenges"]
    errors: list[BaseException] = []
    start = threading.Barrier(len(opened))

    def answer(index: int, challenge: dict[str, Any]) -> None:
        try:
            start.wait()
            principal = answerers[challenge["control"]]
            services[index % 2].record_result(principal, challenge["challenge_id"], "PASSED", "ev:concurrent")
        except BaseException as exc:  # any lost or refused answer fails the test
            errors.append(exc)

    threads = [threading.Thread(target=answer, args=(i, c)) for i, c in enumerate(opened)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    issuer = registry_principal(trust, "approval-desk", roles)
    for service in services:
        _, record = service._record(service.loaded, decision_id)
        assert record.decision.authorization_status.value == "APPROVED"
        assert sorted(e.control for e in record.evidence) == sorted([*answerers, "standard_audit_logging"])
    assert services[0].issue_receipt(issuer, decision_id)["receipt"]["decision_id"] == decision_id


def test_an_action_states_only_the_scopes_the_registry_grants_its_caller(replicas: tuple[str, str, Path, Path]) -> None:
    """KCP access: restricted reads principal_scopes; over the service they are the registry's auth_scopes."""
    url_a, _, ledger_a, _ = replicas

    def stating(who: str, scopes: list[str]) -> dict[str, Any]:
        action = json.loads(json.dumps(KYA | {"agent_id": who}))
        action["authorization_context"]["principal_scopes"] = scopes
        return action

    def decide(who: str, scopes: list[str]) -> httpx2.Response:
        return post(url_a, "/v1/decisions", who, {"action": stating(who, scopes)})

    granted = decide("agent_payments_001", ["payments:read"])
    assert granted.status_code == 200, granted.text
    before = sum(1 for _, e in read_entries(ledger_a) if e.get("code") == "scope_not_granted")
    refused = [
        decide("agent_payments_001", ["payments:read", "executive-team"]),  # one scope too many
        decide("agent_payments_001", ["Payments:Read"]),  # scopes are identifiers, compared exactly
        decide("local-agent", ["payments:read"]),  # another agent's scope
    ]
    assert [r.status_code for r in refused] == [403, 403, 403]
    assert all(r.json()["code"] == "scope_not_granted" for r in refused)
    assert "not granted: executive-team" in refused[0].json()["error"]
    audited = [e for _, e in read_entries(ledger_a) if e["type"] == "failure" and e.get("code") == "scope_not_granted"]
    assert len(audited) - before == 3
    assert verify_ledger(ledger_a).ok
