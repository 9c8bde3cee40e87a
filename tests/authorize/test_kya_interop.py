"""KYA interop: control evidence as KYA documents, signed by the gate, and the receipts they yield."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_cli
from trustkit import KYA, REGISTRY, approve_all, registry

from kcp_opa.authorize.attestations import attestation_bytes
from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.core.errors import ReceiptIssueError
from kcp_opa.core.signing import Keyring, hmac_key

SECRET = b"kya-receipt-secret-0123456789abcdef"


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


def _issue_foreign(document: dict[str, Any], trust_bundle: Path) -> None:
    """A receipt under ``document`` as the registered gate kya-reference-gate's decision."""
    from kcp_opa.authorize.interop import issue_for_foreign_decision

    issue_for_foreign_decision(
        document, KYA, hmac_key("kya-1", SECRET), gate="kya-reference-gate", registry=registry(),
        bundle=read_bundle(trust_bundle), keyring=Keyring({"kya-gate": hmac_key("kya-gate", GATE_SECRET)}),
    )  # fmt: skip


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
    desk: ControlDesk, trust_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KYA_RECEIPT_SECRET", SECRET.decode())
    monkeypatch.setenv("KYA_GATE_SECRET", GATE_SECRET.decode())
    document = _kya_document(approve_all(desk))
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
    # without --issuer the document is this gate's own, taken unsigned here: its items lack the bindings
    refused = run_cli(*base, "--accept-unsigned-decision", "--now", "2026-11-29T10:02:00Z")
    assert refused.returncode == 2
    error = json.loads(refused.stderr)
    assert error["code"] == "controls_missing"
    assert "evidence item 1 (standard_audit_logging) lacks decision_id binding" in error["error"]
    trusted = [*base, "--trust", str(REGISTRY), "--bundle", str(trust_bundle), "--now", "2026-11-29T10:02:00Z"]
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
    desk: ControlDesk, trust_bundle: Path, edit: Any, code: str, message: str
) -> None:
    document = _kya_document(approve_all(desk))
    edit(document["control_evidence"])
    document = _kya_document_resigned(document)
    with pytest.raises(ReceiptIssueError) as caught:
        _issue_foreign(document, trust_bundle)
    assert caught.value.code == code and message in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("required_controls", 1),
        ("required_controls", True),
        ("required_controls", "independent_human_approval"),
        ("required_controls", ["independent_human_approval", 7]),
        ("approver_roles", True),
        ("control_evidence", 1),
    ],
)
def test_a_malformed_list_in_a_trusted_gate_s_decision_is_refused_not_read_as_empty(
    desk: ControlDesk, trust_bundle: Path, field: str, value: Any
) -> None:
    """Read as empty, a signed ``required_controls: 1`` would issue a receipt that requires nothing."""
    document = _kya_document(approve_all(desk))
    document[field] = value
    document = _kya_document_resigned(document)
    with pytest.raises(ReceiptIssueError) as caught:
        _issue_foreign(document, trust_bundle)
    assert caught.value.code == "malformed_decision" and field in str(caught.value)
