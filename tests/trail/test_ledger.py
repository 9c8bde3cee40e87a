"""Behaviour tests for kcp_opa/trail/ledger.py that kill its mutmut survivors (docs/testing.md).

Real files, real flock and fsync, no bundle: every test reads the ledger back (bytes, chain,
checkpoints) so a mutant that changes what lands on disk fails here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.trail import ledger as ledger_module
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoints
from kcp_opa.trail.ledger import GENESIS, AuditLedger, checkpoint_path, read_entries, verify_ledger

KEY = hmac_key("ck-1", b"checkpoint-secret-0123456789abcdef")


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"^durability is 'fsync' or 'group'$"):
        AuditLedger("x", durability="none")
    with pytest.raises(ValueError, match=r"^checkpoint_every is at least 1$"):
        AuditLedger("x", checkpoint_every=0)
    ledger = AuditLedger("x", checkpoint_every=1)
    assert (ledger.durability, ledger.checkpoint_every, ledger.checkpoint_key) == ("fsync", 1, None)
    assert AuditLedger("x").checkpoint_every == 1000
    assert checkpoint_path(Path("/a/audit.jsonl")) == Path("/a/audit.jsonl.checkpoints")


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_header_chain_and_bytes(tmp_path: Path, durability: str) -> None:
    path = tmp_path / "sub" / "dir" / "audit.jsonl"
    ledger = AuditLedger(path, durability=durability)
    first = ledger.append({"type": "a", "n": 1})
    second = ledger.append({"type": "b", "n": 2})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 & ~_umask()
    lines = _lines(path)
    assert len(lines) == 3 and all(line.endswith(b"\n") for line in lines)
    header = json.loads(lines[0])
    assert set(header) == {"kcp_opa_ledger", "ledger_id", "created_at"} and header["kcp_opa_ledger"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", header["created_at"])
    assert len(header["ledger_id"]) == 32 and header["created_at"].endswith("Z")
    assert first["seq"] == 1 and first["previous_hash"] == canonical_hash(header)
    assert second["seq"] == 2 and second["previous_hash"] == first["entry_hash"]
    assert lines[1] == canonical_json(first) + b"\n" and lines[2] == canonical_json(second) + b"\n"
    without = {k: v for k, v in second.items() if k != "entry_hash"}
    assert second["entry_hash"] == canonical_hash(without)
    report = verify_ledger(path)
    assert report.ok and report.entries == 2 and report.head_seq == 2 and report.ledger_id == header["ledger_id"]
    assert [n for n, _ in read_entries(path)] == [2, 3]
    # a second writer object continues the same chain
    third = AuditLedger(path).append({"type": "c"})
    assert third["seq"] == 3 and third["previous_hash"] == second["entry_hash"]
    assert _lines(path)[0] == lines[0]  # one header only


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_append_copies_the_callers_entry(tmp_path: Path) -> None:
    entry = {"type": "a"}
    written = AuditLedger(tmp_path / "audit.jsonl").append(entry)
    assert entry == {"type": "a"} and written["type"] == "a"


def test_refuses_symlinks_directories_and_foreign_files(tmp_path: Path) -> None:
    target = tmp_path / "target.jsonl"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with pytest.raises(LedgerError) as caught:
        AuditLedger(link).append({"type": "x"})
    assert str(caught.value) == f"{link}: cannot open the audit ledger: it is a symlink (never followed)"
    assert target.read_bytes() == b""
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    with pytest.raises(LedgerError) as caught:
        AuditLedger(folder).append({"type": "x"})
    assert str(caught.value) == f"{folder}: cannot open the audit ledger: Is a directory"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(LedgerError) as caught:
            AuditLedger(fifo).append({"type": "x"})
        assert str(caught.value) == f"{fifo}: the audit ledger is not a regular file"
    finally:
        os.close(fd)
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello\n")
    with pytest.raises(LedgerError) as caught:
        AuditLedger(foreign).append({"type": "x"})
    assert str(caught.value) == f"{foreign}: not a kcp-opa audit ledger (no ledger header); refusing to write to it"
    assert foreign.read_text() == "hello\n"


def test_torn_tail_is_cut_in_a_headed_ledger_only(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path)
    first = ledger.append({"type": "a"})
    good = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(b'{"type":"torn')
    second = ledger.append({"type": "b"})
    assert path.read_bytes().startswith(good) and second["previous_hash"] == first["entry_hash"] and second["seq"] == 2
    assert verify_ledger(path).ok
    legacy = tmp_path / "legacy.jsonl"
    entry = {"type": "old", "seq": 1, "previous_hash": GENESIS}
    entry["entry_hash"] = canonical_hash(entry)
    legacy.write_bytes(canonical_json(entry) + b"\n")
    appended = AuditLedger(legacy).append({"type": "new"})
    assert appended["seq"] == 2 and appended["previous_hash"] == entry["entry_hash"]
    assert len(_lines(legacy)) == 2
    with legacy.open("ab") as handle:
        handle.write(b'{"torn')
    before = legacy.read_bytes()
    with pytest.raises(LedgerError) as caught:
        AuditLedger(legacy).append({"type": "x"})
    assert str(caught.value) == (
        f"{legacy}: torn last line in a headerless ledger; repair it by hand after `audit verify`"
    )
    assert legacy.read_bytes() == before


def test_a_torn_header_alone_is_restarted(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"created_at":"2026-11-29T10:00:00.000000Z","kcp_opa_le')
    written = AuditLedger(path).append({"type": "a"})
    assert written["seq"] == 1
    header = json.loads(_lines(path)[0])
    assert header["kcp_opa_ledger"] == 1 and written["previous_hash"] == canonical_hash(header)
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"created_at":"x"}\n')  # a whole line that is no header: never cut
    with pytest.raises(LedgerError):
        AuditLedger(other).append({"type": "a"})
    assert other.read_bytes() == b'{"created_at":"x"}\n'


def test_a_header_only_ledger_chains_from_the_header(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    header = {"created_at": "2026-11-29T10:00:00.000000Z", "kcp_opa_ledger": 1, "ledger_id": "f" * 32}
    path.write_bytes(canonical_json(header) + b"\n")
    written = AuditLedger(path).append({"type": "a"})
    assert written["seq"] == 1 and written["previous_hash"] == canonical_hash(header)
    assert path.read_bytes() == canonical_json(header) + b"\n" + canonical_json(written) + b"\n"


def test_only_a_torn_header_of_ours_is_cut(tmp_path: Path) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b'{"created_at":"x')  # 16 bytes, no newline: the start of a header line
    AuditLedger(torn).append({"type": "a"})
    assert json.loads(_lines(torn)[0])["kcp_opa_ledger"] == 1 and verify_ledger(torn).ok
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_bytes(b'{"created_at":"' + b"y" * 145)  # 160 bytes: longer than any header line
    with pytest.raises(LedgerError):
        AuditLedger(foreign).append({"type": "a"})
    assert len(foreign.read_bytes()) == 160


def test_a_last_line_that_is_no_entry_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    AuditLedger(path).append({"type": "a"})
    with path.open("ab") as handle:
        handle.write(b'{"type": "no seq"}\n')
    with pytest.raises(LedgerError) as caught:
        AuditLedger(path).append({"type": "b"})
    assert str(caught.value) == f"{path}: the last entry is not a ledger entry; run `kcp-opa audit verify`"


def test_long_lines_are_found_across_tail_chunks(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path)
    size = ledger_module._TAIL_CHUNK * 2 + 100  # each entry spans three tail chunks
    first = ledger.append({"type": "a", "pad": "p" * size})
    second = ledger.append({"type": "b", "pad": "q" * size})
    third = ledger.append({"type": "c"})
    assert third["previous_hash"] == second["entry_hash"] and third["seq"] == 3
    assert second["previous_hash"] == first["entry_hash"] and second["seq"] == 2
    assert verify_ledger(path).ok


def test_a_failed_write_is_cut_back(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path)
    ledger.append({"type": "a"})
    good = path.read_bytes()
    with pytest.raises(TypeError):
        ledger.append({"type": "b", "bad": object()})
    assert path.read_bytes() == good
    assert ledger.append({"type": "c"})["seq"] == 2


def test_checkpoints_every_n_and_on_close(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path, checkpoint_key=KEY, checkpoint_every=2)
    assert not checkpoint_path(path).exists()
    assert ledger.close() is None  # nothing written yet
    ledger.append({"type": "a"})
    # the first batch of a new keyed ledger is checkpointed: it is never without a checkpoint
    assert [c.seq for c in read_checkpoints(checkpoint_path(path))] == [1]
    second = ledger.append({"type": "b"})
    _, checkpoint = read_checkpoints(checkpoint_path(path))
    header = json.loads(_lines(path)[0])
    assert (checkpoint.seq, checkpoint.entry_hash, checkpoint.ledger_id) == (
        2,
        second["entry_hash"],
        header["ledger_id"],
    )
    checkpoint.verify(Keyring({"ck-1": KEY}))
    ledger.append({"type": "c"})
    assert len(read_checkpoints(checkpoint_path(path))) == 2
    fourth = ledger.append({"type": "d"})
    assert [c.seq for c in read_checkpoints(checkpoint_path(path))] == [1, 2, 4]
    closed = ledger.close()
    assert closed is not None and closed["seq"] == 4 and closed["entry_hash"] == fourth["entry_hash"]
    assert closed["ledger_id"] == header["ledger_id"]
    # the head is checkpointed already: close returns that checkpoint, it does not repeat it
    _, *rest = read_checkpoints(checkpoint_path(path))
    assert rest == [checkpoint, Checkpoint.from_dict(closed)]
    ledger.append({"type": "e"})
    reclosed = ledger.close()
    assert reclosed is not None and reclosed["seq"] == 5
    assert [c.seq for c in read_checkpoints(checkpoint_path(path))] == [1, 2, 4, 5]
    assert AuditLedger(path).close() is None  # no key, no checkpoint
    empty = AuditLedger(tmp_path / "empty.jsonl", checkpoint_key=KEY)
    assert empty.close() is None and (tmp_path / "empty.jsonl").read_bytes() == b""


def test_a_checkpoint_that_cannot_be_written_does_not_unacknowledge(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    checkpoint_path(path).mkdir(parents=True)  # a directory where the checkpoints go
    ledger = AuditLedger(path, checkpoint_key=KEY, checkpoint_every=1)
    # a new keyed ledger's first checkpoint is part of its first batch: no checkpoint, no batch
    with pytest.raises(LedgerError, match="audit write failed: Is a directory"):
        ledger.append({"type": "a"})
    assert path.read_bytes() == b""
    checkpoint_path(path).rmdir()
    assert ledger.append({"type": "a"})["seq"] == 1
    checkpoint_path(path).unlink()
    checkpoint_path(path).mkdir()  # a later checkpoint cannot be written: the entry stays acknowledged
    assert ledger.append({"type": "b"})["seq"] == 2
    assert verify_ledger(path).ok and verify_ledger(path).entries == 2


def test_read_entries(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    AuditLedger(path).append({"type": "a"})
    with path.open("ab") as handle:
        handle.write(b"[1]\nnot json\n" + b'{"type": "torn"}')
    assert [(n, e["type"]) for n, e in read_entries(path)] == [(2, "a")]
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_bytes(b'{"seq": 1}\n')
    assert list(read_entries(legacy)) == [(1, {"seq": 1})]
    with pytest.raises(LedgerError) as caught:
        list(read_entries(tmp_path / "absent.jsonl"))
    assert str(caught.value) == f"{tmp_path / 'absent.jsonl'}: cannot read the ledger: No such file or directory"


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_a_lone_append_syncs_on_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """With no batch in flight, even group durability commits on the caller's thread: a lone
    writer pays no hand-off to the group's writer thread and back."""
    threads: list[threading.Thread] = []
    real_fsync = os.fsync

    def observed(fd: int) -> None:
        threads.append(threading.current_thread())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed)
    AuditLedger(tmp_path / "audit.jsonl", durability=durability).append({"type": "a"})
    assert threads == [threading.current_thread()]


