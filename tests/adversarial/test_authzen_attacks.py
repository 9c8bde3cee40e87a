"""Attack class: asking the gate through AuthZEN 1.0 what the JSON API would refuse.

A gateway-style client (plain HTTP, tests/authzenkit.py) against a real ``kcp-opa serve``:
an AuthZEN subject that names another principal (another agent, a look-alike, another case,
another kind, or the same claim hidden in a batch item, in the context or in a duplicate key);
a context and subject properties that state the gate's own facts and controls; bodies that are
oversize or not strict JSON; a batch that mixes tenants or is too long; no credentials. Each is
refused (or decided on the gate's facts alone), audited, and nothing is decided for a principal
that did not authenticate.
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from authzenkit import AGENT, OTHER_AGENT, TOKENS, Served, ask, context, read_customer, refund, serve, subject

from kcp_opa.trail.ledger import read_entries

EVALUATION, EVALUATIONS = "/access/v1/evaluation", "/access/v1/evaluations"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve(tmp_path_factory.mktemp("authzen-attacks"))


def _entries(ledger: Path) -> list[dict[str, Any]]:
    return [e for _, e in read_entries(ledger)] if ledger.exists() else []


def _decided(ledger: Path) -> list[dict[str, Any]]:
    return [e for e in _entries(ledger) if e.get("type") == "decision"]


def _refusals(ledger: Path, code: str) -> list[dict[str, Any]]:
    return [e for e in _entries(ledger) if e.get("type") == "failure" and e.get("code") == code]


def _claiming(agent_id: str, kind: str = "agent") -> dict[str, Any]:
    request = read_customer()
    request["subject"]["id"], request["subject"]["type"] = agent_id, kind
    return request


@pytest.mark.parametrize(
    ("agent_id", "kind"),
    [
        (OTHER_AGENT, "agent"),  # another registered agent
        ("s\u0501-agent", "agent"),  # a Cyrillic komi de that looks like the caller's d
        ("SD-AGENT", "agent"),  # the caller's id in another case: budgets count the exact id
        (AGENT, "human"),  # the caller's id as another kind of principal
        ("treasury_approver_anna", "human"),  # a person whose approval counts
    ],
    ids=["other-agent", "look-alike", "other-case", "other-kind", "an-approver"],
)
def test_a_subject_that_claims_another_principal_is_refused_and_audited(
    served: Served, agent_id: str, kind: str
) -> None:
    decided, refused = len(_decided(served.ledger)), len(_refusals(served.ledger, "principal_mismatch"))
    answer = ask(served.url, EVALUATION, _claiming(agent_id, kind))
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "principal_mismatch" and f"subject.id {AGENT!r}" in answer.json()["error"]
    assert len(_decided(served.ledger)) == decided  # nothing decided for, nor recorded as, the claimed principal
    audited = _refusals(served.ledger, "principal_mismatch")[refused:]
    assert len(audited) == 1 and audited[0]["principal"]["id"] == AGENT  # attributed to who authenticated


def test_a_batch_item_that_claims_another_principal_is_false_and_the_rest_is_the_callers(served: Served) -> None:
    own = read_customer()
    body = {"evaluations": [own, _claiming(OTHER_AGENT), own]}
    refused = len(_refusals(served.ledger, "principal_mismatch"))
    answer = ask(served.url, EVALUATIONS, body)
    assert answer.status_code == 200, answer.text
    items = answer.json()["evaluations"]
    assert [item["decision"] for item in items] == [True, False, True]
    assert items[1]["context"]["error"] == {
        "status": 403,
        "code": "principal_mismatch",
        "message": items[1]["context"]["error"]["message"],
    }
    assert len(_refusals(served.ledger, "principal_mismatch")) - refused == 1
    ids = {item["context"]["decision_id"] for item in (items[0], items[2])}
    assert {e["agent_id"] for e in _decided(served.ledger) if e["decision_id"] in ids} == {AGENT}


def test_the_other_agent_cannot_ask_as_the_caller_either(served: Served) -> None:
    answer = ask(served.url, EVALUATION, read_customer(), who=OTHER_AGENT)
    assert answer.status_code == 403 and answer.json()["code"] == "principal_mismatch"


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("context", "agent_id"),
        ("context", "authenticated_principal"),
        ("subject.properties", "authenticated_principal"),
    ],
)
def test_the_acting_principal_can_be_stated_only_as_the_subject(served: Served, where: str, key: str) -> None:
    request = read_customer()
    holder = request["context"] if where == "context" else request["subject"]["properties"]
    holder[key] = OTHER_AGENT
    answer = ask(served.url, EVALUATION, request)
    assert answer.status_code == 400 and answer.json()["code"] == "authzen_request"
    assert f"{where}.{key} is not read there: state it at subject.id" in answer.json()["error"]


def test_a_duplicate_subject_key_is_refused_not_resolved(served: Served) -> None:
    """A lenient parser keeps the last ``subject``; a gateway that logged the first would be fooled."""
    request = read_customer()
    first = json.dumps(request["subject"])
    rest = json.dumps({k: v for k, v in request.items() if k != "subject"})[1:]
    other = json.dumps(subject(OTHER_AGENT))
    raw = f'{{"subject": {first}, "subject": {other}, {rest}'.encode()
    decided = len(_decided(served.ledger))
    answer = ask(served.url, EVALUATION, None, raw=raw)
    assert answer.status_code == 400 and answer.json()["code"] == "bad_request"
    assert "duplicate" in answer.json()["error"].lower()
    assert len(_decided(served.ledger)) == decided


def test_a_context_that_states_gate_facts_and_controls_stays_unvouched(served: Served) -> None:
    """The refund is held for a human; stating the facts and the controls that would clear it does not."""
    request = refund()
    request["subject"]["properties"]["actor_role"] = "finance_reviewer"  # the refund approver's role
    request["context"]["runtime"] |= {"risk_level": "low", "deployment_region": "EU", "evidence_status": "present"}
    request["context"] |= {
        "satisfied_controls": ["independent_human_approval", "user_confirmation"],
        "facts": {"actor_role": {"value": "finance_reviewer", "class": "gate", "source": "registry"}},
        "authorization_status": "APPROVED",
        "execution_allowed": True,
        "decision": "ALLOW",
    }
    answer = ask(served.url, EVALUATION, request).json()
    assert answer["decision"] is False and answer["context"]["routing_state"] == "HUMAN_APPROVAL"
    assert "independent_human_approval" in answer["context"]["missing_controls"]
    assert answer["context"]["ignored"] == [
        "context.authorization_status",
        "context.decision",
        "context.execution_allowed",
        "context.facts",
        "context.satisfied_controls",
    ]
    entry = next(e for e in _decided(served.ledger) if e["decision_id"] == answer["context"]["decision_id"])
    facts = entry["input"]["context"]["facts"]
    assert facts["actor_role"]["value"] == "support_agent" and facts["actor_role"]["source"] != "action"
    assert "context_conflict" in entry["result"]["reason_codes"]  # the stated role was compared, not used
    assert "independent_human_approval" not in entry["input"]["context"].get("satisfied_controls", [])


def test_an_agent_the_gate_knows_no_role_for_cannot_state_one(served: Served) -> None:
    """agent_payments_001 has no actor role in the registry: stating the sender's role for its
    send does not establish one; the send is held on the missing fact, with or without the claim."""
    request = {
        "subject": subject(OTHER_AGENT),
        "resource": {
            "type": "email",
            "id": "msg_2",
            "properties": {
                "knowledge": {"project": "support-desk", "unit": "outbound-email", "fields_read": ["email"]}
            },
        },
        "action": {"name": "email.send", "properties": {"action_type": "send"}},
        "context": context(),
    }
    del request["subject"]["properties"]["principal_scopes"]  # the support scope is not this agent's
    claimed = copy.deepcopy(request)
    claimed["subject"]["properties"]["actor_role"] = "support_agent"
    for body in (request, claimed):
        answer = ask(served.url, EVALUATION, body, who=OTHER_AGENT)
        assert answer.status_code == 200, answer.text
        decided = answer.json()
        assert decided["decision"] is False and decided["context"]["routing_state"] in {"DENY", "ESCALATE"}, decided
        assert "context_missing" in decided["context"]["reason_codes"]
        entry = next(e for e in _decided(served.ledger) if e["decision_id"] == decided["context"]["decision_id"])
        assert "actor_role" not in entry["input"]["context"]["facts"]  # a statement is never a gate fact


def test_an_oversize_body_is_refused_before_it_is_read_and_audited(served: Served) -> None:
    refused = len(_refusals(served.ledger, "bad_request"))
    request = read_customer()
    request["context"]["padding"] = "x" * (2 * 1024 * 1024 + 1)
    answer = ask(served.url, EVALUATION, request)
    assert answer.status_code == 400 and "over 2097152 bytes" in answer.json()["error"]
    # A declared length past the cap is refused on the header, before a byte of the body is read.
    host, port = served.url.removeprefix("http://").split(":")
    head = (
        f"POST {EVALUATIONS} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKENS[AGENT]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {10**12}\r\nConnection: close\r\n\r\n{{"
    )
    with socket.create_connection((host, int(port)), timeout=60) as raw:
        raw.sendall(head.encode())
        reply = b""
        while chunk := raw.recv(65536):
            reply += chunk
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400") and b"Content-Length" in body, reply[:300]
    assert len(_refusals(served.ledger, "bad_request")) - refused == 2


@pytest.mark.parametrize(
    "raw",
    [
        b'{"subject": {"type": "agent", "id": "sd-agent"}, "amount": NaN}',
        b'{"subject": {"type": "agent", "id": "sd-agent"}, "n": 1e309}',
        b'\xef\xbb\xbf{"subject": {"type": "agent", "id": "sd-agent"}}',
        '{"subject": {"type": "agent"}}'.encode("utf-16"),
        b'[{"subject": {"type": "agent", "id": "sd-agent"}}]',
    ],
    ids=["nan", "1e309", "bom", "utf-16", "not-an-object"],
)
def test_a_body_that_is_not_strict_json_is_refused_and_audited(served: Served, raw: bytes) -> None:
    refused = len(_refusals(served.ledger, "bad_request"))
    for path in (EVALUATION, EVALUATIONS):
        answer = ask(served.url, path, None, raw=raw)
        assert answer.status_code == 400 and answer.json()["code"] == "bad_request", answer.text
    assert len(_refusals(served.ledger, "bad_request")) - refused == 2


def test_a_batch_that_mixes_tenants_is_refused_whole_before_anything_is_decided(served: Served) -> None:
    own = read_customer()
    foreign = copy.deepcopy(own)
    foreign["context"]["tenant_id"] = "tenant_b"
    foreign["resource"]["properties"]["tenant_id"] = "tenant_b"
    decided, refused = len(_decided(served.ledger)), len(_refusals(served.ledger, "authzen_mixed_tenants"))
    for body in (
        {"evaluations": [own, foreign]},
        # the tenant as a default, overridden by one item's context
        {
            "subject": own["subject"],
            "context": own["context"],
            "evaluations": [own, {**foreign, "context": foreign["context"]}],
        },
    ):
        for semantic in ("execute_all", "permit_on_first_permit"):
            answer = ask(served.url, EVALUATIONS, {**body, "options": {"evaluations_semantic": semantic}})
            assert answer.status_code == 400, answer.text
            assert answer.json()["code"] == "authzen_mixed_tenants" and "tenant_a, tenant_b" in answer.json()["error"]
    assert len(_decided(served.ledger)) == decided
    assert len(_refusals(served.ledger, "authzen_mixed_tenants")) - refused == 4


def test_a_batch_longer_than_the_limit_or_with_an_unknown_semantic_is_refused(served: Served) -> None:
    own = read_customer()
    decided = len(_decided(served.ledger))
    too_long = ask(served.url, EVALUATIONS, {"evaluations": [own] * 65})
    assert too_long.status_code == 400 and "at most 64" in too_long.json()["error"]
    unknown = ask(served.url, EVALUATIONS, {"evaluations": [own], "options": {"evaluations_semantic": "first"}})
    assert unknown.status_code == 400 and "evaluations_semantic" in unknown.json()["error"]
    assert len(_decided(served.ledger)) == decided


def test_no_credentials_no_answer(served: Served) -> None:
    refused = len(_refusals(served.ledger, "unauthenticated"))
    body = json.dumps(read_customer()).encode()
    headers = {"Content-Type": "application/json", "X-Request-ID": "anon-1"}
    answers = [
        httpx2.post(f"{served.url}{EVALUATION}", content=body, headers=headers, timeout=60),
        httpx2.post(f"{served.url}{EVALUATIONS}", content=body, headers=headers, timeout=60),
        httpx2.get(f"{served.url}/.well-known/authzen-configuration", headers=headers, timeout=60),
        httpx2.post(f"{served.url}{EVALUATION}", content=body, headers={**headers, "Authorization": "Bearer nope"}),
    ]
    assert [a.status_code for a in answers] == [401] * 4
    assert all(a.headers["www-authenticate"] == "Bearer" and a.headers["x-request-id"] == "anon-1" for a in answers)
    assert len(_refusals(served.ledger, "unauthenticated")) - refused == 4


def test_a_principal_without_the_evaluate_scope_is_refused(served: Served) -> None:
    """An auditor may read, never ask the gate to decide: the same scope check as /v1/decisions."""
    request = _claiming("auditor_ada", "auditor")
    answer = ask(served.url, EVALUATION, request, who="auditor_ada")
    assert answer.status_code == 403 and answer.json()["code"] == "not_authorized", answer.text
    batch = ask(served.url, EVALUATIONS, {"evaluations": [request] * 8}, who="auditor_ada")
    refused = len(_refusals(served.ledger, "not_authorized"))
    assert batch.status_code == 403 and batch.json()["code"] == "not_authorized", batch.text  # one refusal
    again = ask(served.url, EVALUATIONS, {"evaluations": [request] * 8}, who="auditor_ada")
    assert again.status_code == 403 and len(_refusals(served.ledger, "not_authorized")) - refused == 1


def test_batch_defaults_do_not_multiply_the_body_into_the_ledger(served: Served) -> None:
    """A ~0.9 MB default context copied into 64 items was 64 decisions archived: 120 MB of ledger."""
    base = read_customer()
    stated = copy.deepcopy(base["context"])
    stated["attributes"] = {f"a{i}": ["x" * 1000] * 16 for i in range(56)}
    body = {"subject": base["subject"], "action": base["action"], "context": stated}
    body["evaluations"] = [{"resource": base["resource"]}] * 64
    before = served.ledger.stat().st_size if served.ledger.exists() else 0
    decided = len(_decided(served.ledger))
    answer = ask(served.url, EVALUATIONS, body)
    assert answer.status_code == 400 and answer.json()["code"] == "authzen_request", answer.text
    assert "defaults filled in" in answer.json()["error"]
    assert len(_decided(served.ledger)) == decided
    assert served.ledger.stat().st_size - before < 2**20  # the refusal, not 64 archived inputs


def test_a_batch_that_mixes_tenants_past_128_characters_is_refused(served: Served) -> None:
    first, second = read_customer(), read_customer()
    for request, tenant in ((first, "t" * 128 + "A"), (second, "t" * 128 + "B")):
        request["context"]["tenant_id"] = request["resource"]["properties"]["tenant_id"] = tenant
    decided = len(_decided(served.ledger))
    answer = ask(served.url, EVALUATIONS, {"evaluations": [first, second]})
    assert answer.status_code == 400 and answer.json()["code"] == "authzen_mixed_tenants", answer.text
    assert len(_decided(served.ledger)) == decided
