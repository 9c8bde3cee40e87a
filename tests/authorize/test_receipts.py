"""Receipts and the executor (contract section 5), with both signers.

Every refusal class has a test; hypothesis mutates single fields of the action and of the
receipt; 8 real processes race to consume the same receipts and the store proves each nonce
and each idempotency key was used once.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, receipt_for, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trustkit import RECEIPT_SIGNERS, approve_all

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.gatedocs import sign_decision_document
from kcp_opa.authorize.receipts import signing_bytes, verify_receipt
from kcp_opa.core.errors import (
    KeyringError,
    ReceiptIssueError,
    ReceiptVerificationError,
)
from kcp_opa.core.signing import ED25519, HMAC_SHA256, Ed25519Key, Key, Keyring, generate_ed25519, hmac_key
from kcp_opa.stores.sqlite.executions import SQLiteStore

KYA_PATH = REPO / "fixtures" / "kya-supplier-payment-action.json"
KYA = json.loads(KYA_PATH.read_text())
KYA_HASH = "sha256:29a918d0341fc6c5fa77914b24525c23becdeef3de7db8e6171f2ebeecc8bf2b"
DECIDED = "2026-11-29T10:00:00Z"
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)
LATER = ISSUED + dt.timedelta(seconds=30)
SECRET = b"kya-receipt-secret-0123456789abcdef"
SIX = [
    ("standard_audit_logging", "system", "kcp-opa-ledger"),
    ("user_confirmation", "user", "user_001"),
    ("identity_verification", "provider", "kyc-provider"),
    ("authority_verification", "system", "scope-service"),
    ("beneficiary_verification", "provider", "bank-registry"),
    ("independent_human_approval", "human", "treasury_approver_anna"),
]


def _ring(receipt_key: Key) -> Keyring:
    return Keyring({receipt_key.kid: receipt_key}, receipt_key.kid)


def _receipt(approved: GateDecision, receipt_key: Key, **kwargs: Any) -> dict[str, Any]:
    return receipt_for(approved.to_dict(), KYA, receipt_key, now=ISSUED, **kwargs)


def _verify(receipt: Any, receipt_key: Key, action: Any = None, **kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "keyring": _ring(receipt_key),
        "policy_versions": {"0.1.0"},
        "nonce_store": None,
        "now": LATER,
    }
    options.update(kwargs)
    return verify_receipt(receipt, KYA if action is None else action, **options)


def _resign(receipt: dict[str, Any], receipt_key: Key, **changes: Any) -> dict[str, Any]:
    changed = {**copy.deepcopy(receipt), **changes}
    changed["signature"] = {"alg": receipt_key.alg, "kid": receipt_key.kid}
    changed["signature"]["value"] = receipt_key.sign(signing_bytes(changed))
    return changed


# --- issuing -----------------------------------------------------------------------------------


def test_issue_refusals(desk: ControlDesk, approved: GateDecision) -> None:
    receipt_key = hmac_key("k", SECRET)
    pending = desk.open(KYA, now=DECIDED).to_dict()
    with pytest.raises(ReceiptIssueError, match="PENDING_CONTROLS") as caught:
        receipt_for(pending, KYA, receipt_key, now=ISSUED)
    assert caught.value.code == "not_approved"
    for hold in ("DENY", "ESCALATE", "COMPLIANCE_REVIEW"):
        with pytest.raises(ReceiptIssueError) as caught:
            receipt_for(approved.to_dict() | {"decision": hold}, KYA, receipt_key, now=ISSUED)
        assert caught.value.code == "hold_stands"
    for ttl in (29, 901):
        with pytest.raises(ReceiptIssueError) as caught:
            receipt_for(approved.to_dict(), KYA, receipt_key, ttl_seconds=ttl, now=ISSUED)
        assert caught.value.code == "ttl_out_of_range"
    with pytest.raises(KeyringError):
        hmac_key("short", b"x" * 31)


def test_receipt_fields_are_the_kya_ones(approved: GateDecision, receipt_key: Key) -> None:
    receipt = _receipt(approved, receipt_key)
    assert receipt["action_hash"] == KYA_HASH and receipt["one_time_use"] is True
    assert receipt["satisfied_controls"] == sorted(set(receipt["satisfied_controls"]))
    assert set(receipt["required_controls"]) == {c for c, _, _ in SIX}
    assert receipt["approver_ids"] == ["treasury_approver_anna"]
    assert receipt["expires_at"] == "2026-11-29T10:07:00Z" and receipt["issued_at"] == "2026-11-29T10:02:00Z"
    assert len(receipt["nonce"]) >= 32 and receipt["signature"]["alg"] == receipt_key.alg
    assert _verify(receipt, receipt_key).receipt.receipt_id == receipt["receipt_id"]


def test_hmac_receipts_match_the_kya_reference_algorithm(approved: GateDecision) -> None:
    """The KYA reference: hex HMAC-SHA256 over KYA-CJ-1 JSON of the receipt minus signature.value."""

    def reference_mac(receipt: dict[str, Any]) -> str:
        body = copy.deepcopy(receipt)
        body["signature"].pop("value", None)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return hmac.new(SECRET, text.encode("utf-8"), hashlib.sha256).hexdigest()

    ours = _receipt(approved, hmac_key("kya-1", SECRET))
    assert hmac.compare_digest(ours["signature"]["value"], reference_mac(ours))
    theirs = copy.deepcopy(ours) | {"receipt_id": "rcpt_from_reference", "nonce": "ab" * 16}
    theirs["signature"] = {"alg": "HMAC-SHA256", "kid": "kya-1"}
    theirs["signature"]["value"] = reference_mac(theirs)
    assert _verify(theirs, hmac_key("kya-1", SECRET)).receipt.receipt_id == "rcpt_from_reference"


# --- verifying, in the contract's order ----------------------------------------------------------


def test_verify_refusals_in_order(approved: GateDecision, receipt_key: Key, tmp_path: Path) -> None:
    good = _receipt(approved, receipt_key)

    def code_of(receipt: Any, action: Any = None, **kwargs: Any) -> str:
        with pytest.raises(ReceiptVerificationError) as caught:
            _verify(receipt, receipt_key, action, **kwargs)
        return caught.value.code

    assert code_of(good | {"signature": {**good["signature"], "alg": "none"}}) == "unsupported_algorithm"
    assert code_of(good | {"signature": {**good["signature"], "kid": "stranger"}}) == "signer_mismatch"
    other_alg = HMAC_SHA256 if receipt_key.alg == ED25519 else ED25519
    assert code_of(good | {"signature": {**good["signature"], "alg": other_alg}}) == "signer_mismatch"
    retired = Keyring({receipt_key.kid: receipt_key.retire()})
    assert code_of(good, keyring=retired) == "signer_mismatch"
    flipped = good["signature"]["value"][:-2] + ("00" if not good["signature"]["value"].endswith("00") else "11")
    assert code_of(good | {"signature": {**good["signature"], "value": flipped}}) == "bad_signature"
    assert code_of(good | {"policy_version": "9.9.9"}) == "bad_signature"  # unsigned change
    assert code_of(_resign(good, receipt_key, one_time_use=False)) == "malformed_receipt"
    assert code_of(_resign({k: v for k, v in good.items() if k != "approver_ids"}, receipt_key)) == "malformed_receipt"
    assert code_of(good, policy_versions={"0.2.0"}) == "policy_mismatch"
    assert code_of(good, action={**KYA, "amount": {"value_minor": 800001, "currency": "USD"}}) == "action_mismatch"
    assert code_of(_resign(good, receipt_key, tenant_id="tenant_other")) == "tenant_mismatch"
    assert code_of(_resign(good, receipt_key, agent_id="agent_other")) == "bound_field_mismatch"
    short = _resign(good, receipt_key, satisfied_controls=sorted(good["satisfied_controls"])[1:])
    assert code_of(short) == "controls_not_covered"
    assert code_of(good, now=ISSUED - dt.timedelta(seconds=61)) == "not_yet_valid"
    assert _verify(good, receipt_key, now=ISSUED - dt.timedelta(seconds=59))  # within the clock skew
    assert code_of(_resign(good, receipt_key, expires_at=good["issued_at"])) == "invalid_validity"
    assert code_of(good, now=ISSUED + dt.timedelta(seconds=300)) == "expired"
    assert code_of(_resign(good, receipt_key, nonce="xyz")) == "bad_nonce"
    store = SQLiteStore(tmp_path / "nonces.db")
    assert _verify(good, receipt_key, nonce_store=store).consumed
    assert code_of(good, nonce_store=store) == "replay"
    same_id = _resign(good, receipt_key, nonce="cd" * 16)
    assert code_of(same_id, nonce_store=store) == "replay"  # receipt_id seen before


def test_ed25519_executor_cannot_mint(approved: GateDecision) -> None:
    signer = generate_ed25519("ed-1")
    public = Keyring({"ed-1": signer}, "ed-1").public()
    with pytest.raises(KeyringError):
        public.signer()
    with pytest.raises(KeyringError):
        public.keys["ed-1"].sign(b"x")
    receipt = receipt_for(approved.to_dict(), KYA, signer, now=ISSUED)
    assert verify_receipt(receipt, KYA, keyring=public, policy_versions={"0.1.0"}, nonce_store=None, now=LATER)


def test_rotation_without_downtime(approved: GateDecision) -> None:
    old, new = generate_ed25519("ed-2025"), generate_ed25519("ed-2026")
    before = receipt_for(approved.to_dict(), KYA, old, now=ISSUED)
    rotating = Keyring({"ed-2025": old, "ed-2026": new}, "ed-2026")
    after = receipt_for(approved.to_dict(), KYA, rotating.signer(), now=ISSUED)
    for receipt in (before, after):
        assert verify_receipt(
            receipt, KYA, keyring=rotating.public(), policy_versions={"0.1.0"}, nonce_store=None, now=LATER
        )
    retired = Keyring({"ed-2025": Ed25519Key("ed-2025", public_key=old.public_key, retired=True), "ed-2026": new})
    with pytest.raises(ReceiptVerificationError, match="not trusted"):
        verify_receipt(before, KYA, keyring=retired, policy_versions={"0.1.0"}, nonce_store=None, now=LATER)


# --- single-field mutations (hypothesis) ---------------------------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _mutate(document: Any, path: tuple[Any, ...], new: Any) -> Any:
    changed = copy.deepcopy(document)
    node = changed
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = new
    return changed


_REPLACEMENTS = st.one_of(st.text(min_size=1, max_size=8), st.integers(-5, 10**9), st.booleans(), st.none())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_field_mutation_is_rejected(approved: GateDecision, data: st.DataObject) -> None:
    for name in sorted(RECEIPT_SIGNERS):
        receipt_key = RECEIPT_SIGNERS[name]() if name == HMAC_SHA256 else _ED_KEY
        receipt = _receipt(approved, receipt_key)
        target = data.draw(st.sampled_from(["action", "receipt"]), label="target")
        document = KYA if target == "action" else receipt
        leaves = [p for p in _leaves(document) if p]
        path = data.draw(st.sampled_from(sorted(leaves, key=repr)), label="path")
        old = document
        for part in path:
            old = old[part]
        new = data.draw(_REPLACEMENTS.filter(lambda v, old=old: v != old or type(v) is not type(old)), label="new")
        if target == "action":
            candidate_receipt, candidate_action = receipt, _mutate(KYA, path, new)
        else:
            candidate_receipt, candidate_action = _mutate(receipt, path, new), KYA
        with pytest.raises(ReceiptVerificationError):
            _verify(candidate_receipt, receipt_key, candidate_action)


_ED_KEY = generate_ed25519("ed-hypothesis")


# --- the CLI ---------------------------------------------------------------------------------------


def test_cli_hash_issue_verify_replay(approved: GateDecision, tmp_path: Path) -> None:
    env_secret = SECRET.decode()
    decision = tmp_path / "decision.json"
    gate_key = generate_ed25519("gate-decisions-1")  # the gate signs the document it writes (controls show)
    decision.write_text(json.dumps(sign_decision_document(approved.to_dict(), gate_key)))
    gate_public = tmp_path / "gate-public.json"
    gate_public.write_text(json.dumps(Keyring({gate_key.kid: gate_key}).public().to_file_dict(include_private=False)))
    assert json.loads(run_cli("receipt", "hash", "--action", str(KYA_PATH)).stdout)["action_hash"] == KYA_HASH
    os.environ["KYA_RECEIPT_SECRET"] = env_secret
    try:
        issued = run_cli(
            "receipt",
            "issue",
            "--action",
            str(KYA_PATH),
            "--decision",
            str(decision),
            "--decision-key",
            str(gate_public),
            "--output",
            str(tmp_path / "r.json"),
            "--now",
            "2026-11-29T10:02:00Z",
        )
        assert issued.returncode == 0, issued.stderr
        assert env_secret not in issued.stdout + issued.stderr
        args = [
            "receipt",
            "verify",
            "--action",
            str(KYA_PATH),
            "--receipt",
            str(tmp_path / "r.json"),
            "--policy-version",
            "0.1.0",
            "--nonce-db",
            str(tmp_path / "n.db"),
            "--now",
            "2026-11-29T10:03:00Z",
        ]
        first = run_cli(*args)
        assert first.returncode == 0 and json.loads(first.stdout)["consumed"] is True
        replay = run_cli(*args)
        assert replay.returncode == 2
        assert json.loads(replay.stderr) == {
            "ok": False,
            "error": "this receipt (nonce or receipt_id) was used before",
            "code": "replay",
        }
    finally:
        del os.environ["KYA_RECEIPT_SECRET"]
    missing = run_cli("receipt", "issue", "--action", str(KYA_PATH), "--decision", str(decision))
    assert missing.returncode == 2 and json.loads(missing.stderr)["code"] == "no_secret"


def test_cli_ed25519_keyring_and_rotation(approved: GateDecision, tmp_path: Path) -> None:
    ring, public = tmp_path / "ring.json", tmp_path / "public.json"
    assert (
        run_cli("receipt", "keygen", "--kid", "ed-1", "--keyring", str(ring), "--public", str(public)).returncode == 0
    )
    assert oct(ring.stat().st_mode & 0o777) == "0o600"
    assert "private_key" not in public.read_text()
    decision = tmp_path / "decision.json"
    decision.write_text(json.dumps(approved.to_dict()))
    issued = run_cli(
        "receipt",
        "issue",
        "--action",
        str(KYA_PATH),
        "--decision",
        str(decision),
        "--accept-unsigned-decision",
        "--keyring",
        str(ring),
        "--output",
        str(tmp_path / "r.json"),
    )
    assert issued.returncode == 0, issued.stderr
    assert json.loads((tmp_path / "r.json").read_text())["decision_authentication"] == "unsigned"
    verify = [
        "receipt",
        "verify",
        "--action",
        str(KYA_PATH),
        "--receipt",
        str(tmp_path / "r.json"),
        "--policy-version",
        "0.1.0",
    ]
    assert run_cli(*verify, "--keyring", str(public)).returncode == 0
    not_a_signer = run_cli(
        "receipt", "issue", "--action", str(KYA_PATH), "--decision", str(decision), "--keyring", str(public)
    )
    assert not_a_signer.returncode == 2 and json.loads(not_a_signer.stderr)["code"] == "no_signing_key"
    rotated = run_cli(
        "receipt", "keygen", "--kid", "ed-2", "--keyring", str(ring), "--public", str(public), "--retire", "ed-1"
    )
    assert rotated.returncode == 0, rotated.stderr
    refused = run_cli(*verify, "--keyring", str(public))
    assert refused.returncode == 2 and json.loads(refused.stderr)["code"] == "signer_mismatch"


def test_no_receipt_while_an_action_is_blocked(desk: ControlDesk) -> None:
    """Kills: issuing a receipt although the decision document lists blocked actions."""
    record = approve_all(desk, KYA)
    assert record.decision.authorization_status.value == "APPROVED"
    document = record.to_dict()
    receipt_for(document, KYA, hmac_key("k", SECRET), now=ISSUED)  # the unblocked document is fine
    with pytest.raises(ReceiptIssueError) as caught:
        receipt_for(document | {"blocked_actions": ["execute_payment"]}, KYA, hmac_key("k", SECRET), now=ISSUED)
    assert caught.value.code == "blocked"
