"""Attacks on the memo of verified attestation signatures (kcp_opa/core/verified.py).

A signature verified once is not verified again for the same bytes and key; the memo must never
let a remembered "valid" vouch for other bytes, another signature, or a key that replaced the one
that verified (a rotation under the same kid), and a failure is never remembered as valid.
Real registries, real Ed25519 and HMAC keys.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kcp_opa.context import ContextSources, SignedAttestations, build_context, sign_fact, sign_spend
from kcp_opa.core.keys import HmacKey, b64url, generate_ed25519, signed_bytes
from kcp_opa.core.signing import Keyring
from kcp_opa.core.verified import VerifiedSignatures
from kcp_opa.declare.trust import TrustRegistry

NOW = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
ACTION = {"tenant_id": "tenant_demo", "agent_id": "agent_1", "action_type": "payment", "subject_id": "user_001"}
KID = "kyc-ed25519"


def _registry(key: Any) -> TrustRegistry:
    public = Keyring({key.kid: key}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    data = {
        "kind": "kcp-opa/trust-registry",
        "format_version": 1,
        "name": "unit",
        "version": "1",
        "principals": [{"id": "agent_1", "type": "ai_agent"}],
        "issuers": [
            {
                "id": "kyc",
                "type": "provider",
                "controls": [],
                "facts": ["evidence_status", "metered_spend"],
                "keys": [{"kid": KID, "alg": "Ed25519", "public_key": public}],
            }
        ],
    }
    return TrustRegistry("(unit)", "sha256:unit", data)


def _attest(key: Any, value: str = "present") -> dict[str, Any]:
    fields = {
        "fact": "evidence_status",
        "value": value,
        "issued_at": "2026-11-29T09:00:00Z",
        "expires_at": "2026-11-29T11:00:00Z",
        "subject_id": "user_001",
    }
    return sign_fact(fields, "kyc", key)


def _facts(source: SignedAttestations) -> tuple[dict[str, Any], list[dict[str, str]]]:
    return source.attested_facts(ACTION, "sha256:00")


def test_a_remembered_signature_never_vouches_for_changed_bytes() -> None:
    key = generate_ed25519(KID)
    good = _attest(key)
    source = SignedAttestations(_registry(key), None, [good])
    facts, refused = _facts(source)
    assert facts["evidence_status"]["value"] == "present" and refused == []
    assert len(source.verified) == 1
    # The same signature (now remembered as valid) over other bytes: a changed value, a later expiry.
    for changed in ({**good, "value": "missing"}, {**good, "expires_at": "2027-11-29T11:00:00Z"}):
        source = SignedAttestations(source.registry, None, [changed])
        source.verified = _shared(good, key)
        facts, refused = _facts(source)
        assert facts == {} and refused == [{"fact": "evidence_status", "reason": "bad_signature"}]


def _shared(document: dict[str, Any], key: Any) -> VerifiedSignatures:
    """A memo that has already verified ``document`` under ``key``."""
    memo = VerifiedSignatures()
    assert memo.document_verifies(document, key)
    return memo


def test_a_rotated_key_under_the_same_kid_is_not_vouched_for_by_the_old_one() -> None:
    old, new = generate_ed25519(KID), generate_ed25519(KID)
    signed_by_old = _attest(old)
    source = SignedAttestations(_registry(old), None, [signed_by_old])
    assert _facts(source)[0]["evidence_status"]["value"] == "present"  # verified and remembered
    source.registry = _registry(new)  # the issuer rotated: kid unchanged, the old key is gone
    facts, refused = _facts(source)
    assert facts == {} and refused == [{"fact": "evidence_status", "reason": "bad_signature"}]
    # And the memo of the old key does not answer for an HMAC key of the same kid either.
    memo = _shared(signed_by_old, old)
    assert not memo.document_verifies(signed_by_old, HmacKey(KID, b"s" * 32))


def test_a_failed_verification_is_never_remembered_as_valid() -> None:
    key = generate_ed25519(KID)
    good = _attest(key)
    forged = {**good, "signature": {**good["signature"], "value": b64url(b"\x00" * 64)}}
    source = SignedAttestations(_registry(key), None, [forged])
    for _ in range(3):
        assert _facts(source) == ({}, [{"fact": "evidence_status", "reason": "bad_signature"}])
    assert len(source.verified) == 0 and source.verified.hits == 0
    # The genuine one still verifies (and is then the only entry remembered).
    source.add(good)
    assert _facts(source)[0]["evidence_status"]["value"] == "present"
    assert len(source.verified) == 1


def test_another_spelling_of_a_remembered_signature_is_verified_afresh() -> None:
    key = generate_ed25519(KID)
    good = _attest(key)
    memo = _shared(good, key)
    value = good["signature"]["value"]
    padded = {**good, "signature": {**good["signature"], "value": value + "=="}}
    assert not memo.document_verifies(padded, key)  # strict base64url: one spelling only


def test_each_signature_is_verified_once_across_decisions_and_the_memo_is_bounded() -> None:
    key = generate_ed25519(KID)
    registry = _registry(key)
    spend = sign_spend(
        {
            "budget": "b",
            "subject": "tenant_demo",
            "amount_minor": 5,
            "currency": "USD",
            "period_start": "2026-11-29T08:00:00Z",
            "period_end": "2026-11-29T09:00:00Z",
            "issued_at": "2026-11-29T09:01:00Z",
            "expires_at": "2026-11-29T11:00:00Z",
        },
        "kyc",
        key,
    )
    source = SignedAttestations(registry, None, [_attest(key), spend])
    sources = ContextSources(attestations=source, metering=source)
    first = build_context(sources, ACTION, principal=None, action_hash="sha256:00", now=NOW)
    for _ in range(5):
        assert build_context(sources, ACTION, principal=None, action_hash="sha256:00", now=NOW) == first
    assert first["facts"]["evidence_status"]["value"] == "present" and len(first["metering"]) == 1
    assert (source.verified.misses, source.verified.hits) == (2, 10)

    small = VerifiedSignatures(capacity=3)
    documents = [_attest(key, value) for value in ("present", "missing", "stale", "present")]
    documents[3] = sign_fact({**documents[3], "issued_at": "2026-11-29T09:30:00Z"}, "kyc", key)
    for document in documents:
        assert small.document_verifies(document, key)
    assert len(small) == 3
    assert small.verifies(key, signed_bytes(documents[0]), documents[0]["signature"]["value"])  # re-verified
    assert small.misses == 5


def test_a_held_attestation_is_a_read_only_copy_whose_remembered_digest_cannot_go_stale() -> None:
    """The source keeps its own read-only copy (its signed bytes hashed once): the holder editing
    the mapping it passed changes nothing held, and the held copy itself cannot be edited."""
    key = generate_ed25519(KID)
    raw = _attest(key)
    source = SignedAttestations(_registry(key), None, [raw])
    assert _facts(source)[0]["evidence_status"]["value"] == "present"
    raw["value"] = "missing"  # after the first verification, the digest of the held copy is kept
    facts, refused = _facts(source)
    assert facts["evidence_status"]["value"] == "present" and refused == []
    held = source._items[0]
    for edit in (lambda: held.__setitem__("value", "missing"), lambda: held["signature"].update(value="x")):
        try:
            edit()
        except TypeError:
            continue
        raise AssertionError("a held attestation was edited")
    added = _attest(key, "stale")
    source.add(added)
    added["value"] = "present"
    assert _facts(source)[0]["evidence_status"]["value"] == "present"  # issued together: the first held speaks
    assert [item["value"] for item in source._items] == ["present", "stale"]
