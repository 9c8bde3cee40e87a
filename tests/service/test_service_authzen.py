"""The AuthZEN 1.0 API of `kcp-opa serve`, asked by a gateway-style client over plain HTTP.

A real server process (support-desk bundle, trust registry, tokens); the requests are written
from the AuthZEN 1.0 text and its certification scenario (tests/authzenkit.py). The answers:
allow, deny and hold as the spec's ``{"decision": bool, "context"}``; the batch endpoint's
defaults and its three semantics; the metadata document; ``X-Request-ID``; 400 for each missing
part; and each decision the same as ``POST /v1/decisions`` gives, kept, in the ledger and
replayed on OPA from its archived input.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from authzenkit import AGENT, TOKENS, Served, ask, read_customer, refund, serve
from conftest import REPO, opa_query

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.trail.ledger import read_entries

EVALUATION, EVALUATIONS = "/access/v1/evaluation", "/access/v1/evaluations"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve(tmp_path_factory.mktemp("authzen"))


def _decisions(ledger: Path) -> dict[str, dict[str, Any]]:
    if not ledger.exists():
        return {}
    return {e["decision_id"]: e for _, e in read_entries(ledger) if e.get("type") == "decision"}


def test_allow_deny_and_hold_are_the_specs_decisions(served: Served) -> None:
    allowed = ask(served.url, EVALUATION, read_customer(), request_id="bfe9eb29-ab87-4ca3-be83-a1d5d8305716")
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["content-type"].startswith("application/json")
    assert allowed.headers["x-request-id"] == "bfe9eb29-ab87-4ca3-be83-a1d5d8305716"  # echoed, as the spec says
    body = allowed.json()
    assert body["decision"] is True
    assert body["context"]["routing_state"] == "ALLOW" and body["context"]["missing_controls"] == []

    denied = ask(served.url, EVALUATION, read_customer(tenant="tenant_b"))
    assert denied.status_code == 200  # a deny is a 200 with decision false, never an HTTP error
    context = denied.json()["context"]
    assert denied.json()["decision"] is False and context["routing_state"] == "DENY"
    assert "tenant_boundary" in context["reason_codes"]

    held = ask(served.url, EVALUATION, refund())
    assert held.status_code == 200
    context = held.json()["context"]
    assert held.json()["decision"] is False and context["routing_state"] == "HUMAN_APPROVAL"
    assert "independent_human_approval" in context["missing_controls"]
    # The decision id starts the approval flow: the agent opens the challenges for it.
    opened = httpx2.post(
        f"{served.url}/v1/decisions/{context['decision_id']}/challenges",
        json={},
        headers={"Authorization": f"Bearer {TOKENS[AGENT]}"},
        timeout=60,
    )
    assert opened.status_code == 200, opened.text
    assert {c["control"] for c in opened.json()["challenges"]} >= {"independent_human_approval"}
    # The context says what a gateway needs, never the input, the facts or the evidence.
    for answer in (allowed, denied, held):
        assert set(answer.json()["context"]) <= {
            "decision_id",
            "routing_state",
            "reason_codes",
            "missing_controls",
            "obligations",
            "ignored",
        }


def test_an_authzen_decision_is_the_json_apis_decision_kept_in_the_ledger_and_replayed_on_opa(served: Served) -> None:
    answers = [ask(served.url, EVALUATION, request).json() for request in (read_customer(), refund())]
    archived = _decisions(served.ledger)
    bundle = read_bundle(served.bundle)
    for answer in answers:
        entry = archived[answer["context"]["decision_id"]]
        assert entry["agent_id"] == AGENT and entry["result"]["decision"] == answer["context"]["routing_state"]
        replayed = opa_query(bundle, "data.kcp.gate.decision", entry["input"])
        assert replayed == entry["result"]
        # The same action through POST /v1/decisions: the same decision.
        direct = httpx2.post(
            f"{served.url}/v1/decisions",
            json={"action": entry["input"]["action"]},
            headers={"Authorization": f"Bearer {TOKENS[AGENT]}"},
            timeout=60,
        ).json()
        assert (direct["decision"], direct["reason_codes"], direct["missing_controls"]) == (
            entry["result"]["decision"],
            entry["result"]["reason_codes"],
            entry["result"]["missing_controls"],
        )


def test_the_mapping_puts_each_part_where_the_table_says(served: Served) -> None:
    request = read_customer()
    request["context"] |= {"time": "1985-10-26T01:22-07:00", "action_id": "act_authzen_map_1"}
    request["context"]["idempotency_key"] = "idem_authzen_map_0001"
    request["subject"]["properties"]["department"] = "Sales"
    answer = ask(served.url, EVALUATION, request).json()
    assert answer["context"]["ignored"] == ["context.time", "subject.properties.department"]
    action = _decisions(served.ledger)[answer["context"]["decision_id"]]["input"]["action"]
    assert action["agent_id"] == AGENT and action["authorization_context"]["authenticated_principal"] == AGENT
    assert action["authorization_context"]["requested_by"] == "user_001"
    assert action["target"] == {"type": "customer_record", "reference": "cust_9", "tenant_id": "tenant_a"}
    assert action["knowledge"]["unit"] == "customer-records"
    assert (action["action_type"], action["requested_action"]) == ("read", "crm.get_customer")
    assert (action["tenant_id"], action["subject_id"], action["action_id"]) == (
        "tenant_a",
        "user_001",
        "act_authzen_map_1",
    )
    assert "time" not in action and "department" not in action["authorization_context"]


def test_the_batch_applies_defaults_and_the_three_semantics(served: Served) -> None:
    """The spec's example: one subject and action, three resources (allow, deny, allow)."""
    first = read_customer()
    other = read_customer(tenant="tenant_b")
    batch: dict[str, Any] = {
        "subject": first["subject"],
        "action": first["action"],
        "context": first["context"],
        "evaluations": [
            {"resource": first["resource"]},
            {"resource": other["resource"]},
            {"resource": first["resource"]},
        ],
    }

    def decided(semantic: str | None) -> list[bool]:
        body = copy.deepcopy(batch)
        if semantic is not None:
            body["options"] = {"evaluations_semantic": semantic}
        answer = ask(served.url, EVALUATIONS, body)
        assert answer.status_code == 200, answer.text
        assert "decision" not in answer.json()
        return [item["decision"] for item in answer.json()["evaluations"]]

    before = len(_decisions(served.ledger))
    assert decided(None) == [True, False, True]  # execute_all is the default
    assert decided("execute_all") == [True, False, True]
    assert decided("deny_on_first_deny") == [True, False]
    assert decided("permit_on_first_permit") == [True]
    assert len(_decisions(served.ledger)) - before == 3 + 3 + 2 + 1  # what was not evaluated was not decided


