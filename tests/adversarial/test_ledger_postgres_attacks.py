"""Attacks and bad days on a PostgreSQL ledger shared by replicas (real server, real processes).

- Replicas appending at once: several processes, each with several threads, on one database.
  The chain must stay one chain: no seq twice, no entry lost, every link intact.
- A DBA (or an intruder with SQL) edits a row, deletes one, reorders seqs, moves the head or
  appends an entry without the writer's key: ``audit verify`` on the database names it, and the
  writers refuse to build on a tampered head.
- The database goes down during appends: the decision is DENY ``audit_unavailable`` (never an
  allow), the callers of a failed batch all see the failure, nothing acknowledged is lost, and
  the same gate writes again once the database is back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli, vouched_gate

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import LedgerError, StoreUnavailableError
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.ledger import read_entries, verify_ledger
from kcp_opa.trail.locations import readable
from kcp_opa.trail.verify import entry_hash

pytestmark = pytest.mark.postgres

_APPENDER = r"""
import sys, threading
from kcp_opa.trail.pgledger import PostgresLedger
location, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
ledger = PostgresLedger(location, durability="group")
def run(thread):
    for n in range(count):
        ledger.append({"type": "note", "writer": name, "thread": thread, "n": n})
threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
ledger.release()
print("done", name)
"""


def _sql(location: str, statement: str, *args: Any) -> None:
    import psycopg

    with psycopg.connect(location, autocommit=True) as connection:
        connection.execute(statement, args or None)


def _verify(location: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("audit", "verify", location, *extra, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _filled(postgres: Any, name: str, count: int = 6, **options: Any) -> str:
    from kcp_opa.trail.pgledger import PostgresLedger

    location = postgres.database(name)
    ledger = PostgresLedger(location, **options)
    try:
        for n in range(count):
            ledger.append({"type": "decision", "decision_id": f"dec_{n}", "amount": n})
        ledger.close()
    finally:
        ledger.release()
    return location


def test_replica_processes_appending_at_once_never_fork_the_chain(postgres: Any) -> None:
    location = postgres.database("kcp_ledger_race")
    writers = [
        subprocess.Popen([sys.executable, "-c", _APPENDER, location, f"replica-{n}", "60"], stdout=subprocess.PIPE)
        for n in range(3)
    ]
    for writer in writers:
        out, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0 and out.startswith(b"done")
    with readable(location) as path:
        report = verify_ledger(path)
        entries = [entry for _, entry in read_entries(path)]
    assert report.ok, report.problems
    assert report.entries == 3 * 4 * 60
    assert [e["seq"] for e in entries] == list(range(1, 3 * 4 * 60 + 1))  # one chain: no seq twice, none missing
    per = Counter((e["writer"], e["thread"]) for e in entries)
    assert per == Counter({(f"replica-{r}", t): 60 for r in range(3) for t in range(4)})


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE ledger_entries SET line = replace(line, '\"amount\":3', '\"amount\":300') WHERE seq = 4",
        "DELETE FROM ledger_entries WHERE seq = 3",
        "UPDATE ledger_entries SET seq = 100 WHERE seq = 2; UPDATE ledger_entries SET seq = 2 WHERE seq = 5;"
        " UPDATE ledger_entries SET seq = 5 WHERE seq = 100",
    ],
    ids=["edited", "deleted", "reordered"],
)
def test_a_row_changed_in_the_database_is_found_by_audit_verify(postgres: Any, tamper: str) -> None:
    location = _filled(postgres, "kcp_ledger_tamper")
    assert _verify(location)[0] == 0
    _sql(location, tamper)
    code, report, _ = _verify(location)
    assert code == 1 and report["ok"] is False
    assert report["ledger"] == location  # the database named, not a temporary file
    proc = run_cli("audit", "verify", location, "--format", "text")
    assert proc.returncode == 1 and f"{location} seq " in proc.stdout


def test_a_rehashed_edit_breaks_the_next_link(postgres: Any) -> None:
    """An editor who recomputes the entry's own hash still breaks the next entry's previous_hash."""
    location = _filled(postgres, "kcp_ledger_rehash")
    import psycopg

    with psycopg.connect(location, autocommit=True) as connection:
        (line,) = connection.execute("SELECT line FROM ledger_entries WHERE seq = 2").fetchone() or ("",)
        forged = {**json.loads(line), "amount": 9999}
        forged["entry_hash"] = entry_hash(forged)
        connection.execute(
            "UPDATE ledger_entries SET line = %s, entry_hash = %s WHERE seq = 2",
            (canonical_json(forged).decode(), forged["entry_hash"]),
        )
    code, report, _ = _verify(location)
    assert code == 1 and "previous_hash breaks the chain" in report["problems"][0]["message"]


def test_a_moved_head_is_refused_not_extended(postgres: Any) -> None:
    from kcp_opa.trail.pgledger import PostgresLedger

    location = _filled(postgres, "kcp_ledger_head")
    _sql(location, "DELETE FROM ledger_entries WHERE seq = 6")  # cut the tail, head row left as it was
    ledger = PostgresLedger(location)
    try:
        with pytest.raises(LedgerError, match="missing or not canonical"):
            ledger.append({"type": "note"})
        _sql(location, "UPDATE ledger_chain SET seq = 5")  # the head moved back too, its hash left stale
        with pytest.raises(LedgerError, match="is not its last entry's hash"):
            ledger.append({"type": "note"})
    finally:
        ledger.release()
    with readable(location) as path:
        assert [e["seq"] for _, e in read_entries(path)] == [1, 2, 3, 4, 5]  # nothing was built on it


def test_an_entry_inserted_without_the_writer_key_is_refused_and_reported(postgres: Any, tmp_path: Path) -> None:
    from kcp_opa.trail.pgledger import PostgresLedger

    key = generate_ed25519("replica-writer")
    location = _filled(postgres, "kcp_ledger_foreign", checkpoint_key=key)
    public = tmp_path / "public.json"
    public.write_text(json.dumps(Keyring({key.kid: key}).public().to_file_dict(include_private=False)))
    import psycopg

    with psycopg.connect(location, autocommit=True) as connection:
        (line,) = connection.execute("SELECT line FROM ledger_entries WHERE seq = 6").fetchone() or ("",)
        last = json.loads(line)
        forged = {"type": "decision", "decision_id": "dec_forged", "seq": 7, "previous_hash": last["entry_hash"]}
        forged["entry_signature"] = last["entry_signature"]  # a genuine signature, copied
        forged["entry_hash"] = entry_hash(forged)
        connection.execute(
            "INSERT INTO ledger_entries (seq, entry_hash, line) VALUES (7, %s, %s)",
            (forged["entry_hash"], canonical_json(forged).decode()),
        )
        connection.execute("UPDATE ledger_chain SET seq = 7, head_hash = %s", (forged["entry_hash"],))
    code, report, _ = _verify(location, "--keyring", str(public))
    assert code == 1 and "foreign entry: seq 7" in report["problems"][0]["message"]
    ledger = PostgresLedger(location, checkpoint_key=key)
    try:
        with pytest.raises(LedgerError, match="foreign entry"):
            ledger.append({"type": "note"})
        with pytest.raises(LedgerError, match="foreign entry"):
            ledger.close()  # never a signed checkpoint over the forged head
    finally:
        ledger.release()
    with psycopg.connect(location) as connection:
        assert connection.execute("SELECT max(seq) FROM ledger_checkpoints").fetchone() == (6,)


def test_a_cut_committed_while_a_keyed_writer_waits_for_the_head_is_refused(postgres: Any) -> None:
    """A keyed writer's first append verifies the chain against its last checkpoint with the head
    row locked: a cut (entries deleted, the head moved back consistently) committed while the
    writer waited for that lock is refused, never extended. (Verified before taking the lock, the
    writer found the chain whole, then built seq 5 on the cut chain.)"""
    import psycopg

    from kcp_opa.trail.pgledger import PostgresLedger

    key = generate_ed25519("waiting-writer")
    location = _filled(postgres, "kcp_ledger_cut_waiting", checkpoint_key=key)  # checkpoints at seq 1 and 6
    writer = PostgresLedger(location, checkpoint_key=key)  # a restarted replica: it verifies on its first write
    outcome: dict[str, Any] = {}

    def append() -> None:
        try:
            outcome["entry"] = writer.append({"type": "decision", "decision_id": "dec_after"})
        except LedgerError as exc:
            outcome["error"] = str(exc)

    with psycopg.connect(location) as attacker, psycopg.connect(location, autocommit=True) as watcher:
        attacker.execute("SELECT 1 FROM ledger_chain WHERE id = 1 FOR UPDATE")  # the head held
        thread = threading.Thread(target=append)
        thread.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        deadline = time.monotonic() + 30
        while (watcher.execute(waiting).fetchone() or (0,))[0] == 0 and thread.is_alive():
            assert time.monotonic() < deadline, "the writer never waited for the head"
            time.sleep(0.05)
        (kept,) = attacker.execute("SELECT entry_hash FROM ledger_entries WHERE seq = 4").fetchone() or ("",)
        attacker.execute("DELETE FROM ledger_entries WHERE seq > 4")
        attacker.execute("UPDATE ledger_chain SET seq = 4, head_hash = %s WHERE id = 1", (kept,))
        attacker.commit()
    thread.join(60)
    writer.release()
    assert "entry" not in outcome, f"built seq {outcome['entry']['seq']} on the cut chain"
    assert "refusing to extend" in outcome["error"]
    with readable(location) as path:
        assert [e["seq"] for _, e in read_entries(path)] == [1, 2, 3, 4]  # nothing was built on the cut


@pytest.fixture(scope="module")
def support_desk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pg-ledger-bundles") / "support-desk.tar.gz"
    base = DEPLOYMENTS / "support-desk"
    trust = REPO / "fixtures" / "trust" / "registry.yaml"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(trust_path=trust)
    )
    return out


def test_a_database_down_during_appends_is_a_fault_and_loses_nothing(postgres: Any, support_desk: Path) -> None:
    """The ledger's database stopped under concurrent decisions: each ``Gate.decide`` raises
    ``StoreUnavailableError`` (a fault, never a DENY built from the outage), nothing refused is in
    the chain, and the same gate decides and records again once the database is back."""
    from kcp_opa.trail.pgledger import PostgresLedger

    if not postgres.port:
        pytest.skip("an external server (KCP_OPA_TEST_POSTGRES) is not stopped by the tests")
    cases = load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml")
    case = next(c for c in cases if c.case_id == "sd-read-clean")
    location = postgres.database("kcp_ledger_outage")
    ledger = PostgresLedger(location, durability="group")
    gate = vouched_gate(support_desk, ledger=ledger)
    try:
        before = [gate.decide(case.action, now=case.now) for _ in range(3)]
        assert all(d.execution_allowed for d in before)
        postgres.stop()
        try:
            during: list[Any] = []

            def attempt() -> None:
                try:
                    during.append(gate.decide(case.action, now=case.now))
                except StoreUnavailableError as exc:
                    during.append(exc)

            threads = [threading.Thread(target=attempt) for _ in range(4)]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            assert time.monotonic() - started < 2.0  # refused within the store timeout, not after retries
            assert len(during) == 4
            for outcome in during:  # never a decision: no DENY dressed from the outage, no allow
                assert isinstance(outcome, LedgerError) and outcome.code == "store_unavailable", outcome
            with pytest.raises(StoreUnavailableError):
                ledger.append({"type": "note"})
            assert ledger.healthy() is False
        finally:
            postgres.start()
        deadline = time.monotonic() + 30
        while not ledger.healthy():  # the pool reconnects by itself within seconds
            assert time.monotonic() < deadline, "the ledger never answered again"
            time.sleep(0.2)
        after = gate.decide(case.action, now=case.now)  # the same gate, no restart
        assert after.execution_allowed
    finally:
        ledger.release()
    with readable(location) as path:
        report = verify_ledger(path)
        ids = [e.get("decision_id") for _, e in read_entries(path)]
    assert report.ok and report.entries == 4
    assert ids == [d.decision_id for d in [*before, after]]  # every acknowledged decision, none refused
