"""Controls an agent cannot fake: the trust registry, signed evidence, separation of duties,
records the caller cannot edit (issue 15). Every attack here was accepted before the fix."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, VOUCH, run_cli, vouched_gate
from trustkit import KYA_APPROVALS, REGISTRY, compile_with_trust, issuer_key, make_desk, registry, signed

from kcp_opa.authorize.attestations import attestation_bytes, sign_attestation, verify_attestation
from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.documents import Attestation
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.core.errors import ActionRejectedError, EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.identity import IdentityError, canonical_id
from kcp_opa.core.signing import Keyring, generate_ed25519, hmac_key
from kcp_opa.trail.ledger import AuditLedger

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
SCREENING = {**KYA, "action_id": "act_screening", "attributes": {**KYA["attributes"], "screening_uncertain": True}}
DECIDED = "2026-11-29T10:00:00Z"
SECRET = b"kya-receipt-secret-0123456789abcdef"
SIX = list(KYA_APPROVALS)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_with_trust(tmp_path_factory.mktemp("controls") / "finance.tar.gz")


@pytest.fixture(scope="module")
def desk(bundle: Path) -> ControlDesk:
    return make_desk(vouched_gate(bundle))


def _code(desk: ControlDesk, record: GateDecision, item: Any, action: Any = None) -> str:
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(record, item, action=KYA if action is None else action)
    return caught.value.code


def _approve(desk: ControlDesk, action: dict[str, Any] = KYA, skip: str | None = None) -> GateDecision:
    record = desk.open(action, now=DECIDED)
    for control, actor in SIX:
        if control != skip:
            record = desk.record_control_result(record, signed(record, control, actor), action=action)
    return record


# --- canonical ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["User_001", "user_001 ", " USER_001", "user_\uff10\uff10\uff11", "\uff35ser_001"])
def test_id_variants_are_the_same_principal(variant: str) -> None:
    assert canonical_id(variant) == "user_001"


@pytest.mark.parametrize(
    "variant", ["user\u200b_001", "user_001\u200d", "\u202euser_001", "us\u0435r_001", "user_001\u2066", ""]
)
def test_invisible_bidi_and_confusable_ids_are_refused(variant: str) -> None:
    with pytest.raises(IdentityError):
        canonical_id(variant)


@pytest.mark.parametrize(
    ("variant", "code"),
    [
        ("User_001", "self_approval"),
        ("user_001 ", "self_approval"),
        ("user_\uff10\uff10\uff11", "self_approval"),
        ("user\u200b_001", "non_canonical_id"),
        ("us\u0435r_001", "non_canonical_id"),
    ],
)
def test_the_subject_cannot_approve_under_an_id_variant(desk: ControlDesk, variant: str, code: str) -> None:
    record = desk.open(KYA, now=DECIDED)
    assert _code(desk, record, signed(record, "independent_human_approval", variant)) == code


def test_a_party_id_with_a_hidden_character_never_becomes_a_party(desk: ControlDesk) -> None:
    """The action's identifier contract refuses it before any decision, so no evidence can bind to it."""
    action = {**KYA, "action_id": "act_hidden", "agent_id": "agent_payments\u200b_001"}
    with pytest.raises(ActionRejectedError, match="agent_id"):
        desk.open(action, now=DECIDED)


# --- signed evidence -----------------------------------------------------------------------------


def test_an_agent_declaring_itself_human_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "agent_payments_001")
    declared = {k: v for k, v in item.items() if k != "signature"} | {"actor_type": "human"}
    forged = sign_attestation(declared, "approval-app", issuer_key("approval-app")) | {"actor_type": "human"}
    forged = dict(declared) | {"signature": {"alg": "Ed25519", "kid": "approval-app-ed25519-test"}}
    forged["signature"]["value"] = issuer_key("approval-app").sign(attestation_bytes(forged))
    assert _code(desk, record, forged) == "actor_type_mismatch"
    # without the claim the registry still says ai_agent
    assert _code(desk, record, item) == "agent_cannot_satisfy_human_control"


def test_actor_type_comes_from_the_registry(desk: ControlDesk) -> None:
    record = _approve(desk)
    kinds = {e.control: e.actor_type for e in record.evidence}
    assert kinds["independent_human_approval"] == "human" and kinds["user_confirmation"] == "user"
    assert kinds["standard_audit_logging"] == "system"


def test_unsigned_evidence_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna")
    unsigned = {k: v for k, v in item.items() if k != "signature"} | {"actor_type": "human"}
    assert _code(desk, record, unsigned) == "unsigned_evidence"


