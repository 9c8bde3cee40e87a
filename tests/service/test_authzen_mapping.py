"""The AuthZEN mapping (kcp_opa/service/authzen.py) without a server: the table in docs/service.md,
both ways, the batch defaults, and the answer's context."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from typing import Any

import pytest
from authzenkit import AGENT, BASE, as_authzen, read_customer, refund
from conftest import REPO

from kcp_opa.service.authzen import (
    AuthZenRequestError,
    answer,
    evaluations_of,
    map_evaluation,
    one_tenant,
    stated_at,
)
from kcp_opa.service.callers import AccessDeniedError, Principal

CALLER = Principal.of(AGENT, "agent", ["agent"])
NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key, inner in value.items() for leaf in _leaves(inner, f"{path}/{key}")]
    if isinstance(value, list):
        return [leaf for index, inner in enumerate(value) for leaf in _leaves(inner, f"{path}/{index}")]
    return [(path, value)]


def _at(request: dict[str, Any], where: str) -> Any:
    value: Any = request
    for part in re.findall(r"[^.\[\]]+", where):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


@pytest.mark.parametrize("request_of", [read_customer, refund], ids=["read", "refund"])
def test_every_field_of_the_action_is_read_from_where_the_table_says(request_of: Any) -> None:
    """Each leaf of the mapped action, looked up in the request at stated_at(path), is that value."""
    request = request_of()
    request["context"] |= {"action_id": "act_map_1", "idempotency_key": "idem_map_00000001"}
    action = map_evaluation(CALLER, request, now=NOW).action
    assert action["schema_version"] == "2.0" and action["created_at"] == "2026-12-06T12:00:00Z"
    for path, value in _leaves(action):
        if path in {"/schema_version", "/created_at"}:
            continue
        assert _at(request, stated_at(path)) == value, (path, stated_at(path))


def test_the_table_in_service_md_names_each_mapped_field() -> None:
    text = (REPO / "docs" / "service.md").read_text("utf-8")
    table = text[text.index("| AuthZEN | action intent | rule |") :].split("\n\n")[0]
    request = refund()
    request["subject"]["properties"]["actor_role"] = "support_agent"
    action = map_evaluation(CALLER, request, now=NOW).action
    for field in set(action) - {"schema_version"}:
        assert re.search(rf"`{field}[`.]", table), field
    for key in action["authorization_context"]:
        assert f"`{key}`" in table or f"authorization_context.{key}`" in table, key
    for key in action["target"]:
        assert f"`target.{key}`" in table, key


def test_generated_ids_are_one_uuid_and_stated_ones_are_kept() -> None:
    action = map_evaluation(CALLER, read_customer()).action
    assert action["action_id"] == action["idempotency_key"]
    assert re.fullmatch(r"authzen-[0-9a-f]{32}", action["action_id"])
    assert map_evaluation(CALLER, read_customer()).action["action_id"] != action["action_id"]


def test_a_subject_that_is_not_the_caller_is_refused_before_anything_else() -> None:
    request = read_customer()
    request["subject"] = {"type": "agent", "id": "agent_payments_001"}  # and no properties at all
    with pytest.raises(AccessDeniedError) as refused:
        map_evaluation(CALLER, request)
    assert refused.value.code == "principal_mismatch"


def test_defaults_fill_an_evaluation_entity_by_entity_whole() -> None:
    base = read_customer()
    other = {"type": "customer_record", "id": "cust_10"}
    listed = evaluations_of({**base, "evaluations": [{}, {"resource": other}]}, 2**20)
    assert listed is not None
    items, semantic = listed
    assert semantic == "execute_all"
    assert items[0] == base and items[1]["resource"] == other and items[1]["subject"] == base["subject"]
    assert evaluations_of({**base, "evaluations": []}, 2**20) is None  # an empty list: one evaluation


def test_one_tenant_ignores_items_that_state_none_and_refuses_two() -> None:
    one_tenant([{"context": {"tenant_id": "tenant_a"}}, {}, {"context": {"tenant_id": "tenant_a"}}])
    with pytest.raises(AuthZenRequestError) as refused:
        one_tenant([{"context": {"tenant_id": "tenant_a"}}, {"context": {"tenant_id": "tenant_b"}}])
    assert refused.value.code == "authzen_mixed_tenants"


@pytest.mark.parametrize(
    ("state", "allowed", "enforced"),
    [("ALLOW", True, True), ("ALLOW", False, True), ("DENY", False, True), ("DENY", False, False)],
)
def test_the_answer_is_true_only_for_an_allow_that_may_execute(state: str, allowed: bool, enforced: bool) -> None:
    decision: dict[str, Any] = {
        "decision_id": "dec_1",
        "decision": state,
        "execution_allowed": allowed,
        "reason_codes": ["x"],
        "missing_controls": [],
        "obligations": ["audit"],
        "reasons": [{"message": "internal"}],
        "context_sources": {"actor_role": {}},
    }
    if not enforced:
        decision |= {"mode": "log_only", "enforced": False}
    got = answer(decision, ("context.time",))
    assert got["decision"] is (state == "ALLOW" and allowed)
    assert "reasons" not in got["context"] and "context_sources" not in got["context"]
    assert got["context"]["ignored"] == ["context.time"]
    assert ("mode" in got["context"]) is (not enforced)


@pytest.mark.parametrize(
    "owed", ["redact_content", {"redact_content": True}, None, 1], ids=["a string", "an object", "null", "a number"]
)
def test_obligations_that_are_not_a_list_make_the_answer_false(owed: object) -> None:
    """An ALLOW whose obligations cannot be read owes an unknown set: read as none (before), it
    answered ``true`` and a gateway would not redact what ``redact_content`` asks for."""
    decision = {"decision_id": "dec_1", "decision": "ALLOW", "execution_allowed": True, "obligations": owed}
    assert answer(decision)["decision"] is False
    assert answer(decision | {"obligations": ["audit"]})["decision"] is True
    assert answer({k: v for k, v in decision.items() if k != "obligations"})["decision"] is True  # none owed


@pytest.mark.parametrize("which", ["kya-payment", "support-desk-read"])
def test_an_action_asked_through_authzen_maps_back_to_itself(which: str) -> None:
    """as_authzen (the table forwards, as a gateway fills it) then map_evaluation: the same action,
    with the authenticated principal stated (the subject is the caller)."""
    if which == "kya-payment":
        action = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
    else:
        action = copy.deepcopy(BASE) | {"agent_id": AGENT}
    caller = Principal.of(action["agent_id"], "agent", ["agent"])
    mapped = map_evaluation(caller, as_authzen(action)).action
    expected = copy.deepcopy(action)
    expected["authorization_context"]["authenticated_principal"] = action["agent_id"]
    assert mapped == expected


def test_the_ignored_list_is_bounded() -> None:
    request = read_customer()
    request["context"] |= {f"k{index:03}" + "x" * 300: index for index in range(40)}
    ignored = map_evaluation(CALLER, request).ignored
    assert len(ignored) == 33 and ignored[-1] == "... and 8 more"
    assert all(len(key) <= 128 for key in ignored)
