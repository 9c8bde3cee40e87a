"""``POST /v1/facts`` on a real `kcp-opa serve`, on SQLite and on PostgreSQL: a registered issuer
posts a signed fact, and the next decision bound to it uses it (docs/service.md, "Posted facts").

The reference KYA payment decided without its subject's facts escalates ``context_missing``; once
the fact issuer posts them (the beneficiary registry's and the identity provider's facts, signed
as ``kcp-opa facts sign`` signs them), the next decision of the same action is the policy's answer
with the facts present. On PostgreSQL the fact is posted to one replica and used by the other.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import REPO
from servicekit import (
    FACT_ISSUER,
    GATE_ISSUER,
    SERVICE_ISSUER,
    SUBJECT_FACTS,
    compile_finance,
    start_server,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

from kcp_opa.context import sign_fact
from kcp_opa.core.signing import Key, load_keyring
from kcp_opa.decide.action import action_hash

AGENT, ISSUER, OTHER = "t-agent-" + "a" * 32, "t-issuer-" + "i" * 32, "t-kyc-" + "k" * 32
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def registry_with_fact_issuer(work: Path) -> tuple[Path, Path]:
    """servicekit's registry, its fact issuer also a principal (a provider): it may post its facts.
    No attestations file: every fact arrives through the route."""
    registry, keys = write_registry(work)
    data = yaml.safe_load(registry.read_text())
    data["principals"].append({"id": FACT_ISSUER, "type": "provider"})
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    (work / "attestations.json").unlink()
    return registry, keys


def issuer_key(keys: Path) -> Key:
    return load_keyring(keys).keys[f"{FACT_ISSUER}-ed25519"]


def signed(key: Key, fact: str, value: Any, *, issuer: str = FACT_ISSUER, **bound: Any) -> dict[str, Any]:
    """One attestation as `kcp-opa facts sign` makes it (valid an hour unless ``expires`` says)."""
    now = dt.datetime.now(dt.UTC)
    expires = bound.pop("expires", now + dt.timedelta(hours=1))
    times = {"issued_at": (now - dt.timedelta(minutes=5)).strftime(STAMP), "expires_at": expires.strftime(STAMP)}
    return sign_fact({"fact": fact, "value": value, **bound, **times}, issuer, key)


def server_args(work: Path, registry: Path, keys: Path) -> list[str]:
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {AGENT: "agent_payments_001", ISSUER: FACT_ISSUER, OTHER: "kyc-provider"})
    args = ["--bundle", str(bundle), "--trust", str(registry), "--tokens", str(tokens)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(keys)]
    return [*args, "--keyring", str(write_receipt_keyring(work)), "--region", "EU"]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two servers on one store: two processes on one SQLite file, or two replicas on one database."""
    work = tmp_path_factory.mktemp(f"facts-{request.param}")
    registry, keys = registry_with_fact_issuer(work)
    args = server_args(work, registry, keys)
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    if request.param == "postgres":
        env["KCP_OPA_STORE"] = request.getfixturevalue("postgres").database("kcp_posted_facts")
    else:
        args += ["--store", str(work / "service.db")]
    processes, urls = [], []
    try:
        for name in "ab":
            process, url = start_server([*args, "--ledger", str(work / f"{name}.jsonl")], env=env)
            processes.append(process)
            urls.append(url)
        store = env.get("KCP_OPA_STORE") or str(work / "service.db")
        yield {"urls": urls, "key": issuer_key(keys), "work": work, "store": store}
    finally:
        for process in processes:
            stop_server(process)


