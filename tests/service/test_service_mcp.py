"""The MCP server in-process, through the SDK's own client: the trust sequence and every refusal.

Each principal gets its own connection to one shared service (as over stdio, the caller is fixed
when the connection starts); nothing is mocked: the real bundle, regopy, SQLite and the ledger.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import REPO
from mcp import Client
from servicekit import (
    CONFIRM_ONLY,
    GATE_ISSUER,
    PRINCIPALS,
    SERVICE_ISSUER,
    compile_finance,
    local_context,
    open_local,
    served_context,
    write_registry,
)

from kcp_opa.authorize.attestations import verify_attestation
from kcp_opa.core.errors import CodedError
from kcp_opa.service.callers import LOCAL_AGENT, Principal
from kcp_opa.service.config import HostParts
from kcp_opa.service.desk import GateService
from kcp_opa.service.handlers import bound
from kcp_opa.service.issuing import bundle_approver_roles, registry_principal
from kcp_opa.service.mcpserver import build_server
from kcp_opa.service.tools import TOOL_NAMES
from kcp_opa.trail.ledger import read_entries, verify_ledger

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
SEVEN = TOOL_NAMES[:7]
PAID: list[dict[str, Any]] = []


def pay(action: dict[str, Any]) -> dict[str, Any]:
    """The registered handler: the side effect whose runs we count."""
    PAID.append(action)
    return {"payment_ref": f"PAY-{len(PAID):04d}"}


@pytest.fixture(scope="module")
def trusted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A bundle compiled with a registry built here, the registry and the service's issuer keyring."""
    work = tmp_path_factory.mktemp("service")
    registry, keys = write_registry(work)
    return compile_finance(work / "finance.tar.gz", registry), registry, keys


def open_service(trusted: tuple[Path, Path, Path], work: Path, *issuers: str) -> GateService:
    bundle, registry, keys = trusted
    return open_local(
        bundle,
        work,
        HostParts(handlers={"pay": bound(pay, "execute_payment")}),
        trust=registry,
        **served_context(registry),
        issuer_ids=issuers or (SERVICE_ISSUER, GATE_ISSUER),
        issuer_keyring=keys,
    )


@pytest.fixture
def service(trusted: tuple[Path, Path, Path], tmp_path: Path) -> GateService:
    return open_service(trusted, tmp_path)


def principals(service: GateService) -> dict[str, Principal]:
    """Every registered principal as the service's authenticator resolves it (kind and roles from the registry)."""
    assert service.registry is not None
    roles = bundle_approver_roles(service.gate.bundle)
    return {p["id"]: registry_principal(service.registry, p["id"], roles) for p in PRINCIPALS}


def cast(service: GateService) -> tuple[Principal, ...]:
    """subject, approver, clerk, provider, receipt issuer, executor, another executor."""
    who = principals(service)
    assert who["local-agent"] == LOCAL_AGENT
    ids = ["user_001", "treasury_approver_anna", "clerk_bob", "kyc-provider", "approval-desk", "payments-executor"]
    return (*(who[i] for i in ids), who["batch-executor"])


Call = Callable[[Principal, str, dict[str, Any]], Awaitable[tuple[bool, dict[str, Any]]]]


