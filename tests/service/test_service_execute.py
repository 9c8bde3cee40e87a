"""A handler whose result is not JSON the store can keep: a clear error and a FAILED execution.

Over the SDK's client, in-process: the side effect ran, so the execution ends ``failed`` (the
library executor's rule for a result it cannot record) with code ``result_not_json``, never
``bad_arguments`` with the claim left ``running``; a retry is ``already_failed``, not a second run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from servicekit import GATE_ISSUER, SERVICE_ISSUER, compile_finance, open_local, served_context, write_registry
from test_service_mcp import Call, cast, run

from kcp_opa.service.callers import LOCAL_AGENT
from kcp_opa.service.config import HostParts
from kcp_opa.service.handlers import bound

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
RAN: list[str] = []


def mixed_keys(action: dict[str, Any]) -> dict[Any, Any]:
    """json.dumps accepts it, but not with sort_keys (what the store writes): int and str keys."""
    RAN.append("mixed_keys")
    return {1: "one", "payment_ref": "PAY-0001"}


def not_json(action: dict[str, Any]) -> Any:
    RAN.append("not_json")
    return {"when": object()}


@pytest.mark.parametrize("handler", ["mixed_keys", "not_json"])
def test_a_result_that_cannot_be_recorded_fails_the_execution_clearly(tmp_path: Path, handler: str) -> None:
    RAN.clear()
    registry, keys = write_registry(tmp_path)
    handlers = {"mixed_keys": bound(mixed_keys, "execute_payment"), "not_json": bound(not_json, "execute_payment")}
    service = open_local(
        compile_finance(tmp_path / "finance.tar.gz", registry),
        tmp_path,
        HostParts(handlers=handlers),
        trust=registry,
        **served_context(registry),
        issuer_ids=(SERVICE_ISSUER, GATE_ISSUER),
        issuer_keyring=keys,
    )
    subject, approver, _, kyc, issuer, executor, _ = cast(service)
    answerers = {
        "user_confirmation": subject,
        "identity_verification": kyc,
        "authority_verification": kyc,
        "beneficiary_verification": kyc,
        "independent_human_approval": approver,
    }

    async def scenario(call: Call) -> None:
        _, decision = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": KYA})
        _, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        for challenge in opened["challenges"]:
            args = {"challenge_id": challenge["challenge_id"], "status": "PASSED", "evidence_reference": "ev:x"}
            error, answered = await call(answerers[challenge["control"]], "record_control_result", args)
            assert not error, answered
        _, issued = await call(issuer, "issue_delegation_receipt", {"decision_id": decision["decision_id"]})
        args = {"action": KYA, "receipt": issued["receipt"], "handler": handler}
        error, failed = await call(executor, "execute_authorized_action", args)
        assert error and failed["code"] == "result_not_json", failed
        assert "the side effect ran" in failed["error"]
        error, again = await call(executor, "execute_authorized_action", args)
        assert error and again["code"] in {"replay", "already_failed"}, again

    run(service, scenario)
    assert [handler] == RAN
    record = service.store.execution(str(KYA["idempotency_key"]))
    assert record is not None and record.state == "failed" and "not JSON" in str(record.error)
