"""Attacks on the audit ledger: cut tails, re-chained rewrites, regenerated files, repair of a
file that is not a ledger, symlinks, and phantom entries left by a failed group-commit batch.

Each of these verified "ok" or damaged a file on the code before signed checkpoints, the ledger
header, O_NOFOLLOW and batch rollback existed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.ledger import AuditLedger, entry_hash, verify_ledger


def _ledger(path: Path, count: int, tag: str = "a") -> Path:
    ledger = AuditLedger(path)
    for index in range(count):
        ledger.append({"type": "decision", "n": index, "tag": tag})
    return path


def _keyrings(tmp_path: Path) -> tuple[Path, Path]:
    """A private keyring (signs checkpoints on the box) and its public half (kept by the auditor)."""
    ring = Keyring({"ckpt-1": generate_ed25519("ckpt-1")}, "ckpt-1")
    tmp_path.mkdir(parents=True, exist_ok=True)
    private, public = tmp_path / "ring.json", tmp_path / "public.json"
    private.write_text(json.dumps(ring.to_file_dict(include_private=True)))
    public.write_text(json.dumps(ring.public().to_file_dict(include_private=False)))
    return private, public


def _checkpoint(tmp_path: Path, ledger: Path) -> tuple[Path, Path]:
    private, public = _keyrings(tmp_path)
    out = tmp_path / "off-box" / "head.json"
    # the operator's checkpoint key is not the writer's (the writer has no key): the head is anchored unbound
    proc = run_cli("audit", "checkpoint", str(ledger), "--keyring", str(private), "--allow-unbound", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out, public


def _verify(ledger: Path, *extra: str) -> tuple[int, dict[str, object]]:
    proc = run_cli("audit", "verify", str(ledger), *extra, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _rechain(lines: list[bytes], start: int, change: dict[str, object]) -> list[bytes]:
    """Rewrite every entry from line index ``start`` on and recompute the chain, as an attacker would."""
    previous = json.loads(lines[start - 1]).get("entry_hash") or canonical_hash(json.loads(lines[start - 1]))
    out = lines[:start]
    for raw in lines[start:]:
        entry = {**json.loads(raw), **change, "previous_hash": previous}
        entry["entry_hash"] = previous = entry_hash(entry)
        out.append(canonical_json(entry) + b"\n")
    return out


def test_ledger_cut_at_an_entry_boundary_is_detected_by_a_checkpoint(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "audit.jsonl", 6)
    checkpoint, public = _checkpoint(tmp_path, ledger)
    code, report = _verify(ledger, "--checkpoint", str(checkpoint), "--keyring", str(public), "--allow-unbound")
    assert code == 0 and report["head"] == f"6:{json.loads(checkpoint.read_text())['entry_hash']}"
    ledger.write_bytes(b"".join(ledger.read_bytes().splitlines(keepends=True)[:5]))  # drop the newest 2
    assert verify_ledger(ledger).ok  # the chain alone cannot see it
    code, report = _verify(ledger, "--checkpoint", str(checkpoint), "--keyring", str(public), "--allow-unbound")
    assert code == 1 and "truncated" in str(report["problems"])
    head = json.loads(checkpoint.read_text())
    code, report = _verify(ledger, "--expect-head", f"{head['seq']}:{head['entry_hash']}")
    assert code == 1


def test_ledger_rechained_rewritten_tail_is_detected(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "audit.jsonl", 6)
    checkpoint, public = _checkpoint(tmp_path, ledger)
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(_rechain(lines, 4, {"tag": "forged"})))  # entries 4..6 rewritten
    assert verify_ledger(ledger).ok
    code, report = _verify(ledger, "--checkpoint", str(checkpoint), "--keyring", str(public), "--allow-unbound")
    assert code == 1 and "differs from the anchored checkpoint" in str(report["problems"])


def test_ledger_regenerated_file_is_detected(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "audit.jsonl", 4)
    checkpoint, public = _checkpoint(tmp_path, ledger)
    ledger.unlink()
    _ledger(ledger, 9, tag="regenerated")  # a whole new, internally consistent file
    assert verify_ledger(ledger).ok
    code, report = _verify(ledger, "--checkpoint", str(checkpoint), "--keyring", str(public), "--allow-unbound")
    assert code == 1 and not report["ok"]


def test_ledger_checkpoint_signed_by_another_key_is_refused(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "audit.jsonl", 3)
    checkpoint, _ = _checkpoint(tmp_path, ledger)
    _, stranger = _keyrings(tmp_path / "other")
    proc = run_cli(
        "audit", "verify", str(ledger), "--checkpoint", str(checkpoint), "--keyring", str(stranger), "--allow-unbound"
    )
    assert proc.returncode == 1 and "signature does not verify" in proc.stderr


def test_ledger_writes_signed_checkpoints_every_n_entries_and_on_close(tmp_path: Path) -> None:
    from kcp_opa.trail.checkpoint import read_checkpoints

    key = generate_ed25519("ckpt-1")
    path = tmp_path / "audit.jsonl"
    ledger = AuditLedger(path, checkpoint_key=key, checkpoint_every=3)
    for index in range(7):
        ledger.append({"type": "decision", "n": index})
    ledger.close()
    seqs = [c.seq for c in read_checkpoints(path.with_name("audit.jsonl.checkpoints"))]
    assert seqs == [1, 3, 6, 7]  # the first batch of a new keyed ledger is checkpointed too
    public = tmp_path / "public.json"
    public.write_text(json.dumps(Keyring({"ckpt-1": key}).public().to_file_dict(include_private=False)))
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:7]))  # cut entry 7
    code, report = _verify(
        path, "--checkpoint", str(path.with_name("audit.jsonl.checkpoints")), "--keyring", str(public)
    )
    assert code == 1 and "seq 7 was anchored" in str(report["problems"])


def test_ledger_empty_file_is_not_ok_and_verify_prints_the_head(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, report = _verify(empty)
    assert code == 1 and report["entries"] == 0
    ledger = _ledger(tmp_path / "audit.jsonl", 2)
    last = json.loads(ledger.read_bytes().splitlines()[-1])
    proc = run_cli("audit", "verify", str(ledger), "--format", "text")
    assert proc.returncode == 0 and f"head 2:{last['entry_hash']}" in proc.stdout


def test_ledger_repair_never_cuts_a_file_that_is_not_a_ledger(tmp_path: Path) -> None:
    notes = tmp_path / "notes.yaml"
    original = b"# my notes\nowner: me\nlast line without newline"
    notes.write_bytes(original)
    with pytest.raises(LedgerError, match="not a kcp-opa audit ledger"):
        AuditLedger(notes).append({"type": "decision"})
    assert notes.read_bytes() == original


def test_ledger_symlink_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.jsonl"
    _ledger(victim, 2)
    before = victim.read_bytes()
    link = tmp_path / "audit.jsonl"
    link.symlink_to(victim)
    with pytest.raises(LedgerError, match="symlink"):
        AuditLedger(link).append({"type": "decision", "planted": True})
    assert victim.read_bytes() == before


def test_ledger_headerless_legacy_file_still_verifies_and_appends(tmp_path: Path) -> None:
    """Backward compatibility: ledgers written before the header keep working, headerless."""
    path = _ledger(tmp_path / "old.jsonl", 3)
    lines = path.read_bytes().splitlines(keepends=True)
    legacy = _rechain([b'{"entry_hash":"sha256:' + b"0" * 64 + b'"}\n', *lines[1:]], 1, {})[1:]
    path.write_bytes(b"".join(legacy))
    assert verify_ledger(path).ok and not verify_ledger(path).headed
    AuditLedger(path).append({"type": "decision", "n": 3})
    report = verify_ledger(path)
    assert report.ok and report.entries == 4
    path.write_bytes(path.read_bytes() + b'{"torn":')
    with pytest.raises(LedgerError, match="headerless"):
        AuditLedger(path).append({"type": "decision"})  # never cut without the header's proof


_DISK_FULL = """
import json, resource, signal, sys, threading
from kcp_opa.trail.ledger import AuditLedger
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG, like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
ledger = AuditLedger(sys.argv[1], durability="group")
lock = threading.Lock()
def writer(n):
    for i in range(60):
        try:
            entry = ledger.append({"type": "decision", "w": n, "i": i, "pad": "x" * 1500})
            with lock:
                print("ACK", entry["entry_hash"], flush=True)
        except Exception as exc:
            with lock:
                print("FAIL", type(exc).__name__, flush=True)
threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
[t.start() for t in threads]
[t.join() for t in threads]
"""


@pytest.mark.parametrize("limit", [30_011, 50_023, 70_001, 110_003])
def test_ledger_full_disk_in_group_mode_leaves_no_phantom_entry(tmp_path: Path, limit: int) -> None:
    """A batch that hits a full disk is cut back to its start: only acknowledged entries remain."""
    path = tmp_path / "audit.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", _DISK_FULL, str(path), str(limit)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    acknowledged = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ACK")}
    assert any(line.startswith("FAIL") for line in proc.stdout.splitlines())
    on_disk = {json.loads(line)["entry_hash"] for line in path.read_bytes().splitlines()[1:] if line.endswith(b"}")}
    assert on_disk - acknowledged == set(), f"{len(on_disk - acknowledged)} phantom entries"
    assert verify_ledger(path).ok and os.path.getsize(path) <= limit


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_ledger_real_full_tmpfs_in_group_mode_leaves_no_phantom_entry(tmp_path: Path) -> None:
    """The same with a real ENOSPC: a 192 KiB tmpfs filled by 16 writer threads."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)], check=True)
    try:
        path = mount / "audit.jsonl"
        proc = subprocess.run(
            [sys.executable, "-c", _DISK_FULL, str(path), str(1 << 40)], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        acknowledged = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ACK")}
        assert any(line.startswith("FAIL") for line in proc.stdout.splitlines())
        on_disk = {json.loads(line)["entry_hash"] for line in path.read_bytes().splitlines()[1:] if line.endswith(b"}")}
        assert on_disk - acknowledged == set(), f"{len(on_disk - acknowledged)} phantom entries"
        assert verify_ledger(path).ok
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_ledger_torn_header_from_a_killed_first_writer_is_repaired(tmp_path: Path) -> None:
    path = _ledger(tmp_path / "audit.jsonl", 1)
    path.write_bytes(path.read_bytes()[:40])  # the first batch died mid-header: nothing acknowledged
    AuditLedger(path).append({"type": "decision", "n": "after"})
    report = verify_ledger(path)
    assert report.ok and report.entries == 1 and report.headed
