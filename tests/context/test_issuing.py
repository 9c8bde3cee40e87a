"""kcp_opa.context.issuing: what `facts sign` and `exceptions sign` build, in process."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pytest

from kcp_opa.context.issuing import IssuingError, add_attestation, moment, signed_exceptions, span_seconds, validity
from kcp_opa.core.signing import generate_ed25519


def test_issuers_adding_to_one_file_at_once_lose_nothing(tmp_path: Path) -> None:
    out = tmp_path / "attestations.json"

    def add(writer: int) -> None:
        for n in range(25):
            add_attestation(out, {"writer": writer, "n": n})

    threads = [threading.Thread(target=add, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = json.loads(out.read_text())
    assert sorted((i["writer"], i["n"]) for i in held) == [(w, n) for w in range(8) for n in range(25)]
    assert [p.name for p in tmp_path.iterdir()] == ["attestations.json"]  # no temporary file left


def test_times_and_spans() -> None:
    issued = moment("2026-11-29T10:00:00+01:00", "--now")
    assert issued == dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC)
    assert validity(issued, None, "90m") == ("2026-11-29T09:00:00Z", "2026-11-29T10:30:00Z")
    assert span_seconds("14d", "--expires-in") == 14 * 86400
    for bad in ("0h", "1w", "-1h", ""):
        with pytest.raises(IssuingError, match="a span such as"):
            span_seconds(bad, "--expires-in")
    with pytest.raises(IssuingError, match="with its zone"):
        moment("2026-11-29T10:00:00", "--expires-at")


def test_signed_exceptions_fill_issuer_issue_time_and_signature_only() -> None:
    key = generate_ed25519("board-1")
    entry = {"id": "E1", "scope": {"tenant_id": "t"}, "waives": ["unit_stale"], "reason": "r", "ticket": "T-1",
             "grantor": "dpo@example.com", "expires_at": "2026-12-01T00:00:00Z",
             "issuer": "someone-else", "signature": {"alg": "Ed25519", "kid": "x", "value": "forged"}}  # fmt: skip
    draft = {"kind": "kcp-opa/exceptions", "format_version": 1, "name": "n", "exceptions": [entry]}
    signed = signed_exceptions(draft, "change-board", key, dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC))
    item = signed["exceptions"][0]
    assert item["issuer"] == "change-board" and item["issued_at"] == "2026-11-29T09:00:00Z"
    assert item["signature"]["kid"] == "board-1" and item["signature"]["value"] != "forged"
    assert {k: v for k, v in signed.items() if k != "exceptions"} == {"kind": "kcp-opa/exceptions",
                                                                       "format_version": 1, "name": "n"}  # fmt: skip