def test_unknown_issuer_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna")
    rogue = generate_ed25519("approval-app-ed25519-test")
    fields = {k: v for k, v in item.items() if k not in {"signature", "issuer"}}
    assert _code(desk, record, sign_attestation(fields, "rogue-approvals", rogue)) == "unknown_issuer"
    # a registered issuer's name with somebody else's key
    assert _code(desk, record, sign_attestation(fields, "approval-app", rogue)) == "bad_signature"
    assert _code(desk, record, sign_attestation(fields, "approval-app", generate_ed25519("other"))) == (
        "unknown_issuer_key"
    )


def test_an_issuer_not_allowed_for_the_control_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna", issuer="bank-idp")
    assert _code(desk, record, item) == "issuer_not_allowed"


def test_an_edited_attestation_does_not_verify(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna", status="FAILED")
    assert _code(desk, record, item | {"status": "PASSED"}) == "bad_signature"


def test_hmac_issuer_keys_come_from_the_keyring() -> None:
    from kcp_opa.core.signing import Keyring

    trust = registry()
    key = hmac_key("kya-gate", SECRET)
    fields = {
        "control": "identity_verification",
        "status": "PASSED",
        "actor_id": "kyc-provider",
        "evidence_reference": "r",
        "completed_at": DECIDED,
        "decision_id": "dec_1",
        "action_hash": "sha256:" + "0" * 64,
    }
    item = sign_attestation(fields, "kya-reference-gate", key)
    assert verify_attestation(item, trust, Keyring({"kya-gate": key})).issuer == "kya-reference-gate"
    with pytest.raises(EvidenceRejectedError) as caught:
        verify_attestation(item, trust, None)
    assert caught.value.code == "unknown_issuer_key"


# --- separation of duties and FAILED ------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "code"),
    [
        ("user_001", "self_approval"),
        ("agent_payments_001", "agent_cannot_satisfy_human_control"),
        ("treasury_approver_anna", "approver_role_mismatch"),
    ],
)
def test_compliance_review_needs_an_independent_compliance_officer(desk: ControlDesk, actor: str, code: str) -> None:
    record = desk.open(SCREENING, now=DECIDED)
    assert "compliance_review" in record.decision.required_controls
    assert _code(desk, record, signed(record, "compliance_review", actor), SCREENING) == code
    accepted = desk.record_control_result(
        record, signed(record, "compliance_review", "compliance_officer_omar"), action=SCREENING
    )
    assert "compliance_review" in accepted.passed_controls


