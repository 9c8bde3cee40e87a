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

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, generate_ed25519, sign_document
from kcp_opa.trail.ledger import GENESIS, AuditLedger, checkpoint_path, entry_hash, tree_path, verify_ledger

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
    # only the checkpoint of the writer's first batch (a new keyed ledger is never without one)
    assert [json.loads(line)["seq"] for line in checkpoint_path(path).read_text().splitlines()] == [1]


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


RECEIPTS = generate_ed25519("receipts-1")


def _rings(tmp_path: Path, *keys: Any, signer: str | None = None) -> Path:
    path = tmp_path / f"ring-{'-'.join(k.kid for k in keys)}-{signer}.json"
    ring = Keyring({k.kid: k for k in keys}, signer)
    path.write_text(json.dumps(ring.to_file_dict(include_private=signer is not None)))
    return path


def _strip_binding(path: Path, *, delete_header: bool) -> None:
    """What an attacker with write access does: drop the writer binding, make seq 1 an ALLOW,
    append a forged execution and re-chain every line (no key needed for any of it), and delete
    the writer's kept tree state beside the file (its root would show the rewrite)."""
    lines = [json.loads(raw) for raw in path.read_bytes().splitlines()]
    header, entries = lines[0], lines[1:]
    header.pop("entry_auth")
    out = [] if delete_header else [canonical_json(header) + b"\n"]
    previous = GENESIS if delete_header else canonical_hash(header)
    entries[0]["decision"] = "ALLOW"
    entries.append({"type": "execution", "note": "paid supplier 9999", "seq": len(entries) + 1})
    for entry in entries:
        entry.pop("entry_signature", None)
        entry.pop("entry_hash", None)
        entry["previous_hash"] = previous
        entry["entry_hash"] = previous = entry_hash(entry)
        out.append(canonical_json(entry) + b"\n")
    path.write_bytes(b"".join(out))
    tree_path(path).unlink()


@pytest.mark.parametrize("delete_header", [False, True], ids=["entry_auth-removed", "header-deleted"])
def test_a_ledger_stripped_of_its_writer_binding_fails_verify_and_is_not_checkpointed(
    tmp_path: Path, delete_header: bool
) -> None:
    path, public = _written(tmp_path)
    _strip_binding(path, delete_header=delete_header)
    assert verify_ledger(path).ok  # the chain holds: that is the attack
    code, report = _verify(path, "--keyring", str(public))
    assert code == 1, "a ledger with its writer binding removed passed audit verify --keyring"
    assert report["problems"][0]["line"] == 1 and "unbound" in report["problems"][0]["message"]
    assert report["writer"] is None and report["entries_authenticated"] is False
    code, report = _verify(path, "--keyring", str(public), "--writer", KEY.kid)
    assert code == 1 and "unbound" in report["problems"][0]["message"]
    # the auditor who knowingly checks an unbound ledger says so, and is warned in text
    code, report = _verify(path, "--keyring", str(public), "--allow-unbound")
    assert code == 0 and report["writer"] is None and report["entries_authenticated"] is False
    proc = run_cli("audit", "verify", str(path), "--keyring", str(public), "--allow-unbound", "--format", "text")
    assert proc.returncode == 0 and "unbound" in proc.stdout
    # the writer's key never signs the forged head, and the writer never extends it
    proc = run_cli("audit", "checkpoint", str(path), "--keyring", str(_rings(tmp_path, KEY, signer=KEY.kid)))
    assert proc.returncode == 1 and "unbound" in proc.stderr and not proc.stdout
    with pytest.raises(LedgerError, match="unbound"):
        AuditLedger(path, checkpoint_key=KEY).append({"type": "decision"})


def test_verify_takes_the_expected_writer_from_the_auditor_not_the_file(tmp_path: Path) -> None:
    path, public = _written(tmp_path)
    assert _verify(path, "--keyring", str(public), "--writer", KEY.kid)[0] == 0
    both = _rings(tmp_path, KEY, RECEIPTS)
    code, report = _verify(path, "--keyring", str(both), "--writer", RECEIPTS.kid)
    assert code == 1 and "names writer 'writer-1', not 'receipts-1'" in report["problems"][0]["message"]
    proc = run_cli("audit", "verify", str(path), "--writer", KEY.kid)
    assert proc.returncode == 2 and "--writer needs --keyring" in proc.stderr


