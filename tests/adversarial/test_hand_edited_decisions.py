"""Attack class: signed without being authenticated, this gate's own documents (issue 26, class 4).

``kcp-opa receipt issue`` without ``--issuer`` signs a receipt for the decision document the
operator hands it. Anyone can write that file: take a genuine PENDING_CONTROLS document and turn
its decision to ALLOW, or a missing or FAILED control to PASSED, and the bindings (decision id,
action hash) still match. The document must carry the gate's signature
(``controls show --decision-signing-key``) and verify with the key ``receipt issue
--decision-key`` is given; a document nobody authenticated is taken only with
``--accept-unsigned-decision``, and the receipt says so. Real CLI processes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_cli
from trustkit import approve_all, signed

from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.authorize.gatedocs import sign_decision_document
from kcp_opa.authorize.receipts import signing_bytes
from kcp_opa.core.signing import Keyring, generate_ed25519

KYA_PATH = REPO / "fixtures" / "kya-supplier-payment-action.json"
ISSUED = "2026-11-29T10:02:00Z"
RECEIPT_SECRET = "kya-receipt-secret-0123456789abcdef"
GATE_KEY = generate_ed25519("gate-decisions-1")
SKIPPED = "independent_human_approval"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KYA_RECEIPT_SECRET", RECEIPT_SECRET)


@pytest.fixture(scope="module")
def pending(desk: ControlDesk) -> dict[str, Any]:
    """A genuine document the gate wrote: every control answered but the human approval."""
    document = approve_all(desk, skip=SKIPPED).to_dict()
    assert document["authorization_status"] == "PENDING_CONTROLS" and SKIPPED in document["missing_controls"]
    return document


@pytest.fixture(scope="module")
def approved(desk: ControlDesk) -> dict[str, Any]:
    return approve_all(desk).to_dict()


def _public(tmp_path: Path, key: Any = GATE_KEY) -> Path:
    path = tmp_path / "gate-decision-public.json"
    path.write_text(json.dumps(Keyring({key.kid: key}, key.kid).public().to_file_dict(include_private=False)))
    return path


def _issue(tmp_path: Path, document: dict[str, Any], *extra: str) -> Any:
    (tmp_path / "decision.json").write_text(json.dumps(document))
    (tmp_path / "receipt.json").unlink(missing_ok=True)
    return run_cli(
        "receipt", "issue", "--action", str(KYA_PATH), "--decision", str(tmp_path / "decision.json"),
        "--kid", "kya-1", "--now", ISSUED, "--output", str(tmp_path / "receipt.json"), *extra,
    )  # fmt: skip


def _refused(proc: Any, code: str, tmp_path: Path) -> None:
    assert proc.returncode == 2, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one line, no traceback
    assert json.loads(proc.stderr)["code"] == code, proc.stderr
    assert not (tmp_path / "receipt.json").exists()


def _to_allow(document: dict[str, Any]) -> dict[str, Any]:
    """The decision turned to ALLOW: only the audit control (PASSED by the gate) left to require."""
    edited = copy.deepcopy(document)
    edited |= {"decision": "ALLOW", "outcome": "allow", "authorization_status": "APPROVED", "blocked_actions": []}
    edited |= {"execution_allowed": True, "required_controls": ["standard_audit_logging"], "missing_controls": []}
    edited["satisfied_controls"] = ["standard_audit_logging"]
    return edited


def _skipped_to_passed(document: dict[str, Any]) -> dict[str, Any]:
    """The missing human approval written in as PASSED, bound to the right ids."""
    edited = copy.deepcopy(document)
    forged = {**edited["control_evidence"][-1], "control": SKIPPED, "actor_id": "treasury_approver_anna"}
    edited["control_evidence"].append(forged | {"actor_type": "human", "evidence_reference": "ev:forged"})
    edited |= {"authorization_status": "APPROVED", "execution_allowed": True, "missing_controls": []}
    edited |= {"satisfied_controls": edited["required_controls"], "blocked_actions": []}
    return edited


@pytest.mark.parametrize("edit", [_to_allow, _skipped_to_passed], ids=["decision_to_allow", "control_to_passed"])
def test_a_hand_edited_decision_gets_no_receipt(pending: dict[str, Any], edit: Any, tmp_path: Path) -> None:
    public = _public(tmp_path)
    signed_pending = sign_decision_document(pending, GATE_KEY)
    assert json.loads(_issue(tmp_path, signed_pending, "--decision-key", str(public)).stderr)["code"] == "not_approved"
    # edited after the gate signed it: the signature no longer verifies
    _refused(_issue(tmp_path, edit(signed_pending), "--decision-key", str(public)), "bad_signature", tmp_path)
    # the signature stripped: unsigned, refused where a key says the gate signs
    _refused(_issue(tmp_path, edit(pending), "--decision-key", str(public)), "unsigned_decision", tmp_path)
    # no key given at all: nothing authenticated it, so nothing is signed
    _refused(_issue(tmp_path, edit(signed_pending)), "unauthenticated_decision", tmp_path)
    # re-signed by a key that is not the gate's
    rogue = generate_ed25519(GATE_KEY.kid)
    _refused(
        _issue(tmp_path, sign_decision_document(edit(pending), rogue), "--decision-key", str(public)),
        "bad_signature",
        tmp_path,
    )
    other = generate_ed25519("someone-else")
    _refused(
        _issue(tmp_path, sign_decision_document(edit(pending), other), "--decision-key", str(public)),
        "unknown_decision_key",
        tmp_path,
    )


def test_a_failed_control_edited_to_passed_gets_no_receipt(desk: ControlDesk, tmp_path: Path) -> None:
    record = approve_all(desk, skip=SKIPPED)
    failed = signed(record, SKIPPED, "treasury_approver_anna", status="FAILED")
    document = desk.record_control_result(record, failed, action=record.action).to_dict()
    assert document["authorization_status"] != "APPROVED"
    edited = copy.deepcopy(document)
    for item in edited["control_evidence"]:
        item["status"] = "PASSED"
    edited |= {"authorization_status": "APPROVED", "missing_controls": [], "blocked_actions": []}
    after_signing = sign_decision_document(document, GATE_KEY) | {k: v for k, v in edited.items() if k != "signature"}
    _refused(_issue(tmp_path, after_signing, "--decision-key", str(_public(tmp_path))), "bad_signature", tmp_path)
    _refused(_issue(tmp_path, edited), "unauthenticated_decision", tmp_path)


def test_the_gates_signed_document_gets_its_receipt(approved: dict[str, Any], tmp_path: Path) -> None:
    issued = _issue(tmp_path, sign_decision_document(approved, GATE_KEY), "--decision-key", str(_public(tmp_path)))
    assert issued.returncode == 0, issued.stderr
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert receipt["decision_id"] == approved["decision_id"] and "decision_authentication" not in receipt


def test_unsigned_only_with_the_flag_and_the_receipt_says_so(approved: dict[str, Any], tmp_path: Path) -> None:
    _refused(_issue(tmp_path, approved), "unauthenticated_decision", tmp_path)
    both = _issue(tmp_path, approved, "--accept-unsigned-decision", "--decision-key", str(_public(tmp_path)))
    _refused(both, "usage", tmp_path)
    accepted = _issue(tmp_path, approved, "--accept-unsigned-decision")
    assert accepted.returncode == 0, accepted.stderr
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert receipt["decision_authentication"] == "unsigned"
    assert "decision_authentication" in json.loads(signing_bytes(receipt))  # signed with the rest of the receipt