def test_appends_during_a_group_write_share_the_next_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one append is being written, the others queue and go to disk as one batch, synced
    once on the group's writer thread; every append is acknowledged only after its fsync."""
    synced: list[threading.Thread] = []
    first_started, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def held(fd: int) -> None:
        if not synced:
            first_started.set()
            assert release.wait(10)
        synced.append(threading.current_thread())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", held)
    ledger = AuditLedger(tmp_path / "audit.jsonl", durability="group")
    with ThreadPoolExecutor(max_workers=6) as pool:
        first = pool.submit(ledger.append, {"n": 0})
        assert first_started.wait(10)
        others = [pool.submit(ledger.append, {"n": n}) for n in range(1, 6)]
        time.sleep(0.2)  # the others queue behind the held write
        assert not any(f.done() for f in [first, *others])  # nothing acknowledged before its fsync
        release.set()
        written = [f.result(timeout=10) for f in [first, *others]]
    assert sorted(e["seq"] for e in written) == list(range(1, 7))
    assert len(synced) == 2, "the five queued appends were not synced as one batch"
    assert verify_ledger(tmp_path / "audit.jsonl").ok


@pytest.mark.parametrize("failure", [OSError(5, "Input/output error"), RuntimeError("interrupted")])
def test_a_failed_fsync_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path)
    real_fsync = os.fsync

    calls: list[int] = []

    def failing(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise failure  # the batch's fsync fails; the rollback's own fsync is the real one
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises((LedgerError, RuntimeError)) as caught:
        ledger.append({"type": "first"})  # the very first batch: header and entry both go
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == b""
    if isinstance(failure, OSError):
        assert str(caught.value) == f"{path}: audit write failed: Input/output error"
    else:
        assert caught.type is RuntimeError
    ledger.append({"type": "a"})
    good = path.read_bytes()
    calls.clear()
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises((LedgerError, RuntimeError)):
        ledger.append({"type": "b"})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == good
    assert verify_ledger(path).ok


def test_checkpoint_rules(tmp_path: Path) -> None:
    # no key: never a checkpoint, whatever checkpoint_every says
    plain = tmp_path / "plain.jsonl"
    AuditLedger(plain, checkpoint_every=1).append({"type": "a"})
    assert not checkpoint_path(plain).exists()
    # every 3: the first checkpoint is at seq 3, not before
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path, checkpoint_key=KEY, checkpoint_every=3)
    for _ in range(2):
        ledger.append({"type": "a"})
    assert [c.seq for c in read_checkpoints(checkpoint_path(path))] == [1]  # the first batch's
    ledger.append({"type": "a"})
    assert [c.seq for c in read_checkpoints(checkpoint_path(path))] == [1, 3]
    # every 1: the first batch's checkpoint names the header's ledger id
    first = tmp_path / "first.jsonl"
    AuditLedger(first, checkpoint_key=KEY, checkpoint_every=1).append({"type": "a"})
    (checkpoint,) = read_checkpoints(checkpoint_path(first))
    assert checkpoint.ledger_id == json.loads(_lines(first)[0])["ledger_id"]