def test_audit_checkpoint_signs_only_the_ledger_its_own_key_writes(tmp_path: Path) -> None:
    """Whatever else the keyring holds: a receipt key that verifies nothing here signs nothing."""
    path, _ = _written(tmp_path)
    proc = run_cli(
        "audit", "checkpoint", str(path), "--keyring", str(_rings(tmp_path, KEY, RECEIPTS, signer="receipts-1"))
    )
    assert proc.returncode == 1 and "not 'receipts-1'" in proc.stderr and not proc.stdout
    proc = run_cli(
        "audit", "checkpoint", str(path), "--allow-unbound",
        "--keyring", str(_rings(tmp_path, KEY, RECEIPTS, signer="receipts-1")),
    )  # fmt: skip
    assert proc.returncode == 1 and not proc.stdout  # --allow-unbound never covers another writer's ledger
    proc = run_cli("audit", "checkpoint", str(path), "--keyring", str(_rings(tmp_path, KEY, signer=KEY.kid)))
    assert proc.returncode == 0 and json.loads(proc.stdout)["seq"] == 3


def test_an_entry_signed_by_another_trusted_key_is_foreign(tmp_path: Path) -> None:
    path, _ = _written(tmp_path)
    last = json.loads(path.read_bytes().splitlines()[-1])
    forged = sign_document(
        {"type": "execution", "note": "paid supplier 9999", "seq": 4, "previous_hash": last["entry_hash"]},
        RECEIPTS,
        "entry_signature",
    )
    forged["entry_hash"] = entry_hash(forged)
    with path.open("ab") as handle:
        handle.write(canonical_json(forged) + b"\n")
    both = _rings(tmp_path, KEY, RECEIPTS)  # the auditor trusts the receipt key too, for receipts
    code, report = _verify(path, "--keyring", str(both))
    assert code == 1, "an entry signed by receipts-1 under a header naming writer-1 passed"
    (problem,) = report["problems"]
    assert problem["line"] == 5 and "seq 4 is signed by 'receipts-1'" in problem["message"]
    assert "foreign entry" in verify_ledger(path).problems[0].message  # visible even without a keyring


def test_a_cut_with_the_checkpoints_deleted_is_refused_by_the_writer(tmp_path: Path) -> None:
    path, public = _written(tmp_path, count=4)
    off_box = tmp_path / "off-box.checkpoints"
    off_box.write_bytes(checkpoint_path(path).read_bytes())
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]))  # header + seq 1..2: every remaining entry is genuine
    checkpoint_path(path).unlink()
    tree_path(path).unlink()  # the writer's kept tree state (seq 4) would show the cut too
    # what the box holds no longer shows the cut; a checkpoint kept off-box does
    assert _verify(path, "--keyring", str(public))[0] == 0
    code, report = _verify(path, "--keyring", str(public), "--checkpoint", str(off_box))
    assert code == 1 and "seq 4 was anchored" in report["problems"][0]["message"]
    with pytest.raises(LedgerError, match=r"no readable checkpoint.*restore audit.jsonl.checkpoints or start a new"):
        AuditLedger(path, checkpoint_key=KEY).append({"type": "decision"})
    with pytest.raises(LedgerError, match="no readable checkpoint"):
        AuditLedger(path, checkpoint_key=KEY).close()
    assert path.read_bytes() == b"".join(lines[:3]) and not checkpoint_path(path).exists()
    # a running writer sees the cut too, with no checkpoint to compare against
    running_path = tmp_path / "running.jsonl"
    running = AuditLedger(running_path, checkpoint_key=KEY, checkpoint_every=1000)
    for index in range(3):
        running.append({"type": "decision", "n": index})
    kept = running_path.read_bytes().splitlines(keepends=True)[:2]
    running_path.write_bytes(b"".join(kept))
    checkpoint_path(running_path).unlink()
    with pytest.raises(LedgerError, match="ends at seq 1 but this writer wrote seq 3"):
        running.append({"type": "decision", "n": 3})
    with pytest.raises(LedgerError, match="cut or rewritten"):
        running.close()
    # a new keyed ledger is checkpointed with its first batch: a writer that died before close
    # leaves a ledger the next writer still extends
    fresh = tmp_path / "fresh.jsonl"
    AuditLedger(fresh, checkpoint_key=KEY).append({"type": "decision"})
    assert AuditLedger(fresh, checkpoint_key=KEY).append({"type": "decision"})["seq"] == 2
    assert verify_ledger(fresh, keyring=Keyring({KEY.kid: KEY}), writer=KEY.kid).authenticated
