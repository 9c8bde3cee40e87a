"""Posted facts as a context source (kcp_opa.context.posted): read from a real SQLite fact store and
judged on every decision by the registry the gate runs with, beside the --attestations file's.

A posted fact speaks for its action or subject only; a registry that no longer lists its issuer
(a reload) refuses it; a store that cannot be read fails the decision's context, never leaves
the fact quietly missing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from trustkit import REGISTRY, issuer_key, registry

from kcp_opa.context import SignedAttestations, sign_fact
from kcp_opa.context.posted import PostedAttestations
from kcp_opa.core.errors import StoreUnavailableError
from kcp_opa.declare.trust import load_trust
from kcp_opa.stores.sqlite.facts import SQLiteFactStore
from kcp_opa.stores.storedtypes import posted_fact

HASH = "sha256:" + "1" * 64
TIMES = {"issued_at": "2026-11-29T09:00:00Z", "expires_at": "2026-11-29T11:00:00Z"}


def _fact(fact: str, value: Any, **bound: Any) -> dict[str, Any]:
    return sign_fact({"fact": fact, "value": value, **bound, **TIMES}, "bank-registry", issuer_key("bank-registry"))


def _source(tmp_path: Path, *items: dict[str, Any], file_items: tuple[Any, ...] = ()) -> PostedAttestations:
    store = SQLiteFactStore(tmp_path / "facts.db")
    for item in items:
        subject = item.get("subject_id")
        store.keep(posted_fact(item, issuer="bank-registry", subject_id=subject))
    return PostedAttestations(SignedAttestations(registry(), None, file_items), store)


def test_a_posted_fact_speaks_for_its_action_or_subject_only(tmp_path: Path) -> None:
    source = _source(
        tmp_path,
        _fact("new_beneficiary", True, action_hash=HASH),
        _fact("screening_uncertain", False, subject_id="user_001"),
    )
    facts, refused = source.attested_facts({"subject_id": "user_001"}, HASH)
    assert facts["new_beneficiary"]["value"] is True and facts["screening_uncertain"]["value"] is False
    assert facts["new_beneficiary"]["source"].startswith("attestation:bank-registry/") and refused == []
    other, _ = source.attested_facts({"subject_id": "user_002"}, "sha256:" + "2" * 64)
    assert other == {}


def test_the_newest_of_the_file_and_the_posted_speaks(tmp_path: Path) -> None:
    older = sign_fact(
        {"fact": "new_beneficiary", "value": False, "action_hash": HASH, "issued_at": "2026-11-29T08:00:00Z",
         "expires_at": "2026-11-29T11:00:00Z"}, "bank-registry", issuer_key("bank-registry"),
    )  # fmt: skip
    source = _source(tmp_path, _fact("new_beneficiary", True, action_hash=HASH), file_items=(older,))
    facts, _ = source.attested_facts({}, HASH)
    assert facts["new_beneficiary"]["value"] is True


def test_a_registry_that_no_longer_lists_the_issuer_refuses_the_kept_fact(tmp_path: Path) -> None:
    source = _source(tmp_path, _fact("new_beneficiary", True, action_hash=HASH))
    data = yaml.safe_load(REGISTRY.read_text())
    data["issuers"] = [i for i in data["issuers"] if i["id"] != "bank-registry"]
    reloaded = tmp_path / "registry.yaml"
    reloaded.write_text(yaml.safe_dump(data))
    after = PostedAttestations(SignedAttestations(load_trust(reloaded), None), source.store)
    facts, refused = after.attested_facts({}, HASH)
    assert facts == {} and refused == [{"fact": "new_beneficiary", "reason": "unknown_issuer"}]


def test_a_store_that_cannot_be_read_fails_the_context(tmp_path: Path) -> None:
    source = _source(tmp_path, _fact("new_beneficiary", True, action_hash=HASH))
    with sqlite3.connect(tmp_path / "facts.db") as db:
        db.execute("DROP TABLE posted_facts")
    with pytest.raises(StoreUnavailableError):
        source.attested_facts({}, HASH)
