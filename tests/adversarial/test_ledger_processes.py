"""Attack: several writer processes on one file ledger (``serve --workers N`` shares it) fork the
chain or lose an acknowledged entry when one reads the head while another appends.

Four spawned processes of four threads each append to one keyed ledger at once (group commit,
a checkpoint every few entries): every acknowledged entry is in the file once, the seqs run
1..n without a gap or a repeat, and the chain and its checkpoints verify with the writer's key.
The file's exclusive ``flock`` around read-head + append is what holds it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kcp_opa.core.signing import Keyring, hmac_key
from kcp_opa.trail.ledger import read_entries, verify_ledger

_WRITER = """
import sys, threading
from kcp_opa.core.signing import hmac_key
from kcp_opa.trail.ledger import AuditLedger
key = hmac_key("ck-procs", b"checkpoint-secret-0123456789abcdef")
ledger = AuditLedger(sys.argv[1], durability="group", checkpoint_key=key, checkpoint_every=7)
lock = threading.Lock()
def writer(n):
    for i in range(40):
        entry = ledger.append({"type": "decision", "writer": sys.argv[2], "thread": n, "i": i})
        with lock:
            print(entry["entry_hash"], flush=True)
threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
ledger.close()
"""


def test_four_writer_processes_extend_one_chain_without_a_fork_or_a_loss(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(n)], stdout=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    acknowledged: list[str] = []
    for process in writers:
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0
        acknowledged += out.split()
    entries = [e for _, e in read_entries(path)]
    assert len(acknowledged) == 4 * 4 * 40
    assert sorted(e["entry_hash"] for e in entries) == sorted(acknowledged)  # each once, none lost
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    key = hmac_key("ck-procs", b"checkpoint-secret-0123456789abcdef")
    report = verify_ledger(path, keyring=Keyring({key.kid: key}), writer=key.kid)
    assert report.ok and report.authenticated, report.problems