def run(service: GateService, scenario: Callable[[Call], Awaitable[None]]) -> None:
    """Run ``scenario`` with one SDK client per principal, all on the same service."""

    async def main() -> None:
        clients: dict[str, Client] = {}
        async with AsyncExitStack() as stack:

            async def call(principal: Principal, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
                if principal.id not in clients:
                    client = Client(build_server(service, lambda ctx, p=principal: p))
                    clients[principal.id] = await stack.enter_async_context(client)
                result = await clients[principal.id].call_tool(tool, args)
                assert isinstance(result.structured_content, dict)
                return result.is_error, result.structured_content

            await scenario(call)

    try:
        anyio.run(main)
    except BaseExceptionGroup as group:  # the SDK's task groups wrap a failed assertion: show it plainly
        raise _leaf(group) from None


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def refusals(service: GateService) -> list[dict[str, Any]]:
    assert service.ledger_path is not None
    return [e for _, e in read_entries(service.ledger_path) if e["type"] == "failure" and "tool" in e]


def test_tools_list_has_the_seven_in_the_seeds_order_then_two(service: GateService) -> None:
    async def main() -> None:
        async with Client(build_server(service, lambda ctx: LOCAL_AGENT)) as client:
            tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == list(TOOL_NAMES)
        assert [t.name for t in tools][:7] == list(SEVEN)
        assert all(t.input_schema["type"] == "object" and t.output_schema for t in tools)

    anyio.run(main)


def _challenges(opened: dict[str, Any]) -> dict[str, str]:
    return {c["control"]: c["challenge_id"] for c in opened["challenges"]}


def test_the_whole_trust_sequence_over_mcp(service: GateService) -> None:
    PAID.clear()
    SUBJECT, APPROVER, _, KYC, ISSUER, EXECUTOR, OTHER_EXECUTOR = cast(service)
    assert APPROVER.roles == {"subject", "approver", "treasury_approver"} and KYC.kind.value == "provider"

    async def scenario(call: Call) -> None:
        error, decision = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": KYA})
        assert not error and decision["decision"] == "HUMAN_APPROVAL"
        assert len(decision["required_controls"]) == 6
        error, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        assert not error
        ids = _challenges(opened)
        # standard_audit_logging is the ledger's: no challenge for it, five for the rest.
        assert sorted(ids) == sorted(set(decision["required_controls"]) - {"standard_audit_logging"})
        summary = opened["challenges"][0]["summary"]
        assert summary["amount"] == {"value_minor": 800000, "currency": "USD", "major": "8000.00"}
        assert summary["beneficiary"]["reference"] == "supplier_4821"
        assert "8000.00 USD to supplier_4821" in summary["consequence"]
        answers = [
            (SUBJECT, "user_confirmation"),
            (KYC, "identity_verification"),
            (KYC, "authority_verification"),
            (KYC, "beneficiary_verification"),
            (APPROVER, "independent_human_approval"),
        ]
        for principal, control in answers:
            error, answered = await call(
                principal,
                "record_control_result",
                {"challenge_id": ids[control], "status": "PASSED", "evidence_reference": f"ev:{control}"},
            )
            assert not error, answered
        assert answered["decision"]["authorization_status"] == "APPROVED"
        evidence = {e["control"]: e for e in answered["decision"]["control_evidence"]}
        assert evidence["independent_human_approval"]["actor_id"] == "treasury_approver_anna"
        assert evidence["independent_human_approval"]["actor_type"] == "human"
        assert evidence["user_confirmation"]["actor_type"] == "user"
        # Each answer is an attestation the service signed as its registered issuer; it verifies.
        assert service.registry is not None
        for item in answered["decision"]["control_evidence"]:
            signed = {k: v for k, v in item.items() if k != "actor_type"}
            assert item["issuer"] == (GATE_ISSUER if item["control"] == "standard_audit_logging" else SERVICE_ISSUER)
            assert verify_attestation(signed, service.registry, None).actor_id == item["actor_id"]
        error, issued = await call(ISSUER, "issue_delegation_receipt", {"decision_id": decision["decision_id"]})
        assert not error, issued
        receipt = issued["receipt"]
        assert receipt["approver_ids"] == ["treasury_approver_anna"]
        # The seed's order: verify and consume, then execute; the hand-off is the verifier's alone.
        error, verified = await call(EXECUTOR, "verify_and_consume_receipt", {"receipt": receipt, "action": KYA})
        assert not error and verified == {"verified": True, "consumed": True, "receipt_id": receipt["receipt_id"]}
        args = {"action": KYA, "receipt": receipt, "handler": "pay"}
        error, other = await call(OTHER_EXECUTOR, "execute_authorized_action", args)
        assert error and other["code"] == "replay"
        error, done = await call(EXECUTOR, "execute_authorized_action", args)
        assert not error and done["outcome"] == {"payment_ref": "PAY-0001"} and not done["replayed"]
        error, again = await call(EXECUTOR, "execute_authorized_action", args)
        assert error and again["code"] == "replay"
        error, again = await call(EXECUTOR, "verify_and_consume_receipt", {"receipt": receipt, "action": KYA})
        assert error and again["code"] == "replay"
        changed = {**KYA, "amount": {"value_minor": 8_000_000, "currency": "USD"}}
        error, mutated = await call(EXECUTOR, "execute_authorized_action", {**args, "action": changed})
        assert error and mutated["code"] == "action_mismatch"
        error, noted = await call(LOCAL_AGENT, "write_audit_event", {"event": "payment_reported", "detail": {"n": 1}})
        assert not error and noted["principal"] == "local-agent", noted

    run(service, scenario)
    assert len(PAID) == 1
    assert service.ledger_path is not None and verify_ledger(service.ledger_path).ok
    notes = [e for _, e in read_entries(service.ledger_path) if e["type"] == "note"]
    assert notes[0]["principal"]["id"] == "local-agent" and notes[0]["note"] == "payment_reported"


def test_the_local_agent_may_evaluate_hash_and_open_challenges_and_nothing_else(service: GateService) -> None:
    async def scenario(call: Call) -> None:
        error, hashed = await call(LOCAL_AGENT, "hash_action", {"action": KYA})
        assert not error and hashed["action_hash"].startswith("sha256:")
        error, decision = await call(LOCAL_AGENT, "evaluate_action", {"action": KYA})
        assert not error
        error, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        ids = _challenges(opened)
        refused = [
            (
                "record_control_result",
                {
                    "challenge_id": ids["independent_human_approval"],
                    "status": "PASSED",
                    "evidence_reference": "chat:looks-fine",
                },
            ),
            (
                "record_control_result",
                {"challenge_id": ids["identity_verification"], "status": "PASSED", "evidence_reference": "x"},
            ),
            ("issue_delegation_receipt", {"decision_id": decision["decision_id"]}),
            ("verify_and_consume_receipt", {"receipt": {}, "action": KYA}),
            ("execute_authorized_action", {"receipt": {}, "action": KYA, "handler": "pay"}),
        ]
        for tool, args in refused:
            error, answer = await call(LOCAL_AGENT, tool, args)
            assert error and answer["code"] == "not_authorized", (tool, answer)

    run(service, scenario)
    audited = refusals(service)
    assert [e["tool"] for e in audited] == [
        "record_control_result",
        "record_control_result",
        "issue_delegation_receipt",
        "verify_and_consume_receipt",
        "execute_authorized_action",
    ]
    assert all(e["code"] == "not_authorized" and e["principal"]["id"] == "local-agent" for e in audited)
    assert service.metrics.refusals.labels(code="not_authorized")._value.get() == 5


def test_challenges_answer_only_their_addressees_once_and_in_time(service: GateService) -> None:
    SUBJECT, APPROVER, CLERK, KYC, *_ = cast(service)

    async def scenario(call: Call) -> None:
        _, decision = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": KYA})
        _, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        ids = _challenges(opened)
        approval = {"challenge_id": ids["independent_human_approval"], "status": "PASSED", "evidence_reference": "a"}
        confirmation = {"challenge_id": ids["user_confirmation"], "status": "PASSED", "evidence_reference": "c"}
        # A human without the approver role, and an approver answering the subject's confirmation.
        error, answer = await call(CLERK, "record_control_result", approval)
        assert error and answer["code"] == "not_authorized"
        error, answer = await call(APPROVER, "record_control_result", confirmation)
        assert error and answer["code"] == "not_authorized"
        # A provider cannot answer a human control.
        error, answer = await call(KYC, "record_control_result", approval)
        assert error and answer["code"] == "not_authorized"
        # The subject, holding the approver role in the registry, approving its own payment: the policy refuses it.
        assert "approver" in SUBJECT.roles
        error, answer = await call(SUBJECT, "record_control_result", approval)
        assert error and answer["code"] == "self_approval"
        # The challenge was spent on that refused answer: one answer per challenge.
        error, answer = await call(APPROVER, "record_control_result", approval)
        assert error and answer["code"] == "challenge_used"
        # An expired challenge (opened 20 minutes ago with a 15-minute life).
        past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20)
        stale = service.challenges.open(
            decision_id=decision["decision_id"],
            action_hash=decision["action_hash"],
            control="independent_human_approval",
            addressed_to={"principals": [], "kinds": ["human"], "roles": ["treasury_approver"]},
            summary={},
            created_by="local-agent",
            now=past,
        )
        late = {"challenge_id": stale.challenge_id, "status": "PASSED", "evidence_reference": "late"}
        error, answer = await call(APPROVER, "record_control_result", late)
        assert error and answer["code"] == "challenge_expired"
        error, answer = await call(APPROVER, "record_control_result", {**late, "challenge_id": "chl_nope"})
        assert error and answer["code"] == "unknown_challenge"

    run(service, scenario)
    codes = [e["code"] for e in refusals(service)]
    assert codes == ["not_authorized"] * 3 + [
        "self_approval",
        "challenge_used",
        "challenge_expired",
        "unknown_challenge",
    ]


