"""Attacks on a ledger's writer binding: entries appended by someone without the writer's key.

The hash chain has no secret: anyone who can write the file can append an entry with the right
seq and previous_hash. Before entries carried the writer's signature, such an entry passed
``audit verify`` against the off-box checkpoints, and the gate's next checkpoint signed a head
that included it. Now ``audit verify --keyring`` names it as a foreign entry, and the writer
refuses to extend or checkpoint the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_cli
from trustkit import compile_with_trust

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.ledger import AuditLedger, checkpoint_path, entry_hash, verify_ledger

KEY = generate_ed25519("writer-1")


def _written(tmp_path: Path, count: int = 3) -> tuple[Path, Path]:
    """A ledger of ``count`` entries by the keyed writer, closed (a checkpoint of its head), and
    the writer's public keyring as the auditor keeps it."""
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path, checkpoint_key=KEY, checkpoint_every=1000)
    for index in range(count):
        ledger.append({"type": "decision", "n": index})
    assert ledger.close() is not None
    public = tmp_path / "public.json"
    public.write_text(json.dumps(Keyring({KEY.kid: KEY}).public().to_file_dict(include_private=False)))
    return path, public


def _append_chained(path: Path, entry: dict[str, Any], *, forge_from: int | None = None) -> dict[str, Any]:
    """Append a validly chained entry as an attacker with write access but no key would."""
    last = json.loads(path.read_bytes().splitlines()[-1])
    forged = {**entry, "seq": last["seq"] + 1, "previous_hash": last["entry_hash"]}
    if forge_from is not None:  # a writer signature copied from a genuine entry
        genuine = json.loads(path.read_bytes().splitlines()[forge_from])
        forged["entry_signature"] = genuine["entry_signature"]
    forged["entry_hash"] = entry_hash(forged)
    with path.open("ab") as handle:
        handle.write(canonical_json(forged) + b"\n")
    return forged