def test_a_batch_item_overrides_a_default_entity_whole(served: Served) -> None:
    """Certification 3.2.7: an empty evaluation inherits every default; a given entity replaces it whole."""
    request = read_customer()
    other = read_customer(tenant="tenant_b")["resource"]
    body = {**request, "evaluations": [{}, {"resource": other}]}
    answer = ask(served.url, EVALUATIONS, body).json()
    assert [item["decision"] for item in answer["evaluations"]] == [True, False]
    # Without evaluations the batch endpoint answers as the single one does.
    single = ask(served.url, EVALUATIONS, request).json()
    assert single["decision"] is True and "evaluations" not in single


def test_a_batch_item_that_cannot_be_decided_is_false_with_its_error(served: Served) -> None:
    """Certification 3.4.1: execute_all, the second evaluation missing its resource."""
    request = read_customer()
    body = {
        "subject": request["subject"],
        "action": request["action"],
        "context": request["context"],
        "options": {"evaluations_semantic": "execute_all"},
        "evaluations": [{"resource": request["resource"]}, {}],
    }
    answer = ask(served.url, EVALUATIONS, body)
    assert answer.status_code == 200
    items = answer.json()["evaluations"]
    assert [item["decision"] for item in items] == [True, False]
    assert (
        items[1]["context"]["error"]["status"] == 400
        and "resource is required" in items[1]["context"]["error"]["message"]
    )


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        (("subject",), "subject is required"),
        (("action",), "action is required"),
        (("resource",), "resource is required"),
        (("subject", "type"), "subject.type is required"),
        (("subject", "id"), "subject.id is required"),
        (("action", "name"), "action.name is required"),
        (("resource", "type"), "resource.type is required"),
        (("resource", "id"), "resource.id is required"),
        (("action", "properties", "action_type"), "action.properties.action_type is required"),
        (("context", "tenant_id"), "context.tenant_id is required"),
        (("context", "subject_id"), "context.subject_id is required"),
        (("subject", "properties", "agent_scope"), "subject.properties.agent_scope is required"),
    ],
)
def test_a_missing_part_is_a_400_naming_it(served: Served, drop: tuple[str, ...], named: str) -> None:
    request = read_customer()
    holder = request
    for key in drop[:-1]:
        holder = holder[key]
    del holder[drop[-1]]
    answer = ask(served.url, EVALUATION, request)
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["error"] and answer.json()["code"] == "authzen_request"


