"""Attacks on ``POST /v1/facts``: a fact reaches a decision only when its registered issuer signed
it, posted it itself, for the fact the registry lists it for, bound to that action or subject,
before its expiry. Everything else is refused with a code naming why and never kept; a row
written into the store behind the route's back is judged again by every decision and never counts.

Run against a real `kcp-opa serve` (SQLite store). Each refusal is checked twice: the answer, and
that the next decision of the action is still ``context_missing`` (nothing was kept).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import yaml
from conftest import REPO
from servicekit import FACT_ISSUER, SUBJECT_FACTS, start_server, stop_server, write_tokens

from kcp_opa.context import sign_fact
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.signing import Key, Keyring, generate_ed25519, load_keyring
from kcp_opa.decide.action import action_hash

AGENT, ISSUER, KYC = "t-agent-" + "a" * 32, "t-issuer-" + "i" * 32, "t-kyc-" + "k" * 32
SCREENER, ROGUE = "t-screen-" + "s" * 32, "t-rogue-" + "r" * 32
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
STAMP = "%Y-%m-%dT%H:%M:%SZ"
SCREENING_ONLY = "screening-desk"  # a registered issuer listed for screening_uncertain only


def _issuer(issuer_id: str, key: Key, facts: list[str]) -> dict[str, Any]:
    public = Keyring({key.kid: key}, key.kid).to_file_dict(include_private=False)["keys"][0]["public_key"]
    return {"id": issuer_id, "type": "provider", "controls": [], "facts": facts, "keys": [
        {"kid": key.kid, "alg": "Ed25519", "public_key": public}]}  # fmt: skip


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from servicekit import GATE_ISSUER, SERVICE_ISSUER, compile_finance, write_receipt_keyring, write_registry

    work = tmp_path_factory.mktemp("posted-fact-attacks")
    registry, keys = write_registry(work)
    (work / "attestations.json").unlink()  # every fact arrives through the route
    screener, rogue = generate_ed25519("screening-desk-ed25519"), generate_ed25519("agent-rogue-ed25519")
    data = yaml.safe_load(registry.read_text())
    data["principals"] += [{"id": FACT_ISSUER, "type": "provider"}, {"id": SCREENING_ONLY, "type": "provider"}]
    # An agent the registry also lists as a fact issuer: it still may not vouch for facts itself.
    data["issuers"] += [
        _issuer(SCREENING_ONLY, screener, ["screening_uncertain"]),
        _issuer("agent_rogue_002", rogue, ["new_beneficiary"]),
    ]
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(
        work,
        {AGENT: "agent_payments_001", ISSUER: FACT_ISSUER, KYC: "kyc-provider", SCREENER: SCREENING_ONLY,
         ROGUE: "agent_rogue_002"},
    )  # fmt: skip
    args = ["--bundle", str(bundle), "--trust", str(registry), "--tokens", str(tokens), "--region", "EU"]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(keys)]
    args += ["--keyring", str(write_receipt_keyring(work)), "--store", str(work / "service.db")]
    process, url = start_server([*args, "--ledger", str(work / "service.jsonl")])
    try:
        key = load_keyring(keys).keys[f"{FACT_ISSUER}-ed25519"]
        yield {"url": url, "key": key, "screener": screener, "rogue": rogue, "work": work}
    finally:
        stop_server(process)


def signed(
    key: Key,
    fact: str,
    value: Any,
    *,
    issuer: str = FACT_ISSUER,
    expires_in: float = 3600,
    issued_in: float = -7200,
    **bound: Any,
) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    times = {
        "issued_at": (now + dt.timedelta(seconds=issued_in)).strftime(STAMP),
        "expires_at": (now + dt.timedelta(seconds=expires_in)).strftime(STAMP),
    }
    return sign_fact({"fact": fact, "value": value, **bound, **times}, issuer, key)


def payment(n: int) -> dict[str, Any]:
    return {**ACTION, "action_id": f"act_attack_{n}", "idempotency_key": f"idem_fact_attack_{n:04d}"}


def post(gate: dict[str, Any], token: str | None, body: Any) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.post(f"{gate['url']}/v1/facts", json=body, headers=headers, timeout=60)


def refused(gate: dict[str, Any], token: str | None, body: Any, status: int, code: str) -> None:
    response = post(gate, token, body)
    assert (response.status_code, response.json().get("code")) == (status, code), response.text


def still_missing(gate: dict[str, Any], action: dict[str, Any]) -> None:
    """The action's next decision did not get the fact: context_missing, as before any post."""
    response = httpx2.post(
        f"{gate['url']}/v1/decisions", json={"action": action}, headers={"Authorization": f"Bearer {AGENT}"}, timeout=60
    )
    decision = response.json()
    assert decision["decision"] == "ESCALATE" and "context_missing" in decision["reason_codes"], decision


def all_facts(key: Key, **bound: Any) -> list[dict[str, Any]]:
    return [signed(key, fact, value, **bound) for fact, value in SUBJECT_FACTS.items()]


def test_a_forged_signature_is_refused_and_never_kept(gate: dict[str, Any]) -> None:
    action = payment(1)
    forger = generate_ed25519(f"{FACT_ISSUER}-ed25519")  # the issuer's kid, another key
    for item in all_facts(forger, action_hash=action_hash(action)):
        refused(gate, ISSUER, item, 422, "fact_signature_invalid")
    still_missing(gate, action)


def test_a_fact_rebound_to_another_action_breaks_its_signature(gate: dict[str, Any]) -> None:
    first, second = payment(2), payment(3)
    for item in all_facts(gate["key"], action_hash=action_hash(first)):
        refused(gate, ISSUER, {**item, "action_hash": action_hash(second)}, 422, "fact_signature_invalid")
    still_missing(gate, second)