def test_failed_then_passed_stays_failed(desk: ControlDesk) -> None:
    record = _approve(desk, skip="independent_human_approval")
    failed = signed(record, "independent_human_approval", "treasury_approver_anna", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    later = signed(record, "independent_human_approval", "treasury_approver_ben", done="2026-11-29T10:05:00Z")
    assert _code(desk, record, later) == "control_failed"
    assert record.decision.authorization_status.value == "PENDING_CONTROLS"


def test_passed_then_failed_unsatisfies(desk: ControlDesk) -> None:
    record = _approve(desk)
    assert record.decision.authorization_status.value == "APPROVED"
    failed = signed(record, "independent_human_approval", "treasury_approver_ben", status="FAILED")
    record = desk.record_control_result(record, failed, action=KYA)
    assert record.decision.authorization_status.value == "PENDING_CONTROLS"
    assert "independent_human_approval" in record.decision.missing_controls
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(record, hmac_key("k", SECRET))
    assert caught.value.code == "not_approved"


# --- records the caller cannot edit ------------------------------------------------------------


def test_an_edited_prepared_input_is_refused(bundle: Path, tmp_path: Path) -> None:
    ledger = AuditLedger(tmp_path / "ledger.jsonl")
    gate = vouched_gate(bundle, ledger=ledger)
    prepared = gate.prepare(KYA, now=DECIDED)
    edited = copy.deepcopy(dict(prepared.document))
    edited["context"]["satisfied_controls"] = sorted(SIX_CONTROLS)
    forged = dataclasses.replace(prepared, document=edited)
    with pytest.raises(ActionRejectedError, match="edited"):
        gate.decide_prepared(forged)
    prepared.document["context"]["satisfied_controls"].extend(SIX_CONTROLS)  # edited in place
    with pytest.raises(ActionRejectedError, match="edited"):
        gate.decide_prepared(prepared)
    assert not (tmp_path / "ledger.jsonl").exists()  # nothing was evaluated, nothing archived
    assert gate.decide_prepared(gate.prepare(KYA, now=DECIDED)).authorization_status.value == "PENDING_CONTROLS"


SIX_CONTROLS = [c for c, _ in SIX]


def test_an_edited_record_is_refused(desk: ControlDesk) -> None:
    record = desk.open(KYA, now=DECIDED)
    approved = _approve(desk)
    forged = dataclasses.replace(record, decision=approved.decision)  # APPROVED pasted on a pending record
    with pytest.raises(EvidenceRejectedError) as caught:
        desk.record_control_result(forged, signed(record, "user_confirmation", "user_001"), action=KYA)
    assert caught.value.code == "record_tampered"
    with pytest.raises(ReceiptIssueError) as issue:
        desk.issue(forged, hmac_key("k", SECRET))
    assert issue.value.code == "record_tampered"


def test_ai_agent_evidence_is_refused_at_issuance(desk: ControlDesk) -> None:
    approved = _approve(desk)
    human = next(e for e in approved.evidence if e.control == "independent_human_approval")
    by_agent = dataclasses.replace(human, actor_type="ai_agent", actor_id="agent_payments_001")
    forged = dataclasses.replace(
        approved, evidence=tuple(by_agent if e is human else e for e in approved.evidence), seal=approved.seal
    )
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(forged, hmac_key("k", SECRET))
    assert caught.value.code == "record_tampered"
    # a desk with the same seal key still re-judges the attestations themselves
    agent_signed = signed(approved, "independent_human_approval", "agent_payments_001")
    swapped = dataclasses.replace(human, attestation=Attestation.from_dict(agent_signed))
    resealed = desk._sealed(
        dataclasses.replace(approved, evidence=tuple(swapped if e is human else e for e in approved.evidence))
    )
    with pytest.raises(ReceiptIssueError) as caught:
        desk.issue(resealed, hmac_key("k", SECRET))
    assert caught.value.code == "agent_cannot_satisfy_human_control"
    assert desk.issue(approved, hmac_key("k", SECRET)).approver_ids == ("treasury_approver_anna",)


def test_a_desk_refuses_a_bundle_compiled_with_another_registry(tmp_path: Path) -> None:
    from conftest import DEPLOYMENTS, POLICIES

    from kcp_opa.compile.compiler import compile_bundle

    base = DEPLOYMENTS / "finance"
    out = compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, tmp_path / "plain.tar.gz").output
    with pytest.raises(EvidenceRejectedError) as caught:
        make_desk(vouched_gate(out, preflight=False))
    assert caught.value.code == "registry_mismatch"


# --- the registry file ---------------------------------------------------------------------------


def test_the_registry_compiles_into_data_without_keys(bundle: Path) -> None:
    trust = read_bundle(bundle).data["kcp_data"]["trust"]
    assert trust["principals"]["treasury_approver_anna"] == {"type": "human", "roles": ["treasury_approver"]}
    assert trust["issuers"]["approval-app"]["controls"] == ["compliance_review", "independent_human_approval"]
    text = json.dumps(trust)
    assert "public_key" not in text and "kid" not in text


def test_validate_reports_registry_errors_with_lines(tmp_path: Path) -> None:
    bad = (
        REGISTRY.read_text()
        .replace("{id: orchestrator,", '{id: "User_001 ",')
        .replace("type: otp_service", "type: sms_gateway")
    )
    path = tmp_path / "registry.yaml"
    path.write_text(bad)
    result = run_cli("validate", "--format", "json", str(path))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    found = {(d["code"], d["line"]) for d in report["errors"]}
    lines = bad.splitlines()
    dup_line = next(i for i, line in enumerate(lines, 1) if "User_001 " in line)
    otp_line = next(i for i, line in enumerate(lines, 1) if "sms_gateway" in line)
    assert ("duplicate_id", dup_line) in found
    assert any(line == otp_line for _, line in found)
    assert json.loads(run_cli("validate", "--format", "json", str(REGISTRY)).stdout)["valid"] is True


def test_attestation_verify_cost(desk: ControlDesk) -> None:
    """Measured for the report: Ed25519 verify + registry lookup per attestation."""
    record = desk.open(KYA, now=DECIDED)
    item = signed(record, "independent_human_approval", "treasury_approver_anna")
    trust = registry()
    started = time.perf_counter()
    for _ in range(200):
        verify_attestation(item, trust, None)
    per = (time.perf_counter() - started) / 200
    print(f"attestation verify: {per * 1e6:.0f} us")
    assert per < 0.05


# --- KYA interop -----------------------------------------------------------------------------------

KYA_ITEM_FIELDS = ("control", "status", "actor_type", "actor_id", "evidence_reference", "completed_at")


