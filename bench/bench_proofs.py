"""Benchmark rows for the ledger's Merkle proofs: tree build, proof generation and verification by size.

Not a test. For 10^3, 10^5 and 10^6 leaves: the time to build the tree, to compute the root,
to generate and to verify an inclusion proof and a consistency proof (median over sampled
indexes and sizes), and the proof length in hashes, which grows with log2(n). Leaves are
synthetic bytes the size of a ledger entry (about 600 bytes), so the 10^6 row needs no
million-entry ledger. One more row reads a real ledger file of ``--ledger-entries`` entries
(written with the writer's own serialisation, ``LedgerEntry.written``, without fsync) through
``LedgerTree.read``, as `audit tree-checkpoint` and `audit prove-inclusion` do. Writes
bench/results-proofs.json and prints a table.

    .venv/bin/python bench/bench_proofs.py [--sizes 1000,100000,1000000] [--samples 200]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.merkle import MerkleTree, leaf_hash, verify_consistency, verify_inclusion
from kcp_opa.trail.record import LedgerEntry

REPO = Path(__file__).resolve().parent.parent
PAD = "x" * 480


def _leaf(n: int) -> bytes:
    return b'{"amount":%d,"decision_id":"dec_%d","pad":"%s","seq":%d}' % (n, n, PAD.encode(), n + 1)


def _median_us(run: Callable[[], Any], count: int) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _row(size: int, samples: int, rng: random.Random) -> dict[str, Any]:
    start = time.perf_counter()
    tree = MerkleTree.of(_leaf(n) for n in range(size))
    build = time.perf_counter() - start
    held = sum(len(level) for level in tree._levels)  # the hashes it keeps (a bench may look inside)
    root_us = _median_us(tree.root, samples)
    indexes = [rng.randrange(size) for _ in range(samples)]
    olds = [rng.randrange(1, size) for _ in range(samples)]
    generate, check, lengths = [], [], []
    for index in indexes:
        t0 = time.perf_counter()
        proof = tree.inclusion_proof(index)
        t1 = time.perf_counter()
        assert verify_inclusion(leaf_hash(_leaf(index)), index, size, proof, tree.root())
        t2 = time.perf_counter()
        generate.append(t1 - t0)
        check.append(t2 - t1)
        lengths.append(len(proof))
    root = tree.root()
    c_generate, c_check, c_lengths = [], [], []
    for old in olds:
        old_root = tree.root(old)
        t0 = time.perf_counter()
        proof = tree.consistency_proof(old)
        t1 = time.perf_counter()
        assert verify_consistency(old, size, old_root, root, proof)
        t2 = time.perf_counter()
        c_generate.append(t1 - t0)
        c_check.append(t2 - t1)
        c_lengths.append(len(proof))
    return {
        "leaves": size,
        "build_s": round(build, 3),
        "build_leaves_per_s": round(size / build),
        "tree_bytes": held,
        "root_us": round(root_us, 1),
        "inclusion_generate_us": round(statistics.median(generate) * 1e6, 1),
        "inclusion_verify_us": round(statistics.median(check) * 1e6, 1),
        "inclusion_hashes_max": max(lengths),
        "consistency_generate_us": round(statistics.median(c_generate) * 1e6, 1),
        "consistency_verify_us": round(statistics.median(c_check) * 1e6, 1),
        "consistency_hashes_max": max(c_lengths),
        "log2_n": math.ceil(math.log2(size)),
    }


def _ledger_row(entries: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.jsonl"
        header = {"created_at": "2026-12-01T00:00:00.000000Z", "kcp_opa_ledger": 1, "ledger_id": "b" * 32}
        previous = canonical_hash(header)
        start = time.perf_counter()
        with path.open("wb") as out:
            out.write(canonical_json(header) + b"\n")
            for n in range(entries):
                event = {"type": "decision", "decision_id": f"dec_{n}", "amount": n, "pad": PAD}
                entry, line = LedgerEntry.written(event, n + 1, previous)
                previous = entry.entry_hash
                out.write(line + b"\n")
        written = time.perf_counter() - start
        start = time.perf_counter()
        tree = LedgerTree.read(path, keep=frozenset({entries // 2}))
        read = time.perf_counter() - start
        digest = hashlib.sha256(tree.tree.root()).hexdigest()[:16]
        return {
            "ledger_entries": entries,
            "ledger_bytes": path.stat().st_size,
            "write_s": round(written, 2),
            "tree_read_s": round(read, 2),
            "tree_read_entries_per_s": round(entries / read),
            "root_sha256_prefix": digest,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--ledger-entries", type=int, default=100_000, help="0 skips the real-ledger row")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results-proofs.json")
    args = parser.parse_args()
    rng = random.Random(45)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.append(_row(size, args.samples, rng))
        print(json.dumps(rows[-1]), flush=True)
    ledger = _ledger_row(args.ledger_entries) if args.ledger_entries else None
    if ledger is not None:
        print(json.dumps(ledger), flush=True)
    document = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": __import__("os").cpu_count(),
        },
        "leaf_bytes": len(_leaf(0)),
        "samples": args.samples,
        "rows": rows,
        "ledger": ledger,
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    heads = ("leaves", "build s", "MB", "incl gen us", "incl ver us", "hashes", "cons gen us", "cons ver us")
    keys = ("leaves", "build_s", "tree_bytes", "inclusion_generate_us", "inclusion_verify_us")
    keys += ("inclusion_hashes_max", "consistency_generate_us", "consistency_verify_us")
    print(" ".join(f"{h:>12}" for h in heads))
    for row in rows:
        print(" ".join(f"{row[k] / 1e6 if k == 'tree_bytes' else row[k]:>12}" for k in keys))


if __name__ == "__main__":
    main()