def test_a_checkpoint_not_written_is_logged(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path, checkpoint_key=KEY, checkpoint_every=1)
    ledger.append({"type": "a"})
    checkpoint_path(path).unlink()
    checkpoint_path(path).mkdir()
    with capture_logs() as logs:
        ledger.append({"type": "b"})
    (warning,) = [log for log in logs if log.get("log_level") == "warning"]
    assert warning["event"] == "ledger_checkpoint_not_written" and warning["path"] == str(path)
    assert "Is a directory" in warning["error"]


def test_close_on_a_foreign_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(LedgerError) as caught:
        AuditLedger(path, checkpoint_key=KEY).close()
    assert str(caught.value).startswith(f"{path}: not a kcp-opa audit ledger")


def test_a_line_of_exactly_one_tail_chunk(tmp_path: Path) -> None:
    """The newline before the last entry sits exactly at the start of a 64 KiB tail chunk."""
    chunk = ledger_module._TAIL_CHUNK
    probe = tmp_path / "probe.jsonl"
    measured = AuditLedger(probe)
    measured.append({"type": "a"})
    length = len(canonical_json(measured.append({"type": "b", "pad": ""})))
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path)
    ledger.append({"type": "a"})
    entry = ledger.append({"type": "b", "pad": "x" * (chunk - 1 - length)})
    assert len(canonical_json(entry)) == chunk - 1
    after = ledger.append({"type": "c"})
    assert after["previous_hash"] == entry["entry_hash"] and after["seq"] == 3
    assert verify_ledger(path).ok


