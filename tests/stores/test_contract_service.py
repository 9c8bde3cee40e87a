"""The service stores' contract (hand-offs, decisions, challenges), the same tests on both backends."""

from __future__ import annotations

import datetime as dt
import multiprocessing
from typing import Any

import pytest
from storekit import Backend

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.opening import open_stores
from kcp_opa.stores.storedtypes import ChallengeError, UnknownRecordError

PROCESSES = 4
ROUNDS = 10


def test_a_hand_off_is_taken_once_by_its_principal_only(backend: Backend) -> None:
    handoffs = backend.open().handoffs
    handoffs.hand_off("n1", "r1", "agent:a")
    assert handoffs.take("n1", "r1", "agent:b") is False
    assert handoffs.take("n1", "r2", "agent:a") is False  # the nonce with another receipt id
    assert handoffs.take("n1", "r1", "agent:a") is True
    assert backend.open().handoffs.take("n1", "r1", "agent:a") is False
    with pytest.raises(StoreError):
        handoffs.hand_off("n1", "r1", "agent:a")  # one hand-off per receipt


def test_decisions_are_kept_and_the_seal_key_is_one_per_store(backend: Backend) -> None:
    decisions = backend.open().decisions
    key = decisions.seal_key()
    assert len(key) == 32 and backend.open().decisions.seal_key() == key
    decisions.put("dec_1", "agent:a", None, {"state": "open", "n": 0})
    assert decisions.get("dec_1").document == {"state": "open", "n": 0}
    assert decisions.count() == 1
    with pytest.raises(StoreError):
        decisions.put("dec_1", "agent:a", None, {})  # a decision id is kept once
    with pytest.raises(UnknownRecordError):
        decisions.get("dec_missing")
    with pytest.raises(UnknownRecordError):
        decisions.update("dec_missing", lambda row: (row.document, None))


def _bump(location: str, barrier: Any, answers: Any) -> None:
    try:
        decisions = open_stores(location).decisions
        barrier.wait(timeout=60)
        for _ in range(ROUNDS):
            decisions.update("dec_1", lambda row: ({**row.document, "n": row.document["n"] + 1}, None))
        answers.put("ok")
    except BaseException as exc:  # every failure goes to the parent
        answers.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_updates_of_one_decision_in_many_processes_lose_none(backend: Backend) -> None:
    backend.open().decisions.put("dec_1", "agent:a", "agent:a", {"n": 0})
    context = multiprocessing.get_context("fork")
    barrier, answers = context.Barrier(PROCESSES), context.Queue()
    workers = [context.Process(target=_bump, args=(backend.location, barrier, answers)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert results == ["ok"] * PROCESSES
    assert backend.open().decisions.get("dec_1").document["n"] == PROCESSES * ROUNDS


def _open_challenge(challenges: Any, **extra: Any) -> Any:
    return challenges.open(
        decision_id="dec_1",
        action_hash="sha256:aa",
        control="four_eyes",
        addressed_to={"roles": ["cfo", "auditor"]},
        summary={"amount": 10},
        created_by="agent:a",
        **extra,
    )


def test_a_challenge_is_answered_once(backend: Backend) -> None:
    challenges = backend.open().challenges
    opened = _open_challenge(challenges)
    assert opened.addressed_to == {"roles": ["auditor", "cfo"]} and opened.state == "open"
    assert challenges.get(opened.challenge_id) == opened
    answered = challenges.consume(opened.challenge_id, "human:cfo")
    assert answered.state == "consumed" and answered.consumed_by == "human:cfo"
    with pytest.raises(ChallengeError) as again:
        backend.open().challenges.consume(opened.challenge_id, "human:other")
    assert again.value.code == "challenge_used"
    with pytest.raises(ChallengeError) as unknown:
        challenges.get("chl_nope")
    assert unknown.value.code == "unknown_challenge"
    assert [c.challenge_id for c in challenges.for_decision("dec_1")] == [opened.challenge_id]
    assert challenges.for_decision("dec_other") == []
    assert challenges.healthy() is True


def test_an_expired_challenge_is_refused(backend: Backend) -> None:
    challenges = backend.open().challenges
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    stale = _open_challenge(challenges, ttl_seconds=60, now=past)
    with pytest.raises(ChallengeError) as late:
        challenges.consume(stale.challenge_id, "human:cfo")
    assert late.value.code == "challenge_expired"
    fresh = _open_challenge(challenges, ttl_seconds=60)
    with pytest.raises(ChallengeError):
        challenges.consume(fresh.challenge_id, "human:cfo", now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2))
    assert challenges.consume(fresh.challenge_id, "human:cfo").state == "consumed"


def test_only_open_unexpired_challenges_are_listed_oldest_first(backend: Backend) -> None:
    challenges = backend.open().challenges
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    _open_challenge(challenges, ttl_seconds=60, now=past)  # expired
    answered = _open_challenge(challenges)
    challenges.consume(answered.challenge_id, "human:cfo")
    first = _open_challenge(challenges, now=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30))
    second = _open_challenge(challenges)
    assert [c.challenge_id for c in challenges.open_challenges()] == [first.challenge_id, second.challenge_id]
    assert [c.challenge_id for c in challenges.open_challenges(limit=1)] == [first.challenge_id]


@pytest.mark.parametrize("component", ["handoffs", "challenges", "decisions"])
def test_a_newer_service_schema_is_refused(backend: Backend, component: str) -> None:
    backend.open()
    backend.set_schema_version(component, 7)
    with pytest.raises(StoreError) as newer:
        backend.open()
    assert newer.value.code == "schema_newer"


def test_the_service_counts_budgets_on_either_store(backend: Backend, tmp_path: Any) -> None:
    """Both backends have a counter store and the service counts on it: a declared budget is
    decided from the store's counts, never held ``context_missing`` for want of counters."""
    from budgetkit import T0, compile_budget, payment

    from kcp_opa.authoring.casecontext import vouching
    from kcp_opa.context.counting import StoreCounters
    from kcp_opa.service.config import ServiceConfig
    from kcp_opa.service.loading import open_service

    bundle = compile_budget(tmp_path / "budget.tar.gz")
    service = open_service(ServiceConfig(bundle, store=str(backend.location), ledger=str(tmp_path / "l")))
    counting = service.gate.context.counters if service.gate.context is not None else None
    assert isinstance(counting, StoreCounters)
    decision = vouching(service.gate).decide(payment(1), now=T0)  # every other fact vouched
    budget_missing = any(r.code == "context_missing" and r.rule == "budget.counters" for r in decision.verdict.reasons)
    assert not budget_missing
