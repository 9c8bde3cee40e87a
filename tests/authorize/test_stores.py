"""The store seam: who consumes a receipt is an argument of the executor, not ambient state.

A receipt that principal A verified and consumed (a hand-off) is executed by A once; B, a call
naming no consumer, and A a second time all get ``replay``. Real SQLite stores, a real receipt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, receipt_for

from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.core.errors import ReceiptVerificationError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.decide.action import action_hash
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.opening import open_stores

SECRET = b"store-seam-secret-0123456789abcdef"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


def _receipt() -> dict[str, Any]:
    decision = {
        "decision_id": "dec_seam_1",
        "action_hash": action_hash(ACTION),
        "decision": "ALLOW",
        "authorization_status": "APPROVED",
        "required_controls": [],
        "control_evidence": [],
        "policy_version": "0.1.0",
    }
    return receipt_for(decision, ACTION, hmac_key("kya-1", SECRET))


def test_a_hand_off_is_executed_once_by_the_consumer_it_names_only(tmp_path: Path) -> None:
    stores = open_stores(tmp_path / "service.db")
    keyring = Keyring({"kya-1": hmac_key("kya-1", SECRET)}, "kya-1")
    executor = Executor(keyring=keyring, policy_versions={"0.1.0"}, store=stores.executions, handoffs=stores.handoffs)
    receipt = _receipt()
    verify_receipt(receipt, ACTION, keyring=keyring, policy_versions={"0.1.0"}, nonce_store=stores.executions)
    stores.handoffs.hand_off(receipt["nonce"], receipt["receipt_id"], "agent:a")
    runs: list[str] = []

    def pay(action: Any) -> dict[str, str]:
        runs.append(str(action["idempotency_key"]))
        return {"payment_ref": "PAY-1"}

    for consumer in ("agent:b", None):
        with pytest.raises(ReceiptVerificationError) as caught:
            executor.execute_authorized_action(ACTION, receipt, pay, consumer=consumer)
        assert caught.value.code == "replay"
    done = executor.execute_authorized_action(ACTION, receipt, pay, consumer="agent:a")
    assert done.outcome == {"payment_ref": "PAY-1"} and not done.replayed
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(ACTION, receipt, pay, consumer="agent:a")
    assert caught.value.code == "replay" and runs == [ACTION["idempotency_key"]]
    # Without hand-offs the executor ignores the consumer: a consumed receipt is a replay for anyone.
    plain = Executor(keyring=keyring, policy_versions={"0.1.0"}, store=open_stores(tmp_path / "p.db").executions)
    other = _receipt()
    verify_receipt(other, ACTION, keyring=keyring, policy_versions={"0.1.0"}, nonce_store=plain.store)
    with pytest.raises(ReceiptVerificationError) as caught:
        plain.execute_authorized_action(ACTION, other, pay, consumer="agent:a")
    assert caught.value.code == "replay"
