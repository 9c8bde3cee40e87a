"""A ledger entry serialised once (kcp_opa/trail/record.py): the line is the entry's canonical JSON."""

from __future__ import annotations

from typing import Any

import pytest

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.keys import generate_ed25519, sign_document
from kcp_opa.core.signing import hmac_key
from kcp_opa.trail.record import LedgerEntry
from kcp_opa.trail.verify import ENTRY_SIGNATURE

EVENTS: list[dict[str, Any]] = [
    {"type": "decision", "input": {"action": {"b": [1, {"z": None, "a": True}], "a": "é\u2028"}}, "result": None},
    {"type": "x", "ä": 1, "Z": "upper sorts first", "entry_hash": "sha256:" + "0" * 64, "seq": 99},
    {"type": "control", "erased": ["/input/action"], "engine_error": "e", "enforced": False, "emoji": "\U0001f600"},
    {},
]


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("signer", [None, "ed25519", "hmac"])
def test_the_line_is_the_canonical_json_of_the_entry_and_its_hash_holds(event: dict[str, Any], signer: Any) -> None:
    key = {"ed25519": generate_ed25519("w"), "hmac": hmac_key("w", b"s" * 32), None: None}[signer]
    sign = None if key is None else (lambda body: sign_document(body, key, ENTRY_SIGNATURE))
    entry, line = LedgerEntry.written(event, 7, "sha256:" + "1" * 64, sign)
    assert line == canonical_json(entry.to_dict())
    body = entry.to_dict()
    del body["entry_hash"]
    assert entry.entry_hash == canonical_hash(body) and entry.hash_holds()
    assert entry == LedgerEntry.chained(event, 7, "sha256:" + "1" * 64, sign)
    assert entry.seq == 7 and (entry.signature is not None) == (key is not None)
