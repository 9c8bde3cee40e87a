"""Receipts, attestations and checkpoints as typed documents: read strictly, written unchanged.

The fixtures under tests/fixtures/signed/ were signed by the dict-based code these classes
replaced (HMAC key ``golden-1``); each must read, write back byte for byte (the same JSON text,
key order included) and still verify. Every shape error is one MalformedDocumentError with the
document's code; the verifiers turn it into their own refusal code.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from kcp_opa import Attestation, Checkpoint, MalformedDocumentError, Receipt, verify_receipt
from kcp_opa.authorize.attestations import attestation_bytes
from kcp_opa.core.errors import KcpOpaError, LedgerError, ReceiptVerificationError
from kcp_opa.core.signing import Keyring, document_verifies, hmac_key
from kcp_opa.trail.checkpoint import append_checkpoint, read_checkpoint, read_checkpoints

SIGNED = REPO / "tests" / "fixtures" / "signed"
KEY = hmac_key("golden-1", b"golden-fixture-secret-0123456789abcdef")
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
NOW = dt.datetime(2026, 11, 29, 10, 3, tzinfo=dt.UTC)
DOCUMENTS: dict[str, Any] = {
    "receipt": Receipt,
    "receipt-unsigned-decision": Receipt,
    "attestation": Attestation,
    "checkpoint": Checkpoint,
    "checkpoint-unbound": Checkpoint,
}
CODES = {Receipt: "malformed_receipt", Attestation: "malformed_evidence", Checkpoint: "malformed_checkpoint"}


def _fixture(name: str) -> tuple[str, dict[str, Any]]:
    text = (SIGNED / f"{name}.json").read_text()
    return text, json.loads(text)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_signed_document_reads_and_writes_back_byte_for_byte(name: str) -> None:
    text, raw = _fixture(name)
    document = DOCUMENTS[name].from_dict(raw)
    assert json.dumps(document.to_dict(), indent=2) + "\n" == text  # same keys, same order, same values
    assert DOCUMENTS[name].from_dict(document.to_dict()) == document
    assert document_verifies(document.to_dict(), KEY)
    assert document.signature.kid == "golden-1"


def test_the_typed_documents_keep_their_meaning() -> None:
    receipt = Receipt.from_dict(_fixture("receipt")[1])
    assert receipt.decision_authentication is None and receipt.tenant_id == ACTION["tenant_id"]
    assert receipt.approver_ids == ("treasury_approver_anna",)
    verified = verify_receipt(
        receipt, ACTION, keyring=Keyring({KEY.kid: KEY}), policy_versions={"0.1.0"}, nonce_store=None, now=NOW
    )
    assert verified.receipt == receipt and not verified.consumed
    unsigned = Receipt.from_dict(_fixture("receipt-unsigned-decision")[1])
    assert unsigned.decision_authentication == "unsigned"
    assert "decision_authentication" in json.loads(attestation_bytes(unsigned.to_dict()))  # signed with the rest
    Checkpoint.from_dict(_fixture("checkpoint")[1]).verify(Keyring({KEY.kid: KEY}))
    assert Checkpoint.from_dict(_fixture("checkpoint-unbound")[1]).ledger_id is None
    attestation = Attestation.from_dict(_fixture("attestation")[1])
    assert attestation.actor_type is None and "actor_type" not in attestation.to_dict()
    declared = attestation.body() | {"actor_type": "user", "signature": attestation.signature.to_dict()}
    assert Attestation.from_dict(declared).actor_type == "user"


def test_a_signed_document_signs_what_it_writes() -> None:
    receipt = Receipt.from_dict(_fixture("receipt")[1])
    other = hmac_key("golden-2", b"another-golden-secret-0123456789abcdef")
    resigned = receipt.signed_by(other)
    assert resigned.signature.kid == "golden-2" and resigned.verifies(other) and not resigned.verifies(KEY)
    checkpoint = Checkpoint.sign("ledger-x", 3, "sha256:" + "ef" * 32, other, now=NOW)
    assert checkpoint.time == "2026-11-29T10:03:00.000000Z"
    checkpoint.verify(Keyring({other.kid: other}))
    with pytest.raises(LedgerError, match="signature does not verify"):
        Checkpoint.from_dict({**checkpoint.to_dict(), "seq": 4}).verify(Keyring({other.kid: other}))


def _strictness_cases(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any] | Any]]:
    first = next(name for name in raw if name != "signature")
    text_field = next(name for name, value in raw.items() if isinstance(value, str))
    cases: list[tuple[str, Any]] = [
        ("unknown field", {**raw, "note": "added"}),
        ("missing field", {k: v for k, v in raw.items() if k != first}),
        ("missing signature", {k: v for k, v in raw.items() if k != "signature"}),
        ("number for a string", {**raw, text_field: 7}),
        ("null for a string", {**raw, text_field: None}),
        ("signature not an object", {**raw, "signature": "abc"}),
        ("signature value missing", {**raw, "signature": {"alg": "HMAC-SHA256", "kid": "golden-1"}}),
        ("signature with an extra field", {**raw, "signature": {**raw["signature"], "x": 1}}),
        ("not an object", [raw]),
    ]
    return cases


@pytest.mark.parametrize("name", ["receipt", "attestation", "checkpoint"])
def test_a_document_of_the_wrong_shape_is_one_coded_error(name: str) -> None:
    cls = DOCUMENTS[name]
    _, raw = _fixture(name)
    for label, broken in _strictness_cases(raw):
        with pytest.raises(MalformedDocumentError) as caught:
            cls.from_dict(copy.deepcopy(broken))
        assert caught.value.code == CODES[cls], label
        assert isinstance(caught.value, KcpOpaError)


def test_each_document_s_own_rules() -> None:
    _, receipt = _fixture("receipt")
    _, checkpoint = _fixture("checkpoint")
    _, attestation = _fixture("attestation")
    broken = [
        (Receipt, {**receipt, "schema_version": "1.0"}, "schema_version must be 2.0"),
        (Receipt, {**receipt, "one_time_use": 1}, "one_time_use must be true"),
        (Receipt, {**receipt, "approver_ids": "anna"}, "approver_ids must be a list of strings"),
        (Receipt, {**receipt, "satisfied_controls": ["b", "a"]}, "sorted and unique"),
        (Receipt, {**receipt, "tenant_id": ["t"]}, "tenant_id must be a string or null"),
        (Checkpoint, {**checkpoint, "seq": True}, "seq must be an integer >= 1"),
        (Checkpoint, {**checkpoint, "seq": 7.0}, "seq must be an integer >= 1"),
        (Checkpoint, {**checkpoint, "seq": 0}, "seq must be an integer >= 1"),
        (Checkpoint, {**checkpoint, "format": "kcp-opa-checkpoint/2"}, "format must be kcp-opa-checkpoint/1"),
        (Checkpoint, {**checkpoint, "ledger_id": 5}, "ledger_id must be a string or null"),
        (Attestation, {**attestation, "evidence_reference": ""}, "evidence_reference must be a non-empty string"),
        (Attestation, {**attestation, "actor_type": 1}, "actor_type must be a string or null"),
    ]
    for cls, raw, message in broken:
        with pytest.raises(MalformedDocumentError, match=message) as caught:
            cls.from_dict(raw)
        assert caught.value.code == CODES[cls]


def test_the_verifiers_refuse_a_wrong_shape_with_their_own_codes(tmp_path: Path) -> None:
    _, receipt = _fixture("receipt")
    extra = {**receipt, "note": "x"}
    extra["signature"] = {"alg": KEY.alg, "kid": KEY.kid}
    extra["signature"]["value"] = KEY.sign(attestation_bytes(extra))  # validly signed, still not a receipt
    with pytest.raises(ReceiptVerificationError) as caught:
        verify_receipt(extra, ACTION, keyring=Keyring({KEY.kid: KEY}), policy_versions={"0.1.0"}, nonce_store=None)
    assert caught.value.code == "malformed_receipt" and "unknown fields: note" in str(caught.value)
    _, checkpoint = _fixture("checkpoint")
    with pytest.raises(LedgerError, match="not a kcp-opa-checkpoint/1 checkpoint"):
        read_checkpoint({**checkpoint, "time": None})
    path = tmp_path / "checkpoints.jsonl"
    append_checkpoint(path, Checkpoint.from_dict(checkpoint))
    assert read_checkpoints(path) == [Checkpoint.from_dict(checkpoint)]
    path.write_text(json.dumps({**checkpoint, "extra": 1}) + "\n")
    with pytest.raises(LedgerError, match="unknown fields: extra"):
        read_checkpoints(path)