def test_an_unauthenticated_connection_is_refused_and_audited(service: GateService) -> None:
    async def main() -> None:
        async with Client(build_server(service, lambda ctx: None)) as client:
            result = await client.call_tool("hash_action", {"action": KYA})
        assert result.is_error and result.structured_content == {
            "error": "authentication required",
            "code": "unauthenticated",
        }

    anyio.run(main)
    assert [e["code"] for e in refusals(service)] == ["unauthenticated"]


def test_bad_actions_and_unknown_records_are_tool_errors_with_codes(service: GateService) -> None:
    async def scenario(call: Call) -> None:
        error, answer = await call(LOCAL_AGENT, "evaluate_action", {"action": {**KYA, "amount": {"value_minor": 1.5}}})
        assert error and answer["code"] == "action_rejected"
        error, answer = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": "dec_unknown"})
        assert error and answer["code"] == "unknown_decision"
        plain = {k: v for k, v in KYA.items() if k != "amount"}
        error, answer = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": plain})
        assert error and answer["code"] == "not_financial"
        _, decision = await call(LOCAL_AGENT, "evaluate_action", {"action": KYA})
        args = {"decision_id": decision["decision_id"], "ttl_seconds": "soon"}
        error, answer = await call(LOCAL_AGENT, "create_control_challenge", args)
        assert error and answer["code"] == "bad_arguments"

    run(service, scenario)
    assert [e["code"] for e in refusals(service)] == [
        "action_rejected",
        "unknown_decision",
        "not_financial",
        "bad_arguments",
    ]