def decide(url: str, action: dict[str, Any]) -> dict[str, Any]:
    response = httpx2.post(f"{url}/v1/decisions", json={"action": action}, headers=bearer(AGENT), timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def post(url: str, token: str, attestation: Any) -> httpx2.Response:
    return httpx2.post(f"{url}/v1/facts", json=attestation, headers=bearer(token), timeout=60)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_posted_fact_is_used_by_the_next_decision_on_any_replica(served: dict[str, Any]) -> None:
    first, second = served["urls"]
    action = {**ACTION, "action_id": "act_posted_1", "idempotency_key": "idem_posted_fact_0001"}
    before = decide(first, action)
    assert before["decision"] == "ESCALATE" and "context_missing" in before["reason_codes"]

    hashed = action_hash(action)
    for fact, value in SUBJECT_FACTS.items():  # bound to this one payment
        response = post(first, ISSUER, signed(served["key"], fact, value, action_hash=hashed))
        assert response.status_code == 200, response.text
        kept = response.json()
        assert kept["kept"] is True and kept["already_kept"] is False and kept["action_hash"] == hashed

    after = decide(second, action)  # the other process (replica) reads what the first kept
    assert after["decision"] == "HUMAN_APPROVAL" and after["authorization_status"] == "PENDING_CONTROLS"
    assert "context_missing" not in after["reason_codes"]

    # Another payment of the same subject is not this one: the facts were bound to its hash.
    other = decide(second, {**action, "action_id": "act_posted_2", "idempotency_key": "idem_posted_fact_0002"})
    assert other["decision"] == "ESCALATE" and "context_missing" in other["reason_codes"]

    # The same attestation again is kept once; the ledger names who posted each.
    again = post(second, ISSUER, signed(served["key"], "new_beneficiary", True, action_hash=hashed))
    assert again.status_code == 200
    metrics = httpx2.get(f"{first}/metrics", timeout=10).text
    assert 'kcp_opa_facts_posted_total{fact="new_beneficiary"} 1.0' in metrics
    notes = [json.loads(line) for line in (served["work"] / "a.jsonl").read_text().splitlines()[1:]]
    posted = [n for n in notes if n.get("note") == "fact_posted"]
    assert len(posted) == len(SUBJECT_FACTS) and {n["principal"]["id"] for n in posted} == {FACT_ISSUER}


def test_a_fact_for_the_subject_counts_for_each_of_its_actions(served: dict[str, Any]) -> None:
    first, second = served["urls"]
    action = {**ACTION, "subject_id": "user_002", "action_id": "act_subj_1", "idempotency_key": "idem_subject_0001"}
    action["authorization_context"] = {**ACTION["authorization_context"], "requested_by": "user_002"}
    assert "context_missing" in decide(first, action)["reason_codes"]
    for fact, value in SUBJECT_FACTS.items():
        assert post(second, ISSUER, signed(served["key"], fact, value, subject_id="user_002")).status_code == 200
    later = {**action, "action_id": "act_subj_2", "idempotency_key": "idem_subject_0002"}
    assert "context_missing" not in decide(first, later)["reason_codes"]


def test_the_route_is_in_the_openapi_document_with_its_refusals(served: dict[str, Any]) -> None:
    document = httpx2.get(f"{served['urls'][0]}/v1/openapi.json", timeout=10).json()
    operation = document["paths"]["/v1/facts"]["post"]
    assert operation["operationId"]
    assert {"200", "400", "401", "403", "422", "503"} <= set(operation["responses"])


def test_kcp_opa_facts_post_sends_a_signed_fact_and_says_a_refusal_in_one_line(served: dict[str, Any]) -> None:
    url = served["urls"][0]
    bound = {"action_hash": action_hash({**ACTION, "action_id": "act_cli_post"})}
    good, expired = (
        signed(served["key"], "new_beneficiary", True, **bound),
        signed(
            served["key"],
            "modified_beneficiary",
            False,
            expires=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1),
            **bound,
        ),
    )
    env = {**os.environ, "ISSUER_TOKEN": ISSUER}
    command = [sys.executable, "-m", "kcp_opa", "facts", "post", "-", "--url", url, "--token-env", "ISSUER_TOKEN"]
    kept = subprocess.run(command, input=json.dumps(good), env=env, capture_output=True, text=True, check=False)
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["fact"] == "new_beneficiary" and ISSUER not in kept.stdout + kept.stderr
    refused = subprocess.run(command, input=json.dumps(expired), env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "422 fact_expired" in refused.stderr, refused.stderr


def test_a_post_prunes_the_facts_expired_over_a_day_and_keeps_the_rest(served: dict[str, Any]) -> None:
    from kcp_opa.stores.opening import open_stores
    from kcp_opa.stores.storedtypes import posted_fact

    facts = open_stores(served["store"]).facts
    assert facts is not None
    now = dt.datetime.now(dt.UTC)
    for name, expired in (("stale", dt.timedelta(days=2)), ("recent", dt.timedelta(hours=1))):
        document = signed(served["key"], "new_beneficiary", False, subject_id=f"user_{name}", expires=now - expired)
        facts.keep(posted_fact(document, issuer=FACT_ISSUER, subject_id=f"user_{name}"))
    fresh = signed(served["key"], "new_beneficiary", True, subject_id="user_3")
    assert post(served["urls"][1], ISSUER, fresh).is_success
    assert facts.bound_to("sha256:" + "0" * 64, "user_stale") == []  # expired two days: pruned
    assert [f.subject_id for f in facts.bound_to("sha256:" + "0" * 64, "user_recent")] == ["user_recent"]