def _verify(path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("audit", "verify", str(path), *extra, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("forge_from", [None, 1], ids=["unsigned", "copied-signature"])
def test_an_entry_appended_without_the_key_fails_verify_and_the_writer_refuses_it(
    tmp_path: Path, forge_from: int | None
) -> None:
    path, public = _written(tmp_path)
    checkpoints = checkpoint_path(path)
    code, report = _verify(path, "--checkpoint", str(checkpoints), "--keyring", str(public))
    assert code == 0
    authenticated_before = (report.get("entries_authenticated"), report.get("writer"))
    forged = _append_chained(path, {"type": "execution", "note": "paid supplier 9999"}, forge_from=forge_from)
    assert forged["seq"] == 4
    # the chain holds (that is the attack); without the key only a missing signature shows ...
    assert verify_ledger(path).ok is (forge_from is not None)
    # ... but the auditor, with the writer's public key and the off-box checkpoint, names the entry
    code, report = _verify(path, "--checkpoint", str(checkpoints), "--keyring", str(public))
    assert code == 1, "a validly chained entry appended without the writer's key passed audit verify"
    (problem,) = report["problems"]
    assert problem["line"] == 5 and "foreign entry: seq 4" in problem["message"]
    # and the writer neither extends nor checkpoints past it, in a new process or the same one
    before, marks = path.read_bytes(), checkpoints.read_bytes()
    for ledger in (AuditLedger(path, checkpoint_key=KEY), AuditLedger(path, checkpoint_key=KEY, durability="group")):
        with pytest.raises(LedgerError, match="foreign entry: seq 4"):
            ledger.append({"type": "decision", "n": 99})
        with pytest.raises(LedgerError, match="foreign entry: seq 4"):
            ledger.close()
    assert path.read_bytes() == before and checkpoints.read_bytes() == marks
    private = tmp_path / "ring.json"
    private.write_text(json.dumps(Keyring({KEY.kid: KEY}, KEY.kid).to_file_dict(include_private=True)))
    proc = run_cli("audit", "checkpoint", str(path), "--signing-key", str(private))
    assert proc.returncode == 1 and "foreign entry: seq 4" in proc.stderr and not proc.stdout
    assert authenticated_before == (True, "writer-1")


def test_a_running_writer_refuses_an_entry_appended_between_its_writes(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path, checkpoint_key=KEY, checkpoint_every=2)
    ledger.append({"type": "decision", "n": 0})
    _append_chained(path, {"type": "decision", "n": "planted"})
    with pytest.raises(LedgerError, match="foreign entry: seq 2"):
        ledger.append({"type": "decision", "n": 1})  # would have reached checkpoint_every
    assert not checkpoint_path(path).exists()


def test_a_rewritten_signed_entry_and_a_regenerated_file_are_caught(tmp_path: Path) -> None:
    path, public = _written(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[2])
    entry["n"] = 42  # change a signed entry and re-hash it (its signature no longer matches)
    entry["entry_hash"] = entry_hash(entry)
    path.write_bytes(b"".join([*lines[:2], canonical_json(entry) + b"\n", *lines[3:]]))
    code, report = _verify(path, "--keyring", str(public))
    assert code == 1 and report["problems"][0]["line"] == 3
    with pytest.raises(LedgerError):
        AuditLedger(path, checkpoint_key=KEY).append({"type": "decision"})
    # a file regenerated without the key: the header names no writer, the writer refuses it
    regenerated = tmp_path / "regenerated.jsonl"
    AuditLedger(regenerated).append({"type": "decision"})
    with pytest.raises(LedgerError, match="not started by a writer key"):
        AuditLedger(regenerated, checkpoint_key=KEY).append({"type": "decision"})
    # another key's ledger is not this writer's either
    other = tmp_path / "other.jsonl"
    AuditLedger(other, checkpoint_key=generate_ed25519("writer-1")).append({"type": "decision"})
    with pytest.raises(LedgerError, match="foreign entry: seq 1"):
        AuditLedger(other, checkpoint_key=KEY).append({"type": "decision"})


def test_the_writer_verifies_the_whole_file_against_its_last_checkpoint_on_open(tmp_path: Path) -> None:
    path, _ = _written(tmp_path, count=4)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))  # cut the checkpointed head: every remaining entry is genuine
    with pytest.raises(LedgerError, match="seq 4 was anchored"):
        AuditLedger(path, checkpoint_key=KEY).append({"type": "decision"})
    path.write_bytes(b"".join(lines))
    assert AuditLedger(path, checkpoint_key=KEY).append({"type": "decision"})["seq"] == 5
    assert verify_ledger(path, keyring=Keyring({KEY.kid: KEY})).authenticated


def test_the_gate_fails_closed_over_a_foreign_entry_and_checkpoints_only_its_own_head(tmp_path: Path) -> None:
    bundle = compile_with_trust(tmp_path / "finance.tar.gz")
    ring = tmp_path / "ring.json"
    ring.write_text(json.dumps(Keyring({KEY.kid: KEY}, KEY.kid).to_file_dict(include_private=True)))
    path = tmp_path / "audit.jsonl"
    action = str(REPO / "fixtures" / "kya-supplier-payment-action.json")
    args = ("decide", "--bundle", str(bundle), "--input", action, "--now", "2026-11-29T10:00:00Z")
    keyed = (*args, "--ledger", str(path), "--ledger-key", str(ring), "--format", "json")
    proc = run_cli(*keyed)
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    marks = checkpoint_path(path).read_bytes()
    assert [json.loads(line)["seq"] for line in marks.splitlines()] == [1]
    _append_chained(path, {"type": "decision", "decision": "ALLOW", "note": "planted"})
    proc = run_cli(*keyed)
    assert proc.returncode == 0, proc.stderr
    refused = json.loads(proc.stdout)
    assert refused["reason_codes"] == ["audit_unavailable"] and refused["execution_allowed"] is False
    assert first["reason_codes"] != ["audit_unavailable"]
    assert "foreign entry: seq 2" in proc.stderr and checkpoint_path(path).read_bytes() == marks
