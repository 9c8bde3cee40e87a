"""/v1/openapi.json documents every status each route answers, against `kcp-opa serve` as a real process.

Each operation has a unique operationId; real refusals are driven on every route (no token, a
foreign Host, a malformed body, a missing scope, an unknown id, a reused challenge or receipt, a
refused argument, AuthZEN's request errors) and each status observed must be one the route's
operation documents, so the document cannot drift from the code. A 503 needs the database down
and is covered by the PostgreSQL outage tests; here the table it comes from is checked.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import uikit
from uikit import ANSWERS, _action, _pending_payment

from kcp_opa.service.openapi import openapi_document, routes
from kcp_opa.service.refusals import AUTHZEN_STATUS, STATUS
from kcp_opa.service.tools import CATALOG

server = uikit.server  # the module-scoped fixture: the reference registry, tokens, a payment handler

Observed = list[tuple[str, str, int, str]]  # (path template, method, status, code)


def undocumented(document: dict[str, Any], observed: Observed) -> list[str]:
    """Each observed (route, status) the route's operation does not list among its responses."""
    missing = []
    for path, method, status, code in observed:
        responses = document["paths"][path][method]["responses"]
        if str(status) not in responses:
            missing.append(f"{method.upper()} {path} answered {status} ({code}), not documented")
    return missing


def _concrete(path: str) -> str:
    return re.sub(r"\{[a-z_]+\}", "nope", path)


