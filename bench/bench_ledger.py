"""Benchmark: decisions per second with the audit ledger off, fsync per entry, group commit.

Not a test. Same bundle (support-desk) and input for every mode, single-threaded and with 4
threads (group commit only helps when decisions overlap); the modes run in interleaved rounds,
and each cell is the median round's rate. The read is decided with the context a
host vouches for (bench/vouched.py) and must be an ALLOW in every mode. Writes
bench/results-ledger.json.

    .venv/bin/python bench/bench_ledger.py [--count 600]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vouched import Vouched, expect

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.trail.ledger import AuditLedger, verify_ledger

REPO = Path(__file__).resolve().parent.parent
MODES = ("off", "fsync", "group")


def _rate(vouched: Vouched, action: dict[str, Any], count: int, threads: int) -> float:
    start = time.perf_counter()
    if threads == 1:
        for _ in range(count):
            vouched.decide(action)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(lambda _: vouched.decide(action), range(count)))
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=600, help="decisions per cell, over all rounds")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (the median is reported)")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-ledger.json")
    args = parser.parse_args()
    case = next(
        c for c in load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml") if c.case_id == "sd-read-clean"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcp-opa-bench-ledger-") as tmp:
        base = REPO / "fixtures" / "deployments" / "support-desk"
        bundle = Path(tmp) / "support-desk.tar.gz"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle)
        for threads in (1, 4):
            row: dict[str, Any] = {"threads": threads}
            gates: dict[str, Vouched] = {}
            for mode in MODES:
                ledger = None if mode == "off" else AuditLedger(Path(tmp) / f"{mode}-{threads}.jsonl", durability=mode)
                gates[mode] = Vouched(
                    Gate.from_bundle(bundle, config=GateConfig(preflight=False, ledger=ledger)), "2026-11-29T10:00:00Z"
                )
                expect(gates[mode].decide(dict(case.action)), ["ALLOW"], "the support-desk read")
            # Interleaved rounds, the order rotating each round, so a noisy moment hits every mode.
            rates: dict[str, list[float]] = {mode: [] for mode in MODES}
            for round_ in range(args.rounds):
                for mode in MODES[round_ % 3 :] + MODES[: round_ % 3]:
                    rates[mode].append(_rate(gates[mode], dict(case.action), args.count // args.rounds, threads))
            for mode in MODES:
                row[mode] = statistics.median(rates[mode])
                if mode != "off":
                    assert verify_ledger(Path(tmp) / f"{mode}-{threads}.jsonl").ok
            row["fsync_over_off"] = row["fsync"] / row["off"]
            row["group_over_off"] = row["group"] / row["off"]
            rows.append(row)
    table = Table(title=f"decisions/s, support-desk read, {args.count} decisions per cell")
    for column in ("threads", "ledger off", "fsync per entry", "group commit", "fsync / off", "group / off"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["threads"]),
            f"{row['off']:.0f}",
            f"{row['fsync']:.0f}",
            f"{row['group']:.0f}",
            f"{row['fsync_over_off']:.2f}",
            f"{row['group_over_off']:.2f}",
        )
    Console(width=140).print(table)
    args.output.write_text(json.dumps({"machine": platform.platform(), "results": rows}, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
