"""``audit tree-checkpoint``/``prove-*``/``verify-*`` and ``witness``, as an operator and an auditor run them,
on a file ledger and on a PostgreSQL ledger."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from issuingkit import keyring_file

from kcp_opa.core.signing import generate_ed25519
from kcp_opa.trail.ledger import AuditLedger
from kcp_opa.trail.merkle import MerkleTree


def _ok(*args: str) -> str:
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _append(ledger: Path, keyring: Path, start: int, stop: int) -> None:
    from kcp_opa.core.signing import load_keyring

    written = AuditLedger(ledger, checkpoint_key=load_keyring(keyring).signer())
    for n in range(start, stop):
        written.append({"type": "decision", "decision_id": f"dec_{n}", "amount": n})


@pytest.fixture
def log(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "ledger": tmp_path / "ledger.jsonl",
        "writer": keyring_file(tmp_path / "writer.json", generate_ed25519("writer")),
        "witness": keyring_file(tmp_path / "witness.json", generate_ed25519("w1")),
        "dir": tmp_path,
    }
    _append(paths["ledger"], paths["writer"], 0, 9)
    (tmp_path / "log.vkey").write_text(
        _ok("audit", "tree-key", str(paths["ledger"]), "--keyring", str(paths["writer"]))
    )
    (tmp_path / "w1.vkey").write_text(
        _ok("witness", "key", "--keyring", str(paths["witness"]), "--name", "witness.example/w1")
    )
    return paths


def test_an_auditor_verifies_one_entry_with_only_the_proof_the_checkpoint_and_the_key(log: dict[str, Path]) -> None:
    d = log["dir"]
    _ok("audit", "tree-checkpoint", str(log["ledger"]), "--keyring", str(log["writer"]), "-o", str(d / "c9"))
    _ok("audit", "prove-inclusion", str(log["ledger"]), "4", "--checkpoint", str(d / "c9"), "-o", str(d / "p4.json"))
    alone = d / "auditor"
    alone.mkdir()
    for name in ("c9", "p4.json", "log.vkey"):
        (alone / name).write_bytes((d / name).read_bytes())
    log["ledger"].unlink()  # the auditor never sees the ledger
    checked = json.loads(
        _ok(
            "audit",
            "verify-inclusion",
            str(alone / "p4.json"),
            "--checkpoint",
            str(alone / "c9"),
            "--log-key",
            str(alone / "log.vkey"),
        )
    )
    assert checked["ok"] is True and checked["seq"] == 4 and checked["decision_id"] == "dec_3"
    assert checked["tree_size"] == 9


def test_the_leaves_are_the_stored_lines(log: dict[str, Path]) -> None:
    """The checkpoint's root is the RFC 9162 root of the ledger's entry lines, without their newlines."""
    note = _ok("audit", "tree-checkpoint", str(log["ledger"]), "--keyring", str(log["writer"]))
    lines = log["ledger"].read_bytes().split(b"\n")[1:-1]
    assert note.split("\n")[2] == base64.b64encode(MerkleTree.of(lines).root()).decode()
    assert note.split("\n")[1] == "9"


def test_the_witness_cosigns_along_one_history_and_verify_can_require_it(log: dict[str, Path]) -> None:
    d, ledger, writer = log["dir"], str(log["ledger"]), str(log["writer"])
    witness = (
        "--state",
        str(d / "w1.state"),
        "--log-key",
        str(d / "log.vkey"),
        "--keyring",
        str(log["witness"]),
        "--name",
        "witness.example/w1",
    )
    _ok("audit", "tree-checkpoint", ledger, "--keyring", writer, "-o", str(d / "c9"))
    _ok("witness", "cosign", str(d / "c9"), *witness, "-o", str(d / "c9.w"))
    assert stat.S_IMODE((d / "w1.state").stat().st_mode) == 0o600
    _append(log["ledger"], log["writer"], 9, 14)
    _ok("audit", "tree-checkpoint", ledger, "--keyring", writer, "-o", str(d / "c14"))

    refused = run_cli("witness", "cosign", str(d / "c14"), *witness)
    assert refused.returncode == 1 and "consistency proof from size 9 to 14" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    _ok("audit", "prove-consistency", ledger, str(d / "c9"), str(d / "c14"), "-o", str(d / "k.json"))
    _ok("witness", "cosign", str(d / "c14"), *witness, "--proof", str(d / "k.json"), "-o", str(d / "c14.w"))
    keys = ("--log-key", str(d / "log.vkey"), "--witness-key", str(d / "w1.vkey"), "--witnesses", "1")
    checked = json.loads(
        _ok(
            "audit", "verify-consistency", str(d / "k.json"), "--old", str(d / "c9.w"), "--new", str(d / "c14.w"), *keys
        )
    )
    assert (checked["old_size"], checked["new_size"]) == (9, 14)
    shown = json.loads(_ok("witness", "show", "--state", str(d / "w1.state")))
    assert [v["size"] for v in shown.values()] == [14]


def test_bad_input_is_one_line_naming_what_to_fix(log: dict[str, Path]) -> None:
    d = log["dir"]
    (d / "bad.vkey").write_text("not a key\n")
    _ok("audit", "tree-checkpoint", str(log["ledger"]), "--keyring", str(log["writer"]), "-o", str(d / "c9"))
    _ok("audit", "prove-inclusion", str(log["ledger"]), "2", "--checkpoint", str(d / "c9"), "-o", str(d / "p.json"))
    only_writer = ("--log-key", str(d / "log.vkey"), "--witness-key", str(d / "w1.vkey"), "--witnesses", "1")
    for args, said in (
        (("verify-inclusion", str(d / "p.json"), "--checkpoint", str(d / "c9"), *only_writer), "0 valid witness"),
        (
            ("verify-inclusion", str(d / "p.json"), "--checkpoint", str(d / "c9"), "--log-key", str(d / "bad.vkey")),
            "NAME+",
        ),
        (
            ("verify-inclusion", str(d / "p.json"), "--checkpoint", str(d / "c9"), "--log-key", str(d / "w1.vkey")),
            "not a log key",
        ),
        (("prove-inclusion", str(log["ledger"]), "10", "--checkpoint", str(d / "c9")), "seq 10 is not among"),
        (
            ("verify-inclusion", str(d / "c9"), "--checkpoint", str(d / "c9"), "--log-key", str(d / "log.vkey")),
            "not a JSON proof",
        ),
    ):
        proc = run_cli("audit", *args)
        assert proc.returncode == 1, (args, proc.stderr)
        assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    edited = log["ledger"].read_bytes().replace(b'"dec_1"', b'"dec_X"')
    log["ledger"].write_bytes(edited)  # after the checkpoint: no proof against it any more
    proc = run_cli("audit", "prove-inclusion", str(log["ledger"]), "5", "--checkpoint", str(d / "c9"))
    assert proc.returncode == 1 and "do not hash to the checkpoint's root" in proc.stderr


@pytest.mark.postgres
def test_a_postgresql_ledger_proves_through_the_same_commands(postgres: Any, tmp_path: Path) -> None:
    import psycopg

    from kcp_opa.core.signing import load_keyring
    from kcp_opa.trail.pgledger import PostgresLedger

    writer = keyring_file(tmp_path / "writer.json", generate_ed25519("writer"))
    location = postgres.database("kcp_ledger_tree")
    ledger = PostgresLedger(location, checkpoint_key=load_keyring(writer).signer())
    try:
        for n in range(11):
            ledger.append({"type": "decision", "decision_id": f"dec_{n}", "amount": n})
    finally:
        ledger.release()
    (tmp_path / "log.vkey").write_text(_ok("audit", "tree-key", location, "--keyring", str(writer)))
    _ok("audit", "tree-checkpoint", location, "--keyring", str(writer), "-o", str(tmp_path / "c"))
    _ok("audit", "prove-inclusion", location, "7", "--checkpoint", str(tmp_path / "c"), "-o", str(tmp_path / "p.json"))
    checked = json.loads(
        _ok(
            "audit",
            "verify-inclusion",
            str(tmp_path / "p.json"),
            "--checkpoint",
            str(tmp_path / "c"),
            "--log-key",
            str(tmp_path / "log.vkey"),
        )
    )
    assert checked["decision_id"] == "dec_6"
    with psycopg.connect(location) as connection:
        rows = connection.execute("SELECT line FROM ledger_entries ORDER BY seq").fetchall()
    root = (tmp_path / "c").read_text().split("\n")[2]
    assert root == base64.b64encode(MerkleTree.of(row[0].encode() for row in rows).root()).decode()