GATE_SECRET = b"kya-gate-hmac-secret-0123456789abcdef"


def _kya_document(record: GateDecision, *, signed_by: Any = None) -> dict[str, Any]:
    """The decision as the KYA reference gate writes it: evidence items without binding fields,
    the document signed with the gate's registered key (kid kya-gate)."""
    document = record.to_dict()
    document["control_evidence"] = [{k: e[k] for k in KYA_ITEM_FIELDS} for e in document["control_evidence"]]
    key = signed_by or hmac_key("kya-gate", GATE_SECRET)
    document["signature"] = {"alg": key.alg, "kid": key.kid}
    document["signature"]["value"] = key.sign(attestation_bytes(document))
    return document


def _kya_document_resigned(document: dict[str, Any]) -> dict[str, Any]:
    """The gate signs what it wrote: an edited document signed again (what the policy then judges)."""
    key = hmac_key("kya-gate", GATE_SECRET)
    body = {k: v for k, v in document.items() if k != "signature"} | {"signature": {"alg": key.alg, "kid": key.kid}}
    body["signature"]["value"] = key.sign(attestation_bytes(body))
    return body


def _gate_keyring(tmp_path: Path) -> Path:
    path = tmp_path / "gate-keyring.json"
    entry = {"kid": "kya-gate", "alg": "HMAC-SHA256", "secret_env": "KYA_GATE_SECRET"}
    path.write_text(json.dumps({"signing_kid": "kya-gate", "keys": [entry]}))
    return path


def _kya_mac(receipt: dict[str, Any]) -> str:
    import hashlib
    import hmac as hmac_module

    body = copy.deepcopy(receipt)
    body["signature"].pop("value", None)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hmac_module.new(SECRET, text.encode("utf-8"), hashlib.sha256).hexdigest()