@pytest.fixture(scope="module")
def observed(server: dict[str, Any]) -> Iterator[Observed]:
    seen: Observed = []

    def call(party: str | None, method: str, path: str, template: str | None = None, **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", {}))
        if party is not None:
            headers["Authorization"] = f"Bearer {server['tokens'][party]}"
        answer = httpx2.request(method, f"{server['url']}{path}", headers=headers, timeout=60, **kwargs)
        code = (
            answer.json().get("code", "")
            if answer.headers.get("content-type", "").startswith("application/json")
            else ""
        )
        seen.append((template or path, method.lower(), answer.status_code, str(code)))
        return answer

    for path, method in routes(CATALOG):
        concrete = _concrete(path)
        call(None, method, concrete, path)  # no token: 401 (the document itself is open: 200)
        call(None, method, concrete, path, headers={"Host": "evil.example:80"})  # 421 on a loopback listener
        if method == "post":  # not strict JSON (a duplicate key): 400
            json_type = {"Content-Type": "application/json"}
            call("agent", method, concrete, path, content=b'{"a": 1, "a": 2}', headers=json_type)
        call("auditor", method, concrete, path, json={})  # reads, decides nothing: 403 or the route's refusal
    action = _action("openapi")
    call("auditor", "post", "/v1/decisions", json={"action": action})  # 403 scope_not_granted
    call("auditor", "get", "/v1/challenges?addressed_to=me", "/v1/challenges")  # 403: it answers nothing
    call("auditor", "post", "/v1/data/kcp/gate/decision", json={"input": action})  # 403
    decision_id, ids = _pending_payment(server, action)
    call("approver", "get", "/v1/challenges?addressed_to=me", "/v1/challenges")  # 200
    control = next(iter(ANSWERS))
    again = {"status": "PASSED", "evidence_reference": "again"}
    result = "/v1/challenges/{challenge_id}/result"
    call(ANSWERS[control], "post", f"/v1/challenges/{ids[control]}/result", result, json=again)  # 409 challenge_used
    opened = "/v1/decisions/{decision_id}/challenges"
    call("agent", "post", "/v1/decisions/dec_nope/challenges", opened, json={})  # 404 unknown_decision
    call("agent", "post", f"/v1/decisions/{decision_id}/challenges", opened, json={"ttl_seconds": 5000})  # 422
    call("auditor", "get", "/v1/challenges/nope", "/v1/challenges/{challenge_id}")  # 404 unknown_challenge
    call("approver", "get", "/v1/challenges?addressed_to=everyone", "/v1/challenges")  # 400
    call("agent", "post", "/v1/decisions", json={"action": {"nope": 1}})  # 400 action_rejected
    call("agent", "post", "/v1/data/kcp/gate/decision", json={"not_input": 1})  # 400
    call("issuer", "post", "/v1/receipts", json={"decision_id": decision_id})  # 422: controls are missing
    run = {"action": action, "receipt": {"decision_id": decision_id}, "handler": "nope"}
    call("executor", "post", "/v1/executions", json=run)  # 404 unknown_handler
    approval = {"status": "PASSED", "evidence_reference": "call:anna"}
    answered = f"/v1/challenges/{ids['independent_human_approval']}/result"
    assert call("approver", "post", answered, result, json=approval).status_code == 200
    receipt = call("issuer", "post", "/v1/receipts", json={"decision_id": decision_id}).json()["receipt"]
    verify = {"receipt": receipt, "action": action}
    assert call("executor", "post", "/v1/receipts/verify", json=verify).status_code == 200
    call("executor", "post", "/v1/receipts/verify", json=verify)  # 409 replay
    evaluation = {"Content-Type": "application/json"}
    call("agent", "post", "/access/v1/evaluation", content=b"{}", headers=evaluation)  # 400 authzen_request
    call("agent", "post", "/access/v1/evaluation", content=b"{}", headers={"Content-Type": "text/plain"})  # 400
    call("agent", "post", "/access/v1/evaluations", content=b'{"evaluations": 7}', headers=evaluation)  # 400
    yield seen


def test_every_operation_has_a_unique_operation_id() -> None:
    document = openapi_document(CATALOG)
    named = [op.get("operationId") for methods in document["paths"].values() for op in methods.values()]
    assert all(isinstance(name, str) and name for name in named)
    assert len(set(named)) == len(named) == len(routes(CATALOG))
    refused = [op["responses"] for methods in document["paths"].values() for op in methods.values()]
    assert not any("default" in responses for responses in refused)  # each status named, none left to "default"


def test_every_status_a_route_answers_is_documented(server: dict[str, Any], observed: Observed) -> None:
    document = httpx2.get(f"{server['url']}/v1/openapi.json", timeout=60).json()
    statuses = {status for *_, status, _ in observed}
    assert {200, 400, 401, 403, 404, 409, 421, 422} <= statuses, statuses  # the drive reaches each kind
    assert {path for path, *_ in observed} == {path for path, _ in routes(CATALOG)}
    assert undocumented(document, observed) == []


def test_a_status_missing_from_the_document_is_caught(server: dict[str, Any], observed: Observed) -> None:
    """The check above can fail: each observed status, taken out of its operation, is reported."""
    document = httpx2.get(f"{server['url']}/v1/openapi.json", timeout=60).json()
    for path, method, status, code in {(p, m, s, "") for p, m, s, _ in observed}:
        stripped = copy.deepcopy(document)
        del stripped["paths"][path][method]["responses"][str(status)]
        assert undocumented(stripped, [(path, method, status, code)]) != [], (path, method, status)


def test_each_documented_refusal_names_the_error_schema_and_its_codes() -> None:
    document = openapi_document(CATALOG)
    execution = document["paths"]["/v1/executions"]["post"]["responses"]
    assert {"400", "401", "403", "404", "409", "421", "422", "500", "503"} <= set(execution)
    assert "unknown_handler" in execution["404"]["description"] and "replay" in execution["409"]["description"]
    schema = execution["409"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["error", "code"]
    status = document["paths"]["/v1/status"]["get"]["responses"]
    assert set(status) == {"200", "401", "421"}  # no body, no scope: only the edge and authentication refuse
    assert set(document["paths"]["/v1/openapi.json"]["get"]["responses"]) == {"200", "421"}
    authzen = document["paths"]["/access/v1/evaluation"]["post"]["responses"]
    assert "500" in authzen and AUTHZEN_STATUS["internal_error"] == 500 and "internal_error" not in STATUS


def test_a_tool_whose_operation_id_clashes_refuses_to_build_the_app() -> None:
    """A host's tool named like a fixed route's operationId: the app refuses to start, naming it."""
    import dataclasses

    from kcp_opa.core.errors import CodedError
    from kcp_opa.service.catalog import Route
    from kcp_opa.service.http import build_app

    base = CATALOG.get("evaluate_action")
    assert base is not None
    clash = dataclasses.replace(base, name="service_status", route=Route("/v1/clash", "a host's tool"))
    with pytest.raises(CodedError, match="operationIds repeat in the OpenAPI document: service_status ") as refused:
        build_app(None, None, catalog=CATALOG.with_tool(clash))  # type: ignore[arg-type]
    assert refused.value.code == "tool_catalog"
