"""The ledger contract on both backends: a JSONL file and a PostgreSQL database (``postgres`` marker).

The same bodies run on each: entries chain and read back through ``readable``, a writer key
binds the chain, a checkpoint anchors it. Beside them: a database ledger dumped is byte for byte
the file the file ledger writes for the same header and entries, so every ``audit`` command
reads it unchanged.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.stores.protocols import LedgerStore
from kcp_opa.trail.ledger import AuditLedger, read_entries, verify_ledger
from kcp_opa.trail.locations import open_ledger, readable

NAMES = itertools.count()


class Opened:
    """A ledger location on one backend; every ledger opened on it is released afterwards."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.ledgers: list[LedgerStore] = []

    def open(self, **options: Any) -> LedgerStore:
        ledger = open_ledger(self.location, **options)
        self.ledgers.append(ledger)
        return ledger

    def close(self) -> None:
        for ledger in self.ledgers:
            release = getattr(ledger, "release", None)
            if release is not None:
                release()


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opened]:
    if request.param == "file":
        opened = Opened(str(tmp_path / "ledger.jsonl"))
    else:
        opened = Opened(request.getfixturevalue("postgres").database(f"kcp_ledger_{next(NAMES)}"))
    try:
        yield opened
    finally:
        opened.close()


def _entries(location: str) -> list[dict[str, Any]]:
    with readable(location) as path:
        return [entry for _, entry in read_entries(path)]


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_concurrent_appends_chain_and_read_back(where: Opened, durability: str) -> None:
    ledger = where.open(durability=durability)
    acknowledged: list[dict[str, Any]] = []

    def writer(name: str) -> None:
        acknowledged.extend(ledger.append({"type": "note", "writer": name, "n": n}) for n in range(25))

    threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with readable(where.location) as path:
        report = verify_ledger(path)
        stored = [entry for _, entry in read_entries(path)]
    assert report.ok and report.entries == 100
    assert [e["seq"] for e in stored] == list(range(1, 101))
    assert sorted(stored, key=lambda e: e["seq"]) == sorted(acknowledged, key=lambda e: e["seq"])


def test_a_second_writer_extends_the_same_chain(where: Opened) -> None:
    where.open().append({"type": "note", "n": 1})
    second = where.open().append({"type": "note", "n": 2})
    assert second["seq"] == 2
    first = _entries(where.location)[0]
    assert second["previous_hash"] == first["entry_hash"]


def test_a_keyed_writer_signs_every_entry_and_checkpoints_the_head(where: Opened, tmp_path: Path) -> None:
    key = generate_ed25519("ledger-writer-1")
    keyring = tmp_path / "writer.json"
    keyring.write_text(json.dumps(Keyring({key.kid: key}).public().to_file_dict(include_private=False)))
    ledger = where.open(checkpoint_key=key, checkpoint_every=5)
    for n in range(12):
        ledger.append({"type": "note", "n": n})
    closed = ledger.close()
    assert closed is not None and closed["seq"] == 12
    out = tmp_path / "copy.jsonl"
    if where.location.startswith("postgresql://"):
        dumped = run_cli("audit", "dump", where.location, "-o", str(out))
        assert dumped.returncode == 0, dumped.stderr
        assert json.loads(dumped.stdout)["entries"] == 12
    else:
        out.write_bytes(Path(where.location).read_bytes())
        out.with_name(out.name + ".checkpoints").write_bytes(Path(where.location + ".checkpoints").read_bytes())
    marks = out.with_name(out.name + ".checkpoints")
    assert [json.loads(line)["seq"] for line in marks.read_text().splitlines()] == [1, 5, 10, 12]
    verified = run_cli(
        "audit", "verify", str(out), "--checkpoint", str(marks), "--keyring", str(keyring), "--format", "json"
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    document = json.loads(verified.stdout)
    assert document["entries_authenticated"] is True and document["writer"] == key.kid
    # the database itself, as the auditor's commands read it
    direct = run_cli("audit", "verify", where.location, "--keyring", str(keyring), "--format", "json")
    assert direct.returncode == 0 and json.loads(direct.stdout)["entries"] == 12


@pytest.mark.postgres
def test_a_database_ledger_is_byte_for_byte_a_file_ledger(postgres: Any, tmp_path: Path) -> None:
    from kcp_opa.trail.pgledger import PostgresLedger

    key = generate_ed25519("ledger-writer-bytes")
    location = postgres.database("kcp_ledger_bytes")
    database = PostgresLedger(location, checkpoint_key=key)
    inputs = [{"type": "decision", "decision_id": f"d{n}", "input": {"amount": n * 10, "é": "ü"}} for n in range(7)]
    try:
        returned = [database.append(entry) for entry in inputs]
        with readable(location) as path:
            dumped = path.read_bytes()
    finally:
        database.release()
    header = dumped.split(b"\n", 1)[0] + b"\n"
    file_path = tmp_path / "same.jsonl"
    file_path.write_bytes(header)  # the same header (ledger_id, time, writer): the file ledger extends it
    file_ledger = AuditLedger(file_path, checkpoint_key=key)
    assert [file_ledger.append(entry) for entry in inputs] == returned
    assert file_path.read_bytes() == dumped
    assert dumped.splitlines()[1:] == [canonical_json(entry) for entry in returned]


def test_a_ledger_entry_is_typed_strictly_and_round_trips_to_its_bytes(where: Opened) -> None:
    from kcp_opa.core.errors import LedgerError
    from kcp_opa.trail.record import LedgerEntry

    written = where.open().append({"type": "note", "detail": {"n": [1, 2.5, None, "é"]}})
    with readable(where.location) as path:
        line = path.read_bytes().splitlines()[1]
    typed = LedgerEntry.from_dict(json.loads(line))
    assert typed.seq == 1 and typed.event["type"] == "note" and typed.hash_holds()
    assert canonical_json(typed.to_dict()) == line and typed.to_dict() == written
    for broken in (
        [],
        {**written, "seq": True},
        {**written, "seq": 0},
        {**written, "entry_hash": "sha256:xyz"},
        {k: v for k, v in written.items() if k != "previous_hash"},
        {**written, "entry_signature": {"alg": "Ed25519", "value": 7}},
    ):
        with pytest.raises(LedgerError, match="not a ledger entry"):
            LedgerEntry.from_dict(broken)
    assert not LedgerEntry.from_dict({**written, "detail": "changed"}).hash_holds()


def test_a_snapshot_is_the_bytes_the_auditors_commands_read(where: Opened) -> None:
    """What the service's dashboard reads (``snapshot``) is what `audit verify` reads (``readable``)."""
    ledger = where.open()
    with ledger.snapshot() as nothing:
        assert nothing is None  # nothing written yet: no ledger, not an empty or broken one
    for n in range(5):
        ledger.append({"type": "note", "n": n})
    with ledger.snapshot() as snapshot, readable(where.location) as path:
        assert snapshot is not None
        assert snapshot.path.read_bytes() == path.read_bytes()
        assert verify_ledger(snapshot.path).entries == 5
        named = [snapshot.position(1), snapshot.position(4)]
        taken = snapshot.path
    database = where.location.startswith("postgresql://")
    assert named == (["the header", "seq 3"] if database else ["line 1", "line 4"])
    assert taken.exists() is not database  # a database's dump is private to the read and removed after it
    assert snapshot.name == ("the PostgreSQL ledger" if database else "ledger.jsonl")  # no server path in it
