"""Attacks on receipt verification: malformed receipts (NaN, lone surrogates, non-string keys,
deep nesting, out-of-range integers, wrong types) and non-canonical signature encodings.

Before: the malformed ones escaped ``verify_receipt`` as raw exceptions (CLI exit 3, nothing
recorded), and an Ed25519 signature with trailing garbage or flipped spare bits still verified.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, receipt_for

from kcp_opa.authorize.receipts import signing_bytes, verify_receipt
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import ReceiptVerificationError
from kcp_opa.core.signing import Key, Keyring, generate_ed25519, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger, read_entries

SECRET = b"adversarial-receipt-secret-0123456789"
ACTION_PATH = REPO / "fixtures" / "kya-supplier-payment-action.json"
ACTION = json.loads(ACTION_PATH.read_text())


def _issue(key: Key) -> dict[str, Any]:
    decision = {
        "decision_id": "dec_adv_2",
        "action_hash": action_hash(ACTION),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    return receipt_for(decision, ACTION, key)


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def _malformed(receipt: dict[str, Any]) -> dict[str, Any]:
    """One malformed receipt per class; each is the genuine receipt with one thing broken."""
    out = {}
    for name, change in {
        "nan": {"issued_at": float("nan")},
        "infinity": {"nonce": float("inf")},
        "lone_surrogate": {"receipt_id": "rcpt_\udc80"},
        "non_string_key": {"approver_ids": {1: "a"}},
        "deep_nesting": {"required_controls": _deep(5000)},
        "huge_integer": {"policy_version": 10**5000},
        "not_json": {"decision_id": object()},
        "signature_not_object": {"signature": ["HMAC-SHA256"]},
    }.items():
        out[name] = {**copy.deepcopy(receipt), **change}
    out["nested_key"] = copy.deepcopy(receipt)
    out["nested_key"]["signature"] = {**receipt["signature"], (1, 2): "tuple key"}
    return out


@pytest.fixture(scope="module")
def ledger_bundle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("adv-receipts") / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return read_bundle(out)


def test_receipt_malformed_is_a_refusal_recorded_in_store_and_ledger(tmp_path: Path, ledger_bundle: Any) -> None:
    key = hmac_key("kya-1", SECRET)
    ledger_path = tmp_path / "audit.jsonl"
    executor = Executor(
        keyring=Keyring({"kya-1": key}, "kya-1"),
        policy_versions={"0.1.0"},
        store=SQLiteStore(tmp_path / "exec.db"),
        audit=AuditTrail(AuditLedger(ledger_path), ledger_bundle),
    )
    variants = _malformed(_issue(key))
    for name, receipt in variants.items():
        with pytest.raises(ReceiptVerificationError) as caught:
            executor.execute_authorized_action(ACTION, receipt, lambda a: pytest.fail("must not run"))
        assert caught.value.code in {"malformed_receipt", "unsupported_algorithm"}, name
        assert caught.value.code == "malformed_receipt" or name == "signature_not_object", name
    refusals = [e for _, e in read_entries(ledger_path) if e.get("type") == "failure"]
    assert len(refusals) == len(variants) == executor.store.count("refusals")
    assert executor.store.count("executions") == 0


def test_receipt_wrong_types_signed_by_a_buggy_issuer_are_malformed(tmp_path: Path) -> None:
    key = hmac_key("kya-1", SECRET)
    genuine = _issue(key)
    for change in ({"required_controls": "all"}, {"nonce": ["a" * 32]}, {"one_time_use": 1}, {"issued_at": 5}):
        forged = {**copy.deepcopy(genuine), **change}
        forged["signature"] = {"alg": key.alg, "kid": key.kid}
        forged["signature"]["value"] = key.sign(signing_bytes(forged))
        with pytest.raises(ReceiptVerificationError) as caught:
            verify_receipt(forged, ACTION, keyring=Keyring({"kya-1": key}), policy_versions={"0.1.0"}, nonce_store=None)
        assert caught.value.code == "malformed_receipt", change


def test_receipt_malformed_on_the_cli_is_exit_2_never_3(tmp_path: Path) -> None:
    key = hmac_key("kya-1", SECRET)
    genuine = _issue(key)
    texts = {
        "nan": json.dumps({**genuine, "issued_at": float("nan")}),
        "surrogate": json.dumps(genuine).replace(genuine["receipt_id"], "rcpt_\\udc80"),
        "deep": json.dumps({**genuine, "approver_ids": _deep(900)}),
        "huge": json.dumps(genuine).replace('"one_time_use": true', '"one_time_use": ' + "9" * 5000),
    }
    for name, text in texts.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        proc = _cli_verify(path)
        assert proc.returncode == 2, (name, proc.stderr)
        assert json.loads(proc.stderr)["code"] in {"malformed_receipt", "invalid_json"}, (name, proc.stderr)


def _cli_verify(path: Path) -> Any:
    import os
    import subprocess
    import sys

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kcp_opa",
            "receipt",
            "verify",
            "--action",
            str(ACTION_PATH),
            "--receipt",
            str(path),
            "--policy-version",
            "0.1.0",
            "--kid",
            "kya-1",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
        env={**os.environ, "KYA_RECEIPT_SECRET": SECRET.decode(), "KCP_OPA_DEBUG": ""},
    )


def test_receipt_ed25519_signature_must_be_canonical_base64url() -> None:
    key = generate_ed25519("ed-1")
    ring = Keyring({"ed-1": key})
    genuine = _issue(key)
    value = genuine["signature"]["value"]
    spare = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    flipped = value[:-1] + spare[spare.index(value[-1]) ^ 1]  # same 64 bytes, different spare bits
    for variant in (
        "0",
        value[:-2],
        value + "==",
        value + "!!",
        value + "A",
        " " + value,
        value + "\n",
        flipped,
        value.replace("-", "+"),
    ):
        if variant == value:
            continue
        forged = copy.deepcopy(genuine)
        forged["signature"]["value"] = variant
        with pytest.raises(ReceiptVerificationError) as caught:
            verify_receipt(forged, ACTION, keyring=ring, policy_versions={"0.1.0"}, nonce_store=None)
        assert caught.value.code == "bad_signature", repr(variant)
    assert verify_receipt(genuine, ACTION, keyring=ring, policy_versions={"0.1.0"}, nonce_store=None)


def test_receipt_hmac_signature_must_be_exact_lowercase_hex() -> None:
    key = hmac_key("kya-1", SECRET)
    ring = Keyring({"kya-1": key})
    genuine = _issue(key)
    value = genuine["signature"]["value"]
    for variant in (value.upper(), value + "00", value + "\n", " " + value, value[:-1]):
        forged = copy.deepcopy(genuine)
        forged["signature"]["value"] = variant
        with pytest.raises(ReceiptVerificationError) as caught:
            verify_receipt(forged, ACTION, keyring=ring, policy_versions={"0.1.0"}, nonce_store=None)
        assert caught.value.code == "bad_signature", repr(variant)
