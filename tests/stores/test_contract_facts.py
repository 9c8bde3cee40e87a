"""The fact store's contract (``FactStore``), the same tests on SQLite and on PostgreSQL (``backend``):
an attestation kept once whatever process posts it again, found by its action hash or its subject,
at most ``POSTED_FACTS_READ`` of each binding, newest first, and never a row bound to both or neither."""

from __future__ import annotations

from typing import Any

import pytest
from storekit import Backend

from kcp_opa.core.errors import StoreError
from kcp_opa.stores.storedtypes import POSTED_FACTS_READ, posted_fact

HASH_A, HASH_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _document(fact: str, n: int, **bound: Any) -> dict[str, Any]:
    return {
        "fact": fact,
        "value": True,
        **bound,
        "issued_at": f"2026-11-29T10:{n // 60:02d}:{n % 60:02d}Z",
        "expires_at": "2026-11-29T12:00:00Z",
        "issuer": "bank-registry",
        "signature": {"alg": "Ed25519", "kid": "k1", "value": f"sig{n}"},
    }


def test_an_attestation_is_kept_once_and_found_by_its_binding(backend: Backend) -> None:
    store = backend.open().facts
    assert store is not None
    by_hash = posted_fact(_document("new_beneficiary", 1, action_hash=HASH_A), issuer="bank-registry", subject_id=None)
    by_subject = posted_fact(
        _document("screening_uncertain", 2, subject_id="User_001"), issuer="bank-registry", subject_id="user_001"
    )
    assert store.keep(by_hash) and store.keep(by_subject)
    assert not store.keep(by_hash)  # the same attestation again: kept once
    assert backend.open().facts.count() == 2  # type: ignore[union-attr]  # another opener sees the same rows

    found = store.bound_to(HASH_A, "user_001")
    assert sorted(f.fact for f in found) == ["new_beneficiary", "screening_uncertain"]
    assert [f.document for f in found if f.fact == "new_beneficiary"] == [by_hash.document]
    assert [f.fact for f in store.bound_to(HASH_B, "user_002")] == []
    assert [f.fact for f in store.bound_to(HASH_B, None)] == []
    assert [f.fact for f in store.bound_to(HASH_B, "user_001")] == ["screening_uncertain"]


def test_a_decision_reads_at_most_the_newest_of_each_binding(backend: Backend) -> None:
    store = backend.open().facts
    assert store is not None
    for n in range(POSTED_FACTS_READ + 5):
        store.keep(posted_fact(_document("new_beneficiary", n, action_hash=HASH_A), issuer="r", subject_id=None))
    found = store.bound_to(HASH_A, None)
    assert len(found) == POSTED_FACTS_READ
    assert found[0].issued_at == _document("x", POSTED_FACTS_READ + 4)["issued_at"]  # the newest first


def test_a_row_bound_to_both_or_neither_is_refused_by_the_table(backend: Backend) -> None:
    store = backend.open().facts
    assert store is not None
    row = posted_fact(_document("new_beneficiary", 3, action_hash=HASH_A), issuer="r", subject_id=None)
    with pytest.raises(StoreError):
        store.keep(row.__class__(**{**row.__dict__, "fact_id": "sha256:" + "c" * 64, "subject_id": "user_001"}))
    with pytest.raises(StoreError):
        store.keep(row.__class__(**{**row.__dict__, "fact_id": "sha256:" + "d" * 64, "action_hash": None}))


def test_facts_expired_before_a_time_are_pruned_and_no_other(backend: Backend) -> None:
    store = backend.open().facts
    assert store is not None
    early = {**_document("new_beneficiary", 1, action_hash=HASH_A), "expires_at": "2026-11-29T11:00:00+00:00"}
    late = _document("new_beneficiary", 2, action_hash=HASH_A)  # expires 12:00Z
    for document in (early, late):
        store.keep(posted_fact(document, issuer="r", subject_id=None))
    eleven = 1_795_950_000  # 2026-11-29T11:00:00Z
    assert store.prune(eleven) == 0  # expiring at 11:00 is not expired before 11:00
    assert store.prune(eleven + 1) == 1
    assert [f.expires_at for f in store.bound_to(HASH_A, None)] == ["2026-11-29T12:00:00Z"]
    assert store.count() == 1
