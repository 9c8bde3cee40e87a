"""The control-evidence verdict on both engines with real input, no `with` mocks.

policies/kcp/controls/evidence_opa_test.rego pins these verdicts on OPA only: under
`with input.prior as ...` regopy leaves them undefined, which is the mock's doing. Here the same
documents go in as the input and data they are in production, and regopy must answer exactly
what OPA answers, and what the policy says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import regopy
from conftest import POLICIES
from opa_bindings import OpaEngine

SOURCE = (POLICIES / "kcp" / "controls" / "evidence.rego").read_text(encoding="utf-8")
DATA = {
    "kcp_data": {
        "trust": {
            "principals": {
                "user_001": {"type": "human", "roles": ["customer"]},
                "treasury_approver_anna": {"type": "human", "roles": ["treasury_approver"]},
                "kyc-provider": {"type": "provider", "roles": []},
            },
            "issuers": {
                "approval-app": {"type": "approval_app", "controls": ["independent_human_approval"]},
                "bank-idp": {"type": "identity_provider", "controls": ["identity_verification"]},
            },
            "separation_of_duties": [],
        }
    }
}


def _input(control: str, actor: str, prior: list[dict[str, str]], status: str = "PASSED") -> dict[str, Any]:
    return {
        "evidence": {"control": control, "status": status, "actor_id": actor},
        "issuer": "approval-app" if control == "independent_human_approval" else "bank-idp",
        "prior": prior,
        "subject": "user_001",
        "parties": ["user_001"],
        "required_controls": ["independent_human_approval", "identity_verification"],
        "approver_roles": ["treasury_approver"],
    }


_APPROVAL = ("independent_human_approval", "treasury_approver_anna")
CASES = {
    "unreadable status": (
        _input("identity_verification", "kyc-provider", [], status="OK"),
        {"accepted": False, "code": "evidence_unreadable", "message": "the evidence could not be judged"},
    ),
    "satisfied without the failed": (
        _input(
            *_APPROVAL,
            [
                {"control": "identity_verification", "status": "PASSED"},
                {"control": "user_confirmation", "status": "FAILED"},
            ],
        ),
        {"accepted": True, "actor_type": "human", "satisfied": ["identity_verification", "independent_human_approval"]},
    ),
    "a result that is neither passed nor failed": (
        _input(*_APPROVAL, [{"control": "identity_verification", "status": "PENDING"}]),
        {"accepted": True, "actor_type": "human", "satisfied": ["independent_human_approval"]},
    ),
    "failed after passed": (
        _input(
            *_APPROVAL,
            [
                {"control": "identity_verification", "status": "PASSED"},
                {"control": "identity_verification", "status": "FAILED"},
            ],
        ),
        {"accepted": True, "actor_type": "human", "satisfied": ["independent_human_approval"]},
    ),
}


@pytest.fixture(scope="module")
def engines() -> Any:
    interpreter = regopy.Interpreter()
    interpreter.add_module("evidence.rego", SOURCE)
    interpreter.add_data_json(json.dumps(DATA))
    opa = OpaEngine()
    opa.add_policy("evidence.rego", SOURCE)
    opa.add_data(DATA)
    yield interpreter, opa
    opa.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_engines_give_the_policys_verdict(engines: Any, name: str) -> None:
    interpreter, opa = engines
    document, expected = CASES[name]
    interpreter.set_input_term(json.dumps(document))
    answer = json.loads(str(interpreter.query("x := data.kcp.controls.verdict")))
    assert answer["bindings"]["x"] == expected
    assert opa.eval_document("kcp.controls.verdict", document) == expected
