"""Behaviour tests for kcp_opa/authorize/receipts.py that kill its mutmut survivors (docs/testing.md).

Receipts are issued from decision documents (what an approving gate returns) and verified with
a real SQLiteStore; no bundle is compiled, so mutmut can rerun this file per mutant.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, receipt_for

from kcp_opa.authorize import receipts
from kcp_opa.authorize.documents import BOUND_FIELDS, RECEIPT_FIELDS
from kcp_opa.authorize.receipts import signing_bytes, verify_receipt
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import ReceiptIssueError, ReceiptVerificationError
from kcp_opa.core.signing import Key, Keyring, generate_ed25519, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.stores.sqlite.executions import SQLiteStore

ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
DIGEST = action_hash(ACTION)
KEY = hmac_key("kya-1", b"mutant-receipt-secret-0123456789abcdef")
RING = Keyring({"kya-1": KEY}, "kya-1")
NOW = dt.datetime(2026, 11, 29, 10, 0, 0, 456789, tzinfo=dt.UTC)
CONTROLS = ["user_confirmation", "independent_human_approval"]


def _evidence(control: str, actor: str = "anna", **extra: Any) -> dict[str, Any]:
    return {
        "control": control,
        "status": "PASSED",
        "actor_id": actor,
        "decision_id": "d1",
        "action_hash": DIGEST,
        **extra,
    }


def _decision(**overrides: Any) -> dict[str, Any]:
    return {
        "decision_id": "d1",
        "action_hash": DIGEST,
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": list(CONTROLS),
        "control_evidence": [_evidence("user_confirmation", "user_1"), _evidence("independent_human_approval")],
        "policy_version": "0.1.0",
        **overrides,
    }


def _issue_code(decision: dict[str, Any], **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ReceiptIssueError) as caught:
        receipt_for(decision, ACTION, KEY, now=NOW, **kwargs)
    return str(caught.value.code), str(caught.value)


def _verify_code(receipt: Any, action: Any = ACTION, **kwargs: Any) -> tuple[str, str]:
    kwargs.setdefault("now", NOW)
    with pytest.raises(ReceiptVerificationError) as caught:
        verify_receipt(receipt, action, keyring=RING, policy_versions={"0.1.0"}, nonce_store=None, **kwargs)
    return str(caught.value.code), str(caught.value)


def _resign(receipt: dict[str, Any], key: Key = KEY, **changes: Any) -> dict[str, Any]:
    forged = {**copy.deepcopy(receipt), **changes}
    forged["signature"] = {"alg": key.alg, "kid": key.kid}
    forged["signature"]["value"] = key.sign(signing_bytes(forged))
    return forged


def test_constants() -> None:
    assert receipts.SCHEMA_VERSION == "2.0"
    assert (receipts.MIN_TTL_SECONDS, receipts.MAX_TTL_SECONDS, receipts.DEFAULT_TTL_SECONDS) == (30, 900, 300)
    assert receipts.CLOCK_SKEW_SECONDS == 60
    assert {"DENY", "COMPLIANCE_REVIEW", "ESCALATE"} == receipts.HOLDS
    assert (receipts.MAX_RECEIPT_DEPTH, receipts.MAX_RECEIPT_NODES) == (8, 10_000)


def test_issued_receipt_field_for_field() -> None:
    receipt = receipt_for(_decision(), ACTION, KEY, now=NOW)
    assert list(receipt) == list(RECEIPT_FIELDS)
    assert receipt["schema_version"] == "2.0" and receipt["receipt_id"].startswith("rcpt_")
    assert len(receipt["receipt_id"]) == 5 + 32
    assert receipt["decision_id"] == "d1" and receipt["decision_hash"] == canonical_hash(_decision())
    assert receipt["action_hash"] == DIGEST
    for name in BOUND_FIELDS:
        assert receipt[name] == ACTION.get(name)
    assert receipt["policy_version"] == "0.1.0"
    assert receipt["required_controls"] == sorted(CONTROLS) == receipt["satisfied_controls"]
    assert receipt["control_evidence_hash"] == canonical_hash(_decision()["control_evidence"])
    assert receipt["approver_ids"] == ["anna"]
    assert receipt["issued_at"] == "2026-11-29T10:00:00Z" and receipt["expires_at"] == "2026-11-29T10:05:00Z"
    assert len(receipt["nonce"]) == 32 and receipt["one_time_use"] is True
    assert receipt["signature"]["alg"] == "HMAC-SHA256" and receipt["signature"]["kid"] == "kya-1"
    assert KEY.verify(signing_bytes(receipt), receipt["signature"]["value"])
    assert (
        receipt_for(_decision(), ACTION, KEY, now=NOW, decision_hash="sha256:given")["decision_hash"] == "sha256:given"
    )
    other = receipt_for(_decision(), ACTION, KEY, now=NOW)
    assert other["nonce"] != receipt["nonce"] and other["receipt_id"] != receipt["receipt_id"]
    verified = verify_receipt(receipt, ACTION, keyring=RING, policy_versions={"0.1.0"}, nonce_store=None, now=NOW)
    assert verified.consumed is False and verified.receipt.to_dict() == receipt


def test_signing_bytes_cover_alg_and_kid_not_value() -> None:
    receipt = {"a": 1, "signature": {"alg": "x", "kid": "k", "value": "v"}}
    assert signing_bytes(receipt) == b'{"a":1,"signature":{"alg":"x","kid":"k"}}'
    assert signing_bytes({"a": 1, "signature": "flat"}) == b'{"a":1,"signature":"flat"}'
    assert receipt["signature"]["value"] == "v"  # the caller's receipt is not changed


def test_approvers_are_passed_human_approvals_only() -> None:
    evidence = [
        _evidence("user_confirmation", "user_1"),
        _evidence("independent_human_approval", "zed"),
        _evidence("independent_human_approval", "anna"),
        _evidence("independent_human_approval", "anna"),
        {**_evidence("independent_human_approval", "failed_one"), "status": "FAILED"},
    ]
    receipt = receipt_for(_decision(control_evidence=evidence), ACTION, KEY, now=NOW)
    assert receipt["approver_ids"] == ["anna", "zed"]


def test_ttl_from_argument_decision_and_bounds() -> None:
    assert receipt_for(_decision(), ACTION, KEY, now=NOW, ttl_seconds=30)["expires_at"] == "2026-11-29T10:00:30Z"
    assert receipt_for(_decision(), ACTION, KEY, now=NOW, ttl_seconds=900)["expires_at"] == "2026-11-29T10:15:00Z"
    assert receipt_for(_decision(receipt_ttl_seconds=60), ACTION, KEY, now=NOW)["expires_at"] == "2026-11-29T10:01:00Z"
    explicit = receipt_for(_decision(receipt_ttl_seconds=60), ACTION, KEY, now=NOW, ttl_seconds=120)
    assert explicit["expires_at"] == "2026-11-29T10:02:00Z"
    assert (
        receipt_for(_decision(receipt_ttl_seconds="60"), ACTION, KEY, now=NOW)["expires_at"] == "2026-11-29T10:05:00Z"
    )
    for ttl in (29, 901):
        assert _issue_code(_decision(), ttl_seconds=ttl) == ("ttl_out_of_range", f"ttl {ttl} s is outside 30..900")
    assert _issue_code(_decision(receipt_ttl_seconds=1000))[0] == "ttl_out_of_range"
    with pytest.raises(ValueError, match="times must carry a timezone"):
        receipt_for(_decision(), ACTION, KEY, now=dt.datetime(2026, 1, 1))
    east = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert receipt_for(_decision(), ACTION, KEY, now=east)["issued_at"] == "2026-11-29T10:00:00Z"
    assert receipt_for(_decision(), ACTION, KEY)["issued_at"].startswith(dt.datetime.now(dt.UTC).strftime("%Y-"))


def test_issue_refusals() -> None:
    assert _issue_code(_decision(action_hash="sha256:other")) == (
        "action_mismatch",
        "the decision is for another action (action hash differs)",
    )
    for hold in ("DENY", "COMPLIANCE_REVIEW", "ESCALATE"):
        assert _issue_code(_decision(decision=hold)) == ("hold_stands", f"a {hold} stands; no receipt can be issued")
    assert _issue_code(_decision(authorization_status="PENDING")) == (
        "not_approved",
        "authorization_status is PENDING, not APPROVED",
    )
    assert _issue_code(_decision(blocked_actions=["pay"])) == ("blocked", "blocked actions: ['pay']")
    receipt_for(_decision(blocked_actions=[]), ACTION, KEY, now=NOW)  # an empty list blocks nothing
    code, message = _issue_code(_decision(control_evidence=[_evidence("user_confirmation")]))
    assert code == "controls_missing" and message == "no PASSED evidence for independent_human_approval"


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({"decision_id": None}, "lacks decision_id binding"),
        ({"action_hash": None}, "lacks action_hash binding"),
        ({"decision_id": "d2"}, "is bound to another decision"),
        ({"action_hash": "sha256:x"}, "is bound to another action"),
    ],
)
def test_missing_control_names_the_binding(item: dict[str, Any], why: str) -> None:
    evidence = _evidence("independent_human_approval", **{k: v for k, v in item.items() if v is not None})
    for name, value in item.items():
        if value is None:
            del evidence[name]
    failed = {**_evidence("independent_human_approval"), "status": "FAILED"}
    decision = _decision(control_evidence=["junk", failed, _evidence("user_confirmation"), evidence])
    assert _issue_code(decision) == ("controls_missing", f"evidence item 4 (independent_human_approval) {why}")


def test_missing_controls_are_all_named_and_non_strings_ignored() -> None:
    decision = _decision(required_controls=["b_control", "a_control", 7, "a_control"], control_evidence=None)
    assert _issue_code(decision) == (
        "controls_missing",
        "no PASSED evidence for a_control; no PASSED evidence for b_control",
    )
    none_required = receipt_for(_decision(required_controls="all", control_evidence=None), ACTION, KEY, now=NOW)
    assert none_required["required_controls"] == [] and none_required["satisfied_controls"] == []
    assert none_required["control_evidence_hash"] == canonical_hash([])
    extra = receipt_for(_decision(required_controls=["user_confirmation"]), ACTION, KEY, now=NOW)
    assert extra["satisfied_controls"] == ["user_confirmation"]  # only the required ones


def test_verify_order_and_codes(tmp_path: Path) -> None:
    good = receipt_for(_decision(), ACTION, KEY, now=NOW)
    assert _verify_code("text") == ("malformed_receipt", "a receipt is a JSON object")
    no_sig = {**good, "signature": "flat"}
    assert _verify_code(no_sig) == ("unsupported_algorithm", "unsupported signature algorithm None")
    assert (
        _verify_code({**good, "signature": {"alg": "none", "kid": "kya-1", "value": "x"}})[0] == "unsupported_algorithm"
    )
    ed = generate_ed25519("kya-1")
    assert _verify_code(_resign(good, ed)) == ("signer_mismatch", "signer 'kya-1' is not trusted for Ed25519")
    assert _verify_code(_resign(good, hmac_key("other", b"o" * 32)))[0] == "signer_mismatch"
    assert _verify_code({**good, "signature": {**good["signature"], "kid": 5}})[0] == "signer_mismatch"
    assert _verify_code({**good, "signature": {**good["signature"], "value": 5}}) == (
        "bad_signature",
        "signature does not verify",
    )
    assert _verify_code({**good, "nonce": "f" * 32})[0] == "bad_signature"
    assert _verify_code(_resign(good, policy_version="9.9")) == (
        "policy_mismatch",
        "policy version 9.9 is not active (0.1.0)",
    )
    with pytest.raises(ReceiptVerificationError) as caught:
        verify_receipt(
            _resign(good, policy_version="9.9"),
            ACTION,
            keyring=RING,
            policy_versions={"b", "a"},
            nonce_store=None,
            now=NOW,
        )
    assert str(caught.value) == "policy version 9.9 is not active (a, b)"
    changed = {**ACTION, "amount": "changed"}
    assert _verify_code(good, changed) == ("action_mismatch", "the action was changed after approval (hash differs)")
    assert _verify_code(_resign(good, tenant_id="t-other", action_hash=DIGEST)) == (
        "tenant_mismatch",
        "the receipt is for another tenant",
    )
    for name in [n for n in BOUND_FIELDS if n != "tenant_id"]:
        assert _verify_code(_resign(good, **{name: "other"})) == (
            "bound_field_mismatch",
            f"{name} differs between receipt and action",
        ), name
    assert _verify_code(_resign(good, satisfied_controls=["user_confirmation"])) == (
        "controls_not_covered",
        "not every required control is satisfied",
    )
    covered = _resign(good, required_controls=[], satisfied_controls=["x"])
    verify_receipt(covered, ACTION, keyring=RING, policy_versions={"0.1.0"}, nonce_store=None, now=NOW)


def test_verify_times_and_nonce(tmp_path: Path) -> None:
    good = receipt_for(_decision(), ACTION, KEY, now=NOW)
    issued = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
    ok = {"keyring": RING, "policy_versions": {"0.1.0"}, "nonce_store": None}
    verify_receipt(good, ACTION, now=issued - dt.timedelta(seconds=60), **ok)  # within the skew
    assert _verify_code(good, now=issued - dt.timedelta(seconds=61)) == ("not_yet_valid", "issued_at is in the future")
    verify_receipt(good, ACTION, now=issued + dt.timedelta(seconds=299, microseconds=999999), **ok)
    assert _verify_code(good, now=issued + dt.timedelta(seconds=300)) == ("expired", "the receipt has expired")
    same = _resign(good, expires_at=good["issued_at"])
    assert _verify_code(same) == ("invalid_validity", "expires_at is not after issued_at")
    assert _verify_code(_resign(good, issued_at="2026-11-29 10:00:00")) == (
        "malformed_receipt",
        "'2026-11-29 10:00:00' is not YYYY-MM-DDTHH:MM:SSZ",
    )
    for nonce in ("A" * 32, "a" * 31, "g" * 32, " " + "a" * 32):
        assert _verify_code(_resign(good, nonce=nonce)) == (
            "bad_nonce",
            "nonce must be at least 32 lowercase hex characters",
        ), nonce
    verify_receipt(_resign(good, nonce="a" * 40), ACTION, now=NOW, **ok)
    store = SQLiteStore(tmp_path / "nonces.db")
    first = verify_receipt(good, ACTION, keyring=RING, policy_versions={"0.1.0"}, nonce_store=store, now=NOW)
    assert first.consumed is True
    ((nonce, rid, expires),) = store._connection().execute(
        "SELECT nonce, receipt_id, expires_at FROM consumed_receipts"
    )
    assert (nonce, rid, expires) == (good["nonce"], good["receipt_id"], good["expires_at"])
    with pytest.raises(ReceiptVerificationError) as caught:
        verify_receipt(good, ACTION, keyring=RING, policy_versions={"0.1.0"}, nonce_store=store, now=NOW)
    assert caught.value.code == "replay" and str(caught.value) == "this receipt (nonce or receipt_id) was used before"


def test_schema_checks() -> None:
    good = receipt_for(_decision(), ACTION, KEY, now=NOW)
    lacking = {k: v for k, v in good.items() if k not in ("decision_hash", "approver_ids")}
    assert _verify_code(_resign(lacking)) == ("malformed_receipt", "receipt lacks decision_hash, approver_ids")
    cases = [
        ({"schema_version": "1.0"}, "schema_version must be 2.0"),
        ({"one_time_use": 1}, "one_time_use must be true"),
        ({"one_time_use": False}, "one_time_use must be true"),
        ({"receipt_id": 5}, "receipt field receipt_id must be a string"),
        ({"nonce": None}, "receipt field nonce must be a string"),
        ({"decision_hash": 1}, "receipt field decision_hash must be a string"),
        ({"tenant_id": 7}, "receipt field tenant_id must be a string or null"),
        ({"required_controls": "x"}, "receipt field required_controls must be a list of strings"),
        ({"approver_ids": [1]}, "receipt field approver_ids must be a list of strings"),
        ({"signature_note": "x"}, "receipt has unknown fields: signature_note"),
        ({"satisfied_controls": ["b", "a"]}, "satisfied_controls must be sorted and unique"),
        ({"satisfied_controls": ["a", "a"]}, "satisfied_controls must be sorted and unique"),
    ]
    for change, message in cases:
        assert _verify_code(_resign(good, **change)) == ("malformed_receipt", message), change


def _nest(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_well_formed_bounds() -> None:
    good = receipt_for(_decision(), ACTION, KEY, now=NOW)
    # depth: the receipt is 1, its field 2 (list) ... a leaf at depth 8 passes, at 9 does not
    deep_ok = _resign(good, approver_ids=_nest(5))
    assert _verify_code(deep_ok) == ("malformed_receipt", "receipt field approver_ids must be a list of strings")
    assert _verify_code(_resign(good, approver_ids=_nest(7))) == (
        "malformed_receipt",
        "receipt is nested too deeply or too large",
    )
    wide = _resign(good, approver_ids=["a"] * 9_960)
    assert _verify_code(wide) == ("malformed_receipt", "receipt is nested too deeply or too large")
    # 9,900 approvers plus the rest of the receipt stay under 10,000 nodes: verified
    verify_receipt(
        _resign(good, approver_ids=["a"] * 9_900),
        ACTION,
        keyring=RING,
        policy_versions={"0.1.0"},
        nonce_store=None,
        now=NOW,
    )
    for value, message in (
        ({1: "x"}, "receipt keys must be strings"),
        ("bad\ud800", "receipt holds a string that is not UTF-8"),
        (2**63, "receipt holds an integer out of range"),
        (-(2**63) - 1, "receipt holds an integer out of range"),
        (float("nan"), "receipt holds a non-finite number"),
        (float("inf"), "receipt holds a non-finite number"),
        (float("-inf"), "receipt holds a non-finite number"),
        ((1, 2), "receipt holds a tuple, not JSON"),
    ):
        forged = {**good, "extra": value}
        assert _verify_code(forged) == ("malformed_receipt", message), value
    for value in (2**63 - 1, -(2**63), 1.5, None, True):
        assert _verify_code({**good, "extra": value})[0] == "bad_signature", value  # well formed, just unsigned


def test_edges_mutmut_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each assertion here killed one mutmut survivor (docs/testing.md, Python mutation testing)."""
    with pytest.raises(ValueError, match=r"^times must carry a timezone$"):
        receipt_for(_decision(), ACTION, KEY, now=dt.datetime(2026, 1, 1))
    good = receipt_for(_decision(), ACTION, KEY, now=NOW)
    # an unhashable kid is an untrusted signer, not a crash
    assert _verify_code({**good, "signature": {**good["signature"], "kid": []}})[0] == "signer_mismatch"
    store = SQLiteStore(tmp_path / "n.db")
    verified = verify_receipt(good, ACTION, keyring=RING, policy_versions={"0.1.0"}, nonce_store=store, now=NOW)
    assert verified.receipt.to_dict() == good
    # depth: the receipt is 1; a leaf (or key) at depth 8 is read, at 9 refused
    inner: Any = {"f": "v"}
    for key in "edcba":
        inner = {key: inner}
    assert _verify_code({**good, "extra": inner})[0] == "bad_signature"  # well formed, just unsigned
    assert _verify_code({**good, "extra": {"z": inner}})[1] == "receipt is nested too deeply or too large"
    leaf: Any = "leaf"
    for _ in range(6):
        leaf = [leaf]
    assert _verify_code(_resign(good, approver_ids=leaf))[1] == "receipt field approver_ids must be a list of strings"
    # size: the root, the key and the list, and n items: 10,000 nodes are read, 10,001 refused
    assert _verify_code({"x": ["a"] * 9_997})[0] == "unsupported_algorithm"
    assert _verify_code({"x": ["a"] * 9_998}) == ("malformed_receipt", "receipt is nested too deeply or too large")


def test_issue_times_are_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        receipt = receipt_for(_decision(), ACTION, KEY, now=NOW)
        assert receipt["issued_at"] == "2026-11-29T10:00:00Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