@pytest.mark.parametrize(
    "body",
    [
        {"subject": "alice", "action": {"name": "read"}, "resource": {"type": "record", "id": "record-1"}},
        {"subject": {"type": "agent", "id": AGENT}, "action": {"name": 123}, "resource": {"type": "r", "id": "1"}},
    ],
    ids=["subject-is-a-string", "action-name-is-a-number"],
)
def test_an_invalid_field_type_is_a_400(served: Served, body: dict[str, Any]) -> None:
    answer = ask(served.url, EVALUATION, body)
    assert answer.status_code == 400 and answer.json()["code"] == "authzen_request"


def test_transport_errors_are_400(served: Served) -> None:
    """Certification 2.4.3-2.4.5: not application/json, malformed, empty."""
    headers = {"Authorization": f"Bearer {TOKENS[AGENT]}", "Content-Type": "text/plain"}
    wrong_type = httpx2.post(f"{served.url}{EVALUATION}", content=b"{}", headers=headers, timeout=60)
    assert wrong_type.status_code == 400
    assert ask(served.url, EVALUATION, None, raw=b'{"subject": ').status_code == 400
    assert ask(served.url, EVALUATION, None, raw=b"").status_code == 400


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve(tmp_path_factory.mktemp("authzen-public"), extra=("--public-url", "https://pdp.example.test"))


def test_the_metadata_names_the_configured_public_url_whatever_host_the_request_names(behind_proxy: Served) -> None:
    """Behind a proxy the PDP's identifier is the origin the operator configures (`--public-url`),
    not whatever `Host` a request carries: a gateway compares it with the URL it was given."""
    headers = {"Authorization": f"Bearer {TOKENS[AGENT]}", "Host": "localhost:1"}
    document = httpx2.get(f"{behind_proxy.url}/.well-known/authzen-configuration", headers=headers, timeout=60).json()
    assert document["policy_decision_point"] == "https://pdp.example.test"
    assert document["access_evaluation_endpoint"] == f"https://pdp.example.test{EVALUATION}"


def test_a_public_url_that_is_not_an_origin_is_refused_in_one_line(tmp_path: Path) -> None:
    from kcp_opa.service.config import ServiceConfig, ServiceConfigError

    for bad in ("pdp.example.test", "https://pdp.example.test/path", "ftp://pdp.example.test", "https://a b"):
        with pytest.raises(ServiceConfigError, match="an origin such as"):
            ServiceConfig(tmp_path / "b.tar.gz", public_url=bad)


def test_the_metadata_document_names_both_endpoints(served: Served) -> None:
    headers = {"Authorization": f"Bearer {TOKENS[AGENT]}", "X-Request-ID": "meta-1"}
    answer = httpx2.get(f"{served.url}/.well-known/authzen-configuration", headers=headers, timeout=60)
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "meta-1"
    document = answer.json()
    assert document == {
        "policy_decision_point": served.url,
        "access_evaluation_endpoint": f"{served.url}{EVALUATION}",
        "access_evaluations_endpoint": f"{served.url}{EVALUATIONS}",
    }
    assert httpx2.get(f"{served.url}/.well-known/authzen-configuration", timeout=60).status_code == 401


def test_the_openapi_document_describes_the_authzen_routes(served: Served) -> None:
    paths = httpx2.get(f"{served.url}/v1/openapi.json", timeout=60).json()["paths"]
    assert set(paths[EVALUATION]) == {"post"} and set(paths[EVALUATIONS]) == {"post"}
    assert "get" in paths["/.well-known/authzen-configuration"]
    schema = paths[EVALUATION]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(schema["required"]) == {"subject", "resource", "action"}