def test_kya_decision_from_a_trusted_gate_issues_a_kya_verifiable_receipt(
    desk: ControlDesk, bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KYA_RECEIPT_SECRET", SECRET.decode())
    monkeypatch.setenv("KYA_GATE_SECRET", GATE_SECRET.decode())
    document = _kya_document(_approve(desk))
    (tmp_path / "decision.json").write_text(json.dumps(document))
    action = REPO / "fixtures" / "kya-supplier-payment-action.json"
    base = [
        "receipt",
        "issue",
        "--action",
        str(action),
        "--decision",
        str(tmp_path / "decision.json"),
        "--kid",
        "kya-1",
    ]
    refused = run_cli(*base, "--now", "2026-11-29T10:02:00Z")
    assert refused.returncode == 2
    error = json.loads(refused.stderr)
    assert error["code"] == "controls_missing"
    assert "evidence item 1 (standard_audit_logging) lacks decision_id binding" in error["error"]
    trusted = [*base, "--trust", str(REGISTRY), "--bundle", str(bundle), "--now", "2026-11-29T10:02:00Z"]
    trusted += ["--issuer-keyring", str(_gate_keyring(tmp_path))]
    untrusted = run_cli(*trusted, "--issuer", "rogue-gate")
    assert untrusted.returncode == 2 and json.loads(untrusted.stderr)["code"] == "untrusted_gate"
    assert "'rogue-gate' is not a registered gate issuer" in json.loads(untrusted.stderr)["error"]
    not_a_gate = run_cli(*trusted, "--issuer", "approval-app")
    assert json.loads(not_a_gate.stderr)["code"] == "untrusted_gate"
    issued = run_cli(*trusted, "--issuer", "kya-reference-gate", "--output", str(tmp_path / "receipt.json"))
    assert issued.returncode == 0, issued.stderr
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert receipt["decision_id"] == document["decision_id"] and receipt["approver_ids"] == ["treasury_approver_anna"]
    assert receipt["signature"]["value"] == _kya_mac(receipt)  # the KYA reference algorithm verifies it
    verified = run_cli(
        "receipt", "verify", "--action", str(action), "--receipt", str(tmp_path / "receipt.json"), "--kid", "kya-1",
        "--policy-version", receipt["policy_version"], "--now", "2026-11-29T10:02:30Z",
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr


@pytest.mark.parametrize(
    ("edit", "code", "message"),
    [
        (lambda items: items[5].update(actor_id="agent_payments_001"), "agent_cannot_satisfy_human_control", "item 6"),
        (lambda items: items[5].update(actor_id="user_001"), "self_approval", "item 6"),
        (lambda items: items[5].update(actor_type="ai_agent"), "actor_type_mismatch", "item 6"),
        (lambda items: items[2].update(decision_id="dec_other"), "evidence_decision_id", "item 3"),
        (lambda items: items.append({**items[5], "status": "FAILED"}), "controls_missing", "FAILED"),
    ],
)
def test_a_trusted_gate_s_evidence_is_still_judged(
    desk: ControlDesk, bundle: Path, edit: Any, code: str, message: str
) -> None:
    from kcp_opa.authorize.interop import issue_for_foreign_decision

    document = _kya_document(_approve(desk))
    edit(document["control_evidence"])
    document = _kya_document_resigned(document)
    with pytest.raises(ReceiptIssueError) as caught:
        issue_for_foreign_decision(
            document, KYA, hmac_key("kya-1", SECRET), gate="kya-reference-gate", registry=registry(),
            bundle=read_bundle(bundle), keyring=Keyring({"kya-gate": hmac_key("kya-gate", GATE_SECRET)}),
        )  # fmt: skip
    assert caught.value.code == code and message in str(caught.value)


# --- the command line: decide -> controls -> receipt -> verify --------------------------------------


def test_cli_flow_from_challenge_to_verified_receipt(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trustkit import TEST_KEYS

    monkeypatch.setenv("KCP_OPA_DESK_SECRET", "desk-seal-secret-for-tests-0123456789")
    keys = json.loads(TEST_KEYS.read_text())
    gate_ring = tmp_path / "gate-keyring.json"
    gate_ring.write_text(json.dumps({**keys, "signing_kid": "kcp-opa-gate-ed25519-test"}))
    action = str(REPO / "fixtures" / "kya-supplier-payment-action.json")
    record = tmp_path / "record.json"
    desk_args = ["--bundle", str(bundle), "--trust", str(REGISTRY), "--ledger", str(tmp_path / "ledger.jsonl")]
    desk_args += ["--gate-keyring", str(gate_ring), *VOUCH]  # the test wrote the action: the host vouches
    opened = run_cli("controls", "challenge", *desk_args, "--action", action, "--record", str(record), "--now", DECIDED)
    assert opened.returncode == 0, opened.stderr
    state = json.loads(opened.stdout)
    assert (
        state["authorization_status"] == "PENDING_CONTROLS"
        and "standard_audit_logging" not in state["missing_controls"]
    )
    for control, actor in SIX[1:]:
        issuer = {"user_confirmation": "bank-idp", "identity_verification": "bank-idp",
                  "authority_verification": "kcp-opa-gate", "beneficiary_verification": "bank-registry",
                  "independent_human_approval": "approval-app"}[control]  # fmt: skip
        evidence = tmp_path / f"{control}.json"
        attested = run_cli(
            "controls", "attest", "--issuer", issuer, "--keyring", str(TEST_KEYS), "--kid", f"{issuer}-ed25519-test",
            "--control", control, "--actor", actor, "--decision-id", state["decision_id"],
            "--action-hash", state["action_hash"], "--reference", f"ev:{control}", "--output", str(evidence),
            "--now", "2026-11-29T10:01:00Z",
        )  # fmt: skip
        assert attested.returncode == 0, attested.stderr
        recorded = run_cli("controls", "record", *desk_args, "--record", str(record), "--evidence", str(evidence),
                           "--action", action)  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
    shown = json.loads(run_cli("controls", "show", *desk_args, "--record", str(record)).stdout)
    assert shown["authorization_status"] == "APPROVED" and shown["missing_controls"] == []
    # an edited record file is refused
    edited = json.loads(record.read_text())
    edited["attestations"] = edited["attestations"][:-1]
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(edited))
    refused = run_cli("controls", "show", *desk_args, "--record", str(forged))
    assert refused.returncode == 1 and json.loads(refused.stderr)["code"] == "record_tampered"
    signer = tmp_path / "receipt-keyring.json"
    assert run_cli("receipt", "keygen", "--kid", "rcpt-1", "--keyring", str(signer)).returncode == 0
    issued = run_cli("controls", "issue", *desk_args, "--record", str(record), "--keyring", str(signer),
                     "--output", str(tmp_path / "receipt.json"), "--now", "2026-11-29T10:02:00Z")  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    verified = run_cli(
        "receipt", "verify", "--action", action, "--receipt", str(tmp_path / "receipt.json"), "--keyring", str(signer),
        "--policy-version", json.loads(issued.stdout)["policy_version"], "--now", "2026-11-29T10:02:30Z",
        "--nonce-db", str(tmp_path / "nonces.db"),
    )  # fmt: skip
    assert verified.returncode == 0 and json.loads(verified.stdout)["consumed"] is True
