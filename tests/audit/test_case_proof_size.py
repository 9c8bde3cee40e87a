"""A proof case (`audit case --proofs`) stays small on a large ledger and holds no other decision.

The large ledger: the supplier payment flow's entries (a real decision, both engines, with its
receipt and attestations) placed in the middle of 100,000 entries of other decisions, written
with the ledger's own entry builder (``LedgerEntry.written``: the same canonical line, hash and
chain the writer makes). A chain case of it would carry every line; the proof case carries the
decision's entries and log2(n) hashes each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.trail.record import LedgerEntry

TRUST = REPO / "fixtures" / "trust"
ENTRIES = 100_000
_CHAIN = {"seq", "previous_hash", "entry_hash"}


def _filler(n: int) -> dict[str, object]:
    member = f"member-{n:06d}"
    return {
        "type": "decision",
        "decision_id": f"dec_other_{n:06d}",
        "timestamp": "2026-12-06T10:00:00Z",
        "input": {"action": {"amount": n, "subject_id": member, "tool": "pay_supplier"}},
        "result": {"allow": n % 2 == 0, "reasons": ["synthetic"]},
    }


def _large_ledger(demo: Path, path: Path) -> int:
    """The demo's entries re-chained after ENTRIES / 2 others and before as many; returns the head seq."""
    header, *lines = demo.read_bytes().split(b"\n")[:-1]
    events = [{k: v for k, v in json.loads(line).items() if k not in _CHAIN} for line in lines]
    half = ENTRIES // 2
    stream = [*(_filler(n) for n in range(half)), *events, *(_filler(n) for n in range(half, ENTRIES))]
    previous, out = canonical_hash(json.loads(header)), [header]
    for seq, event in enumerate(stream, start=1):
        entry, line = LedgerEntry.written(event, seq, previous)
        previous = entry.entry_hash
        out.append(line)
    path.write_bytes(b"\n".join(out) + b"\n")
    return len(stream)


def test_proof_case_for_one_decision_stays_under_a_megabyte_at_100k_entries(tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundles / "finance.tar.gz",
        options=CompileOptions(trust_path=TRUST / "registry.yaml"),
    )  # fmt: skip
    demo = tmp_path / "demo.jsonl"
    env = {**os.environ, "KCP_OPA_LEDGER": str(demo), "KCP_OPA_BUNDLES": str(bundles)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "supplier_payment_flow.py")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    decision_id = next(json.loads(line)["decision_id"] for line in demo.read_text().splitlines()[1:])
    ledger = tmp_path / "large.jsonl"
    started = time.monotonic()
    head = _large_ledger(demo, ledger)
    built = time.monotonic() - started
    assert head > ENTRIES and ledger.stat().st_size > 20_000_000
    keys = tmp_path / "log-keys.json"
    assert run_cli("receipt", "keygen", "--kid", "log-1", "--keyring", str(keys)).returncode == 0
    case = tmp_path / "case"
    started = time.monotonic()
    made = run_cli(
        "audit", "case", str(ledger), decision_id, "-o", str(case), "--bundles", str(bundles),
        "--trust", str(TRUST / "registry.yaml"), "--proofs", "--keyring", str(keys),
        "--receipt", str(tmp_path / "demo-receipt.json"), "--receipt-keyring", str(tmp_path / "demo-receipt-keys.json"),
    )  # fmt: skip
    gathered = time.monotonic() - started
    assert made.returncode == 0, made.stderr
    files = [p for p in case.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"ledger of {head} entries built in {built:.1f}s; proof case gathered in {gathered:.1f}s: {size} bytes")
    assert size < 1_000_000
    assert not [p for p in files if b"dec_other_" in p.read_bytes()]  # no other decision's id or input
    document = json.loads((case / "case.json").read_text())
    assert document["checkpoint_seq"] == head and all(ENTRIES // 2 < s <= ENTRIES // 2 + 100 for s in document["seqs"])
    proof = json.loads((case / "proofs" / f"{document['seqs'][0]:06d}.json").read_text())
    assert len(proof["hashes"]) <= (head - 1).bit_length()  # at most log2(n) hashes: 17 at 100,000 entries
    verified = run_cli(
        "audit", "case", "verify", str(case), "--format", "json", "--trust", str(TRUST / "registry.yaml"),
        "--receipt-keyring", str(tmp_path / "demo-receipt-keys.json"),
    )  # fmt: skip
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["ok"], [c for c in report["checks"] if c["ok"] is False]