def test_a_fact_for_one_payment_never_counts_for_another(gate: dict[str, Any]) -> None:
    first, second = payment(4), payment(5)
    for item in all_facts(gate["key"], action_hash=action_hash(first)):
        assert post(gate, ISSUER, item).status_code == 200
    still_missing(gate, second)  # the replayed facts are bound to the first payment's hash


def test_an_expired_fact_is_refused(gate: dict[str, Any]) -> None:
    action = payment(6)
    for fact, value in SUBJECT_FACTS.items():
        item = signed(gate["key"], fact, value, expires_in=-60, action_hash=action_hash(action))
        refused(gate, ISSUER, item, 422, "fact_expired")
    still_missing(gate, action)


def test_a_fact_dated_in_the_future_is_refused(gate: dict[str, Any]) -> None:
    """The newest fact speaks: one dated years ahead would outrank every later correction and crowd
    the read window; an issuer's clock may run at most five minutes ahead."""
    action = payment(16)
    for fact, value in SUBJECT_FACTS.items():
        item = signed(gate["key"], fact, value, issued_in=86400 * 365, expires_in=86400 * 400,
                      action_hash=action_hash(action))  # fmt: skip
        refused(gate, ISSUER, item, 422, "fact_not_yet_valid")
    still_missing(gate, action)


def test_an_issuer_posts_only_what_it_signed_itself(gate: dict[str, Any]) -> None:
    action = payment(7)
    facts = all_facts(gate["key"], action_hash=action_hash(action))
    for item in facts:  # the screening desk relays the fact issuer's own, validly signed facts
        refused(gate, SCREENER, item, 403, "fact_issuer_mismatch")
    still_missing(gate, action)


def test_an_issuer_posts_only_the_facts_the_registry_lists_it_for(gate: dict[str, Any]) -> None:
    action = payment(8)
    item = signed(gate["screener"], "new_beneficiary", True, issuer=SCREENING_ONLY, action_hash=action_hash(action))
    refused(gate, SCREENER, item, 403, "fact_issuer_not_allowed")


def test_callers_without_the_facts_scope_are_refused(gate: dict[str, Any]) -> None:
    action = payment(9)
    facts = all_facts(gate["key"], action_hash=action_hash(action))
    refused(gate, None, facts[0], 401, "unauthenticated")
    refused(gate, AGENT, facts[0], 403, "not_authorized")  # the agent whose payment it is
    refused(gate, KYC, facts[0], 403, "not_authorized")  # a provider that is no fact issuer
    # An agent the registry lists as a fact issuer still may not vouch for facts itself.
    own = signed(gate["rogue"], "new_beneficiary", False, issuer="agent_rogue_002", action_hash=action_hash(action))
    refused(gate, ROGUE, own, 403, "not_authorized")
    still_missing(gate, action)


def test_an_unbound_or_doubly_bound_fact_is_refused(gate: dict[str, Any]) -> None:
    action = payment(10)
    refused(gate, ISSUER, signed(gate["key"], "new_beneficiary", True), 400, "fact_unbound")
    both = signed(gate["key"], "new_beneficiary", True, action_hash=action_hash(action), subject_id="user_001")
    refused(gate, ISSUER, both, 400, "fact_unbound")
    refused(gate, ISSUER, {"fact": "new_beneficiary"}, 400, "fact_malformed")


def test_a_row_written_into_the_store_without_the_issuers_key_never_counts(gate: dict[str, Any]) -> None:
    action = payment(11)
    forger = generate_ed25519(f"{FACT_ISSUER}-ed25519")
    with sqlite3.connect(gate["work"] / "service.db") as db:
        for item in all_facts(forger, action_hash=action_hash(action)):
            db.execute(
                "INSERT INTO posted_facts (fact_id, issuer, fact, action_hash, subject_id, issued_at, expires_at,"
                " document, posted_at, expires_epoch) VALUES (?, ?, ?, ?, NULL, ?, ?, ?, '2026-01-01T00:00:00Z',"
                " 4102444800)",
                (canonical_hash(item), FACT_ISSUER, item["fact"], item["action_hash"], item["issued_at"],
                 item["expires_at"], json.dumps(item)),
            )  # fmt: skip
    still_missing(gate, action)


def test_a_subject_fact_bound_to_a_tenant_never_counts_for_the_same_subject_in_another(
    gate: dict[str, Any],
) -> None:
    """A subject id one tenant uses may be another person in the next: a fact the issuer bound to
    tenant_other's user never counts for tenant_demo's user of the same id, and the tenant it
    names cannot be changed after signing."""
    ours = {**payment(21), "subject_id": "user_021"}
    ours["authorization_context"] = {**ACTION["authorization_context"], "requested_by": "user_021"}
    for item in all_facts(gate["key"], subject_id="user_021", tenant_id="tenant_other"):
        assert post(gate, ISSUER, item).status_code == 200
        refused(gate, ISSUER, {**item, "tenant_id": "tenant_demo"}, 422, "fact_signature_invalid")
    still_missing(gate, ours)
    for item in all_facts(gate["key"], subject_id="user_021", tenant_id="tenant_demo"):
        assert post(gate, ISSUER, item).status_code == 200
    response = httpx2.post(
        f"{gate['url']}/v1/decisions", json={"action": {**ours, "action_id": "act_attack_22"}},
        headers={"Authorization": f"Bearer {AGENT}"}, timeout=60,
    )  # fmt: skip
    assert "context_missing" not in response.json()["reason_codes"], response.json()