def test_the_same_request_gets_the_same_decision(served: Served) -> None:
    """Certification 2.6: idempotency of the decision value."""
    assert [ask(served.url, EVALUATION, read_customer()).json()["decision"] for _ in range(3)] == [True] * 3


def test_the_worked_example_in_service_md_answers_as_shown(served: Served) -> None:
    """docs/service.md, "AuthZEN": the request block posted as written, the answer as printed."""
    text = (REPO / "docs" / "service.md").read_text("utf-8")
    section = text[text.index("## AuthZEN") :]
    request = re.search(r"```http\n(.*?)```", section, re.S)
    printed = re.search(r"```json\n(.*?)```", section, re.S)
    assert request is not None and printed is not None
    head, _, body = request.group(1).partition("\n\n")
    assert head.startswith(f"POST {EVALUATION} HTTP/1.1") and "X-Request-ID: 7f1c0e52-refund-78" in head
    answer = ask(served.url, EVALUATION, json.loads(body), request_id="7f1c0e52-refund-78")
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "7f1c0e52-refund-78"
    shown, got = json.loads(printed.group(1)), answer.json()
    del shown["context"]["decision_id"], got["context"]["decision_id"]
    assert got == shown


def test_a_value_the_action_contract_refuses_is_named_where_the_request_stated_it(served: Served) -> None:
    request = read_customer()
    request["context"]["attributes"] = {"discount": 0.5}
    answer = ask(served.url, EVALUATION, request)
    assert answer.status_code == 400 and answer.json()["code"] == "action_rejected"
    assert answer.json()["error"].startswith("context.attributes.discount: 0.5 is a float")
    request = read_customer()
    request["resource"]["properties"]["country"] = "x" * 100
    answer = ask(served.url, EVALUATION, request)
    assert answer.status_code == 400 and answer.json()["error"].startswith("resource.properties.country:")


def test_the_single_endpoint_says_it_did_not_read_a_batch(served: Served) -> None:
    request = {**read_customer(), "evaluations": [{"resource": {"type": "customer_record", "id": "cust_10"}}]}
    answer = ask(served.url, EVALUATION, request).json()
    assert answer["decision"] is True and answer["context"]["ignored"] == ["evaluations"]


def test_the_interop_gateway_payload_is_refused_saying_what_the_gate_needs(served: Served) -> None:
    """The AuthZEN API-gateway interop payload (GET /todos, a route resource, an empty context) asks
    about an ``identity`` the gate cannot vouch for and lacks what an action intent needs: it is
    refused with the part to fix, never guessed into a decision."""
    interop = {
        "subject": {"type": "identity", "id": "CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs"},
        "action": {"name": "GET"},
        "resource": {"type": "route", "id": "/todos"},
        "context": {},
    }
    decided = len(_decisions(served.ledger))
    as_sent = ask(served.url, EVALUATION, interop)
    assert as_sent.status_code == 403 and f"state subject.type 'agent' and subject.id {AGENT!r}" in as_sent.text
    as_caller = ask(served.url, EVALUATION, {**interop, "subject": {"type": "agent", "id": AGENT}})
    assert as_caller.status_code == 400 and "action.properties.action_type is required" in as_caller.text
    assert len(_decisions(served.ledger)) == decided


def test_additional_properties_and_unknown_fields_are_accepted_and_listed(served: Served) -> None:
    """Certification 2.2.8 and 2.2.9: extra properties on each entity and unknown top-level fields."""
    request: dict[str, Any] = {**read_customer(), "foo": "bar", "futureField": {"nested": True}}
    request["subject"]["properties"] |= {"department": "Sales", "role": "manager"}
    request["action"]["properties"]["method"] = "GET"
    request["resource"]["properties"] |= {"status": "active", "owner": "bob"}
    answer = ask(served.url, EVALUATION, request)
    assert answer.status_code == 200 and answer.json()["decision"] is True, answer.text
    assert answer.json()["context"]["ignored"] == [
        "action.properties.method",
        "foo",
        "futureField",
        "resource.properties.owner",
        "resource.properties.status",
        "subject.properties.department",
        "subject.properties.role",
    ]
