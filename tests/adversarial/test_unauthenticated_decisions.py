"""Attack class: signed without being authenticated (issue 26, class 4).

A decision document that names registered approvers but that the gate it claims to come from
never signed must not become a signed receipt; unsigned is accepted only from a gate the
registry marks unsigned, with an explicit flag, and the receipt says so. The library's
``issue_receipt`` takes only a record its desk sealed, as the service does. A receipt valid far
past the contract's TTL cap must not verify, whoever signed it. Real CLI processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, receipt_for, run_cli, vouched_gate
from trustkit import REGISTRY, compile_with_trust, make_desk, signed

from kcp_opa.authorize.attestations import attestation_bytes
from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.authorize.receipts import signing_bytes
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.signing import hmac_key

KYA_PATH = REPO / "fixtures" / "kya-supplier-payment-action.json"
KYA = json.loads(KYA_PATH.read_text())
DECIDED, ISSUED = "2026-11-29T10:00:00Z", "2026-11-29T10:02:00Z"
RECEIPT_SECRET = "kya-receipt-secret-0123456789abcdef"
GATE_SECRET = "kya-gate-hmac-secret-0123456789abcdef"
ITEM_FIELDS = ("control", "status", "actor_type", "actor_id", "evidence_reference", "completed_at")
SIX = [
    ("standard_audit_logging", "kcp-opa-ledger"),
    ("user_confirmation", "user_001"),
    ("identity_verification", "kyc-provider"),
    ("authority_verification", "scope-service"),
    ("beneficiary_verification", "bank-registry"),
    ("independent_human_approval", "treasury_approver_anna"),
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_with_trust(tmp_path_factory.mktemp("unauth") / "finance.tar.gz")


@pytest.fixture(scope="module")
def desk(bundle: Path) -> ControlDesk:
    return make_desk(vouched_gate(bundle))


def _hand_written(desk: ControlDesk) -> dict[str, Any]:
    """What an attacker writes: an APPROVED KYA decision naming the registered approvers, under a
    decision id no gate ever issued, with no signature (the content is copied from a real one)."""
    record = desk.open(KYA, now=DECIDED)
    for control, actor in SIX:
        record = desk.record_control_result(record, signed(record, control, actor), action=KYA)
    document = record.to_dict()
    document["decision_id"] = "dec_written_by_hand_0001"
    document["control_evidence"] = [{k: e[k] for k in ITEM_FIELDS} for e in document["control_evidence"]]
    document.pop("signature", None)
    return document


def _issue(tmp_path: Path, document: dict[str, Any], bundle: Path, registry: Path, *extra: str) -> Any:
    (tmp_path / "decision.json").write_text(json.dumps(document))
    ring = tmp_path / "gate-keyring.json"
    ring.write_text(json.dumps({"keys": [{"kid": "kya-gate", "alg": "HMAC-SHA256", "secret_env": "KYA_GATE_SECRET"}]}))
    return run_cli(
        "receipt", "issue", "--action", str(KYA_PATH), "--decision", str(tmp_path / "decision.json"),
        "--kid", "kya-1", "--issuer", "kya-reference-gate", "--trust", str(registry), "--bundle", str(bundle),
        "--issuer-keyring", str(ring), "--now", ISSUED, "--output", str(tmp_path / "receipt.json"), *extra,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KYA_RECEIPT_SECRET", RECEIPT_SECRET)
    monkeypatch.setenv("KYA_GATE_SECRET", GATE_SECRET)


def test_an_unsigned_decision_from_a_gate_with_keys_gets_no_receipt(
    desk: ControlDesk, bundle: Path, tmp_path: Path
) -> None:
    forged = _issue(tmp_path, _hand_written(desk), bundle, REGISTRY)
    assert forged.returncode == 2, forged.stdout
    assert json.loads(forged.stderr)["code"] == "unsigned_decision"
    assert not (tmp_path / "receipt.json").exists()
    # the flag does not help: the registry lists keys for this gate and does not mark it unsigned
    flagged = _issue(tmp_path, _hand_written(desk), bundle, REGISTRY, "--accept-unsigned-decision")
    assert flagged.returncode == 2 and json.loads(flagged.stderr)["code"] == "unsigned_decision"
    # signed with a key that is not the gate's: refused too
    document = _hand_written(desk)
    rogue = hmac_key("kya-gate", b"not-the-gate-secret-0123456789abcdef")
    document["signature"] = {"alg": rogue.alg, "kid": rogue.kid}
    document["signature"]["value"] = rogue.sign(attestation_bytes(document))
    assert json.loads(_issue(tmp_path, document, bundle, REGISTRY).stderr)["code"] == "bad_signature"
    # the gate's own signature is what makes it a decision
    key = hmac_key("kya-gate", GATE_SECRET.encode())
    document["signature"] = {"alg": key.alg, "kid": key.kid}
    document["signature"]["value"] = key.sign(attestation_bytes(document))
    issued = _issue(tmp_path, document, bundle, REGISTRY)
    assert issued.returncode == 0, issued.stderr
    assert "decision_authentication" not in json.loads((tmp_path / "receipt.json").read_text())


def test_an_unsigned_gate_needs_the_registry_mark_and_the_flag_and_the_receipt_says_so(
    desk: ControlDesk, tmp_path: Path
) -> None:
    data = yaml.safe_load(REGISTRY.read_text())
    for issuer in data["issuers"]:
        if issuer["id"] == "kya-reference-gate":
            issuer["unsigned_decisions"] = True
    registry = tmp_path / "registry.yaml"
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    bundle = tmp_path / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle, options=CompileOptions(trust_path=registry)
    )
    without = _issue(tmp_path, _hand_written(desk), bundle, registry)
    assert without.returncode == 2 and json.loads(without.stderr)["code"] == "unsigned_decision"
    assert "--accept-unsigned-decision" in json.loads(without.stderr)["error"]
    accepted = _issue(tmp_path, _hand_written(desk), bundle, registry, "--accept-unsigned-decision")
    assert accepted.returncode == 0, accepted.stderr
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert receipt["decision_authentication"] == "unsigned"
    assert "decision_authentication" in json.loads(signing_bytes(receipt))  # signed with the rest


def test_a_receipt_valid_until_2099_does_not_verify(desk: ControlDesk, tmp_path: Path) -> None:
    import datetime as dt

    record = desk.open(KYA, now=DECIDED)
    for control, actor in SIX:
        record = desk.record_control_result(record, signed(record, control, actor), action=KYA)
    key = hmac_key("kya-1", RECEIPT_SECRET.encode())
    moment = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
    receipt = receipt_for(record.to_dict(), KYA, key, now=moment)
    receipt["expires_at"] = "2099-12-31T23:59:59Z"  # signed by a key the verifier trusts
    receipt["signature"]["value"] = key.sign(signing_bytes(receipt))
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    verify = run_cli(
        "receipt", "verify", "--action", str(KYA_PATH), "--receipt", str(tmp_path / "receipt.json"),
        "--kid", "kya-1", "--policy-version", receipt["policy_version"], "--now", "2026-11-29T10:03:00Z",
    )  # fmt: skip
    assert verify.returncode == 2, verify.stdout
    assert json.loads(verify.stderr)["code"] == "ttl_over_cap"


def test_the_library_issues_no_receipt_for_a_decision_its_desk_did_not_seal(desk: ControlDesk) -> None:
    """A host that hands ``kcp_opa.issue_receipt`` a decision document (from an agent, a file, a
    queue) must get a refusal, not a signed receipt: only a record the desk sealed is issued for."""
    import dataclasses
    import datetime as dt

    from kcp_opa import Keyring, ReceiptIssueError, issue_receipt, verify_receipt

    key = hmac_key("kya-1", RECEIPT_SECRET.encode())
    moment = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
    record = desk.open(KYA, now=DECIDED)
    for control, actor in SIX:
        record = desk.record_control_result(record, signed(record, control, actor), action=KYA)
    # What an attacker writes: the approved document, every item re-bound to a decision no gate made.
    forged = record.to_dict()
    forged["decision_id"] = "dec_written_by_hand_0002"
    forged["control_evidence"] = [{**e, "decision_id": forged["decision_id"]} for e in forged["control_evidence"]]

    def code(decision: object, **options: Any) -> str:
        with pytest.raises(ReceiptIssueError) as caught:
            issue_receipt(decision, KYA, key, now=moment, **options)
        return caught.value.code

    assert code(forged) == "unauthenticated_decision"
    assert code(forged, desk=desk) == "unauthenticated_decision"  # a desk does not vouch for a mapping
    assert code(record.to_dict(), desk=desk) == "unauthenticated_decision"  # nor for a real record's JSON
    assert code(record) == "unauthenticated_decision"  # a record is checked against the desk that sealed it
    edited = dataclasses.replace(record, receipt_ttl_seconds=900)  # a record changed after its seal
    assert code(edited, desk=desk) == "record_tampered"
    other_desk = make_desk(desk.gate)  # another desk (its own seal key) never handed this record out
    assert code(record, desk=other_desk) == "record_tampered"
    with pytest.raises(ReceiptIssueError) as caught:
        issue_receipt(record, {**KYA, "idempotency_key": "another-key-0000000001"}, key, desk=desk, now=moment)
    assert caught.value.code == "action_mismatch"
    receipt = issue_receipt(record, KYA, key, desk=desk, now=moment)  # the sealed record, with its desk
    assert receipt.decision_id == record.decision.decision_id
    verified = verify_receipt(
        receipt.to_dict(),
        KYA,
        keyring=Keyring({key.kid: key}),
        policy_versions={receipt.policy_version},
        nonce_store=None,
        now=moment,
    )
    assert verified.receipt == receipt


@pytest.mark.parametrize("seal", ["é" * 64, "\u0663" * 64, "", None, 7, ["a"]])
def test_a_record_or_prepared_input_with_a_non_ascii_or_non_text_seal_is_refused_not_a_crash(
    desk: ControlDesk, seal: object
) -> None:
    """A seal is compared in constant time; a forged seal that is not ASCII text (which ``hmac``
    cannot compare as a str) is still a refusal, never a TypeError (exit 3 at the CLI)."""
    import dataclasses

    from kcp_opa.authorize.sealedrecords import export_record, load_record
    from kcp_opa.core.errors import ActionRejectedError, EvidenceRejectedError

    record = desk.open(KYA, now=DECIDED)
    with pytest.raises(EvidenceRejectedError) as caught:
        load_record(desk, {**export_record(desk, record), "seal": seal})
    assert caught.value.code == "record_tampered"
    with pytest.raises(EvidenceRejectedError) as tampered:
        desk.check_seal(dataclasses.replace(record, seal=seal))  # type: ignore[arg-type]
    assert tampered.value.code == "record_tampered"
    prepared = desk.gate.prepare(KYA, now=DECIDED)
    with pytest.raises(ActionRejectedError, match="edited"):
        desk.gate.decide_prepared(dataclasses.replace(prepared, seal=seal))  # type: ignore[arg-type]
