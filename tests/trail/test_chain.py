"""The chain, written once above its storages, keeps the formats ledgers already on disk use.

``tests/fixtures/ledger/keyed.jsonl`` (and its ``.checkpoints``) was written by the file ledger
before the chain logic moved to ``kcp_opa.trail.chain``: a keyed writer (HMAC, the secret below)
with ``checkpoint_every=2``, three entries, closed. Today's writer must admit it (a full verify
against its own last checkpoint), extend it byte for byte after the old bytes, and leave a chain
and checkpoints that ``verify_ledger`` accepts with the key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.trail.checkpoint import read_checkpoints
from kcp_opa.trail.ledger import AuditLedger, checkpoint_path, read_entries, verify_ledger

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ledger" / "keyed.jsonl"
KEY = hmac_key("fixture-writer", b"kcp-opa ledger fixture secret, 32+ bytes")


@pytest.fixture
def old_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "keyed.jsonl"
    shutil.copyfile(FIXTURE, path)
    shutil.copyfile(checkpoint_path(FIXTURE), checkpoint_path(path))
    return path


def test_a_ledger_written_before_the_chain_moved_is_admitted_and_extended_unchanged(old_ledger: Path) -> None:
    before, marks_before = old_ledger.read_bytes(), checkpoint_path(old_ledger).read_bytes()
    ledger = AuditLedger(old_ledger, checkpoint_key=KEY, checkpoint_every=2)
    written = [ledger.append({"type": "decision", "n": n}) for n in (3, 4)]
    closed = ledger.close()
    assert [entry["seq"] for entry in written] == [4, 5]
    assert old_ledger.read_bytes().startswith(before)
    assert checkpoint_path(old_ledger).read_bytes().startswith(marks_before)
    marks = read_checkpoints(checkpoint_path(old_ledger))
    assert [mark.seq for mark in marks] == [1, 2, 3, 4, 5]  # 4: every 2 entries; 5: the close
    assert closed == marks[-1].to_dict() and marks[-1].entry_hash == written[-1]["entry_hash"]
    header = json.loads(before.splitlines()[0])
    assert {mark.ledger_id for mark in marks} == {header["ledger_id"]}
    report = verify_ledger(
        old_ledger,
        anchors=[(mark.seq, mark.entry_hash) for mark in marks],
        ledger_id=header["ledger_id"],
        keyring=Keyring({KEY.kid: KEY}),
        writer=KEY.kid,
    )
    assert report.ok and report.authenticated, report.problems
    lines = old_ledger.read_bytes().splitlines()
    assert all(json.loads(line)["entry_signature"]["kid"] == KEY.kid for line in lines[1:])
    assert [entry["n"] for _, entry in read_entries(old_ledger)] == [0, 1, 2, 3, 4]


def test_a_ledger_written_before_the_chain_moved_is_refused_by_another_key(old_ledger: Path) -> None:
    before = old_ledger.read_bytes()
    other = hmac_key("someone-else", b"another secret of at least thirty-two bytes")
    with pytest.raises(LedgerError, match="starts its own ledger file"):
        AuditLedger(old_ledger, checkpoint_key=other).append({"type": "decision"})
    assert old_ledger.read_bytes() == before