def test_a_malformed_answer_does_not_spend_the_challenge_and_secrets_never_reach_the_ledger(
    service: GateService,
) -> None:
    APPROVER = cast(service)[1]

    async def scenario(call: Call) -> None:
        _, decision = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": KYA})
        _, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        challenge = _challenges(opened)["independent_human_approval"]
        error, answer = await call(
            APPROVER, "record_control_result", {"challenge_id": challenge, "status": "OK", "evidence_reference": "a"}
        )
        assert error and answer["code"] == "bad_arguments"  # outside the tool's input schema (PASSED|FAILED)
        error, answer = await call(
            APPROVER,
            "record_control_result",
            {"challenge_id": challenge, "status": "PASSED", "evidence_reference": "a"},
        )
        assert not error, answer
        error, answer = await call(
            LOCAL_AGENT, "write_audit_event", {"event": "login", "detail": {"user": {"access_token": "eyJ..."}}}
        )
        assert error and answer["code"] == "secret"

    run(service, scenario)
    assert service.ledger_path is not None
    assert "eyJ" not in service.ledger_path.read_text()


def test_an_answer_the_service_cannot_sign_is_refused_and_does_not_spend_the_challenge(
    trusted: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Signing only as an issuer allowed for user_confirmation: an approval is issuer_not_allowed."""
    service = open_service(trusted, tmp_path, CONFIRM_ONLY)
    SUBJECT, APPROVER, *_ = cast(service)

    async def scenario(call: Call) -> None:
        _, decision = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": KYA})
        _, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        ids = _challenges(opened)
        approval = {"challenge_id": ids["independent_human_approval"], "status": "PASSED", "evidence_reference": "a"}
        error, answer = await call(APPROVER, "record_control_result", approval)
        assert error and answer["code"] == "issuer_not_allowed", answer
        assert service.challenges.get(ids["independent_human_approval"]).state == "open"
        confirmation = {"challenge_id": ids["user_confirmation"], "status": "PASSED", "evidence_reference": "c"}
        error, answer = await call(SUBJECT, "record_control_result", confirmation)
        assert not error, answer
        (item,) = [e for e in answer["decision"]["control_evidence"] if e["control"] == "user_confirmation"]
        assert item["issuer"] == CONFIRM_ONLY and item["actor_id"] == "user_001"

    run(service, scenario)
    assert [e["code"] for e in refusals(service)] == ["issuer_not_allowed"]


def test_without_a_registry_decisions_and_challenges_work_and_every_control_result_is_refused(
    tmp_path: Path,
) -> None:
    bundle = compile_finance(tmp_path / "plain.tar.gz", None)
    context = local_context("user_001")
    service = open_local(bundle, tmp_path, HostParts(context=context))
    assert service.desk is None and service.status()["trust"] is None
    approver = Principal.of("treasury_approver_anna", "human", {"approver", "treasury_approver"})
    issuer = Principal.of("approval-desk", "system", {"issuer"})

    async def scenario(call: Call) -> None:
        error, decision = await call(LOCAL_AGENT, "evaluate_financial_action", {"action": KYA})
        assert not error and decision["decision"] == "HUMAN_APPROVAL" and len(decision["required_controls"]) == 6
        error, opened = await call(LOCAL_AGENT, "create_control_challenge", {"decision_id": decision["decision_id"]})
        assert not error
        approval = {
            "challenge_id": _challenges(opened)["independent_human_approval"],
            "status": "PASSED",
            "evidence_reference": "a",
        }
        error, answer = await call(approver, "record_control_result", approval)
        assert error and answer["code"] == "not_authorized" and "--trust" in answer["error"], answer
        error, answer = await call(issuer, "issue_delegation_receipt", {"decision_id": decision["decision_id"]})
        assert error and answer["code"] == "not_authorized" and "--trust" in answer["error"], answer

    run(service, scenario)
    assert [e["code"] for e in refusals(service)] == ["not_authorized", "not_authorized"]


def test_a_registry_the_bundle_was_not_compiled_with_is_refused(
    trusted: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, registry, keys = trusted
    plain = compile_finance(tmp_path / "plain.tar.gz", None)
    with pytest.raises(CodedError) as refused:
        open_service((plain, registry, keys), tmp_path)
    assert refused.value.code == "registry_mismatch"
    with pytest.raises(CodedError) as refused:
        open_service(trusted, tmp_path, "approval-app")
    assert refused.value.code == "issuer_config"
