"""Benchmark: ledger appends per second with the kept Merkle tree against the chain without it, both backends.

Not a test. The same child (this file with ``--child``) appends ``--count`` decision-sized
entries with a writer key (every entry signed, a checkpoint every 1,000) through
``open_ledger``, once under the code that keeps the tree (this checkout) and once under a
checkout of ``--baseline-ref`` (the chain as it was before the tree was kept; a detached
``git worktree`` made for the run), in interleaved rounds; each cell is the median round. Rows:
JSON Lines file and PostgreSQL (a throwaway cluster, as ``tests/pgcluster.py`` starts one),
durability "fsync" (one writer) and "group" (8 threads). The target is the issue's: the tree
keeps at least 0.9 of the chain's append rate on both backends. Beside the rate, the child's
own CPU time per append (``process_time``), which a loaded machine disturbs less than the wall
clock, and, in this process, the CPU per entry of the chain's own work (sign, hash, serialise)
against the tree's (one leaf hash and the merges). Writes bench/results-tree-append.json.

    .venv/bin/python bench/bench_tree_append.py [--count 1500] [--rounds 3] [--baseline-ref e128cc4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PAD = "x" * 420
TARGET = 0.9


def child(location: str, durability: str, count: int, threads: int) -> None:
    """Append ``count`` entries and print the rate (runs under the PYTHONPATH of the code measured)."""
    from kcp_opa.core.signing import generate_ed25519
    from kcp_opa.trail.locations import open_ledger

    ledger = open_ledger(
        location, durability=durability, checkpoint_key=generate_ed25519("bench-writer"), checkpoint_every=1000
    )
    event = {"type": "decision", "decision_id": "dec_0", "result": {"allow": True}, "pad": PAD}
    ledger.append(event)  # the header and first checkpoint outside the timing
    start, cpu = time.perf_counter(), time.process_time()
    if threads == 1:
        for n in range(count):
            ledger.append({**event, "decision_id": f"dec_{n}"})
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda n: ledger.append({**event, "decision_id": f"dec_{n}"}), range(count)))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    ledger.close()
    release = getattr(ledger, "release", None)
    if release is not None:
        release()
    print(json.dumps({"per_s": count / elapsed, "cpu_us": cpu / count * 1e6}))


def cpu_share(count: int = 20_000) -> dict[str, float]:
    """In this process, the CPU per entry of the chain's own work (sign, hash, serialise) and of the tree's."""
    from kcp_opa.core.signing import generate_ed25519, sign_document
    from kcp_opa.trail.frontier import TreeState
    from kcp_opa.trail.record import LedgerEntry
    from kcp_opa.trail.verify import ENTRY_SIGNATURE

    key = generate_ed25519("bench-writer")
    event = {"type": "decision", "decision_id": "dec_0", "result": {"allow": True}, "pad": PAD}
    previous, lines = "sha256:" + "0" * 64, []
    start = time.process_time()
    for n in range(count):
        body = {**event, "decision_id": f"dec_{n}"}
        entry, line = LedgerEntry.written(body, n + 1, previous, lambda b: sign_document(b, key, ENTRY_SIGNATURE))
        previous = entry.entry_hash
        lines.append((line, entry.entry_hash))
    chain = time.process_time() - start
    state, start = TreeState.empty(previous), time.process_time()
    for line, digest in lines:
        state = state.extended(line, digest)
    tree = time.process_time() - start
    return {
        "chain_entry_cpu_us": round(chain / count * 1e6, 2),
        "tree_entry_cpu_us": round(tree / count * 1e6, 2),
        "tree_share_of_chain_cpu": round(tree / chain, 4),
    }


def _measure(code: Path, location: str, durability: str, count: int, threads: int) -> tuple[float, float]:
    argv = [sys.executable, __file__, "--child", location, durability, str(count), str(threads)]
    done = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the child under {code} failed: {done.stderr.decode()[-2000:]}")
    found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return float(found["per_s"]), float(found["cpu_us"])


@contextlib.contextmanager
def baseline_checkout(ref: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kcp-opa-baseline-") as tmp:
        target = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(target), ref], check=True)
        try:
            yield target
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(target)], check=False)


@contextlib.contextmanager
def database_server() -> Iterator[Any]:
    sys.path.insert(0, str(REPO / "tests"))
    from pgcluster import postgres_server

    with postgres_server() as server:
        yield server


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=1500, help="appends per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-ref", default="e128cc4", help="the commit whose chain keeps no tree")
    parser.add_argument("--backends", default="file,postgres")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results-tree-append.json")
    parser.add_argument("--child", nargs=4, metavar=("LOCATION", "DURABILITY", "COUNT", "THREADS"))
    args = parser.parse_args()
    if args.child:
        location, durability, count, threads = args.child
        child(location, durability, int(count), int(threads))
        return 0
    share = cpu_share()
    print(json.dumps(share), flush=True)
    backends = args.backends.split(",")
    rows: list[dict[str, Any]] = []
    cells = [(b, d, t) for b in backends for d, t in (("fsync", 1), ("group", 8))]
    samples: dict[tuple[str, str, str], list[float]] = {}
    cpu: dict[tuple[str, str, str], list[float]] = {}
    with baseline_checkout(args.baseline_ref) as baseline, contextlib.ExitStack() as stack:
        server = stack.enter_context(database_server()) if "postgres" in backends else None
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        serial = 0
        for round_ in range(args.rounds):
            for backend, durability, threads in cells:
                for name, code in (("chain", baseline), ("chain+tree", REPO)):
                    serial += 1
                    if backend == "file":
                        location = str(work / f"ledger-{serial}.jsonl")
                    else:
                        assert server is not None
                        location = server.database(f"kcp_bench_tree_{serial}")
                    rate, used = _measure(code, location, durability, args.count, threads)
                    samples.setdefault((backend, durability, name), []).append(rate)
                    cpu.setdefault((backend, durability, name), []).append(used)
                    shown = f"{rate:.0f}/s {used:.0f} us CPU"
                    print(f"round {round_ + 1} {backend} {durability} {name}: {shown}", flush=True)
    for backend, durability, threads in cells:
        chain = statistics.median(samples[(backend, durability, "chain")])
        tree = statistics.median(samples[(backend, durability, "chain+tree")])
        rows.append(
            {
                "backend": backend,
                "durability": durability,
                "threads": threads,
                "chain_per_s": round(chain, 1),
                "chain_tree_per_s": round(tree, 1),
                "ratio": round(tree / chain, 3),
                "chain_cpu_us": round(statistics.median(cpu[(backend, durability, "chain")]), 1),
                "chain_tree_cpu_us": round(statistics.median(cpu[(backend, durability, "chain+tree")]), 1),
                "samples": {
                    "chain": [round(s, 1) for s in samples[(backend, durability, "chain")]],
                    "chain+tree": [round(s, 1) for s in samples[(backend, durability, "chain+tree")]],
                },
            }
        )
    targets = []
    for backend in backends:
        ratios = [row["ratio"] for row in rows if row["backend"] == backend]
        targets.append(
            {
                "row": f"append throughput with the kept tree vs the chain alone, {backend}",
                "target": f">= {TARGET} of the chain's rate",
                "measured": ", ".join(f"{r['durability']}: {r['ratio']}" for r in rows if r["backend"] == backend),
                "values": {
                    **{r["durability"]: r["ratio"] for r in rows if r["backend"] == backend},
                    "tree_share_of_chain_cpu": share["tree_share_of_chain_cpu"],
                },
                "met": min(ratios) >= TARGET,
            }
        )
    meta = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "count": args.count,
        "rounds": args.rounds,
        "baseline_ref": args.baseline_ref,
    }
    document = {"meta": meta, "cpu_per_entry": share, "rows": rows, "targets": targets}
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "samples"}))
    for target in targets:
        print(json.dumps(target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