def test_header_stamp_is_utc_whatever_the_local_zone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        AuditLedger(tmp_path / "audit.jsonl").append({"type": "a"})
        after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    stamp: Any = json.loads(_lines(tmp_path / "audit.jsonl")[0])["created_at"]
    assert before <= dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ") <= after


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_the_ledger_fsyncs_its_own_file_before_append_returns(
    durability: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills: the ledger's ``os.fsync`` removed. Durability against power loss cannot be
    observed without cutting the power, so the syscall itself is observed: ``os.fsync`` is
    wrapped (the real fsync still runs; nothing is faked) to record which file each call
    synced and how large it was, and the record must show the ledger file, with the new
    entry already in it, synced before ``append`` returned."""
    path = tmp_path / "audit.jsonl"
    synced: list[tuple[int, int, int]] = []
    real_fsync = os.fsync

    def observed_fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_dev, info.st_ino, info.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed_fsync)
    ledger = AuditLedger(path, durability=durability)
    for n in range(3):
        before = len(synced)
        ledger.append({"type": "probe", "n": n})
        info = path.stat()
        after_append = [s for s in synced[before:] if (s[0], s[1]) == (info.st_dev, info.st_ino)]
        assert after_append, f"append {n} returned without an fsync of {path}"
        assert after_append[-1][2] == info.st_size  # synced after the entry was written
    assert [entry["n"] for _, entry in read_entries(path)] == [0, 1, 2]
