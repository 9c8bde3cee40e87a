"""Benchmark: what crash isolation costs, decide() in-process beside decide() through the worker pool.

Not a test. The same bundle, inputs and vouched context (bench/vouched.py) on two gates: one
evaluating in this process (``isolation="inline"``, the library default) and one through the
supervised pool of worker processes (``isolation="process"``, the service default;
kcp_opa.decide.pool). Interleaved rounds, so machine noise hits both alike. Rows: the whole
``decide()`` and the engine step alone (in-process regopy vs one round trip to a worker: the
input framed, regopy in the worker, the answer framed back), single-threaded, and decisions/s
with 2 threads. Both gates must decide every input alike. Writes bench/results-pool.json.

    .venv/bin/python bench/bench_pool.py [--rounds 8] [--per-round 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decide import _summary, _timed
from vouched import Vouched, expect

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-11-29T10:00:00Z"


def _inputs() -> dict[str, tuple[str, dict[str, Any], str]]:
    """name: (deployment, action, intended decision)."""
    cases = load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml")
    read = next(c for c in cases if c.case_id == "sd-read-clean")
    kya = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
    return {
        "support-desk read": ("support-desk", dict(read.action), "ALLOW"),
        "KYA supplier payment": ("finance", kya, "HUMAN_APPROVAL"),
    }


def measure(tmp: Path, rounds: int, per_round: int) -> list[dict[str, Any]]:
    rows = []
    for name, (deployment, action, intended) in _inputs().items():
        base = REPO / "fixtures" / "deployments" / deployment
        bundle = tmp / f"{deployment}.tar.gz"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle)
        rows.append(_measure_one(name, bundle, action, intended, rounds, per_round))
    return rows


def _measure_one(
    name: str, bundle: Path, action: dict[str, Any], intended: str, rounds: int, per_round: int
) -> dict[str, Any]:
    inline = Gate.from_bundle(bundle, config=GateConfig(preflight=False))
    start = time.perf_counter()
    pooled = Gate.from_bundle(bundle, config=GateConfig(preflight=False, isolation="process"))
    pool_start_s = time.perf_counter() - start
    try:
        vouched = Vouched(inline, NOW)
        document = vouched.prepare(action).document
        on_inline, on_pool = inline.engine.evaluate(document), pooled.engine.evaluate(document)
        assert on_inline.error is None and on_inline == on_pool, f"{name}: the pool decided differently"
        expect(vouched.decide(action), [intended], f"{name}, in-process")
        expect(vouched.decide(action, pooled), [intended], f"{name}, through the pool")
        samples: dict[str, list[float]] = {"inline": [], "pool": [], "inline_engine": [], "pool_engine": []}
        for _ in range(rounds):
            _timed(lambda: vouched.decide(action), per_round, samples["inline"])
            _timed(lambda: vouched.decide(action, pooled), per_round, samples["pool"])
            _timed(lambda: inline.engine.evaluate(document), per_round, samples["inline_engine"])
            _timed(lambda: pooled.engine.evaluate(document), per_round, samples["pool_engine"])
        row: dict[str, Any] = {"input": name, "pool_start_s": pool_start_s}
        row |= {key: _summary(values) for key, values in samples.items()}
        row["decide_ratio"] = row["pool"]["p50_us"] / row["inline"]["p50_us"]
        row["decide_overhead_us"] = row["pool"]["p50_us"] - row["inline"]["p50_us"]
        row["engine_ratio"] = row["pool_engine"]["p50_us"] / row["inline_engine"]["p50_us"]
        for label, gate in (("inline", inline), ("pool", pooled)):
            count = 200
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=2) as threads:
                list(threads.map(lambda _, g=gate: vouched.decide(action, g), range(count)))
            row[f"{label}_two_threads_per_s"] = count / (time.perf_counter() - started)
        return row
    finally:
        pooled.engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-pool.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcp-opa-pool-") as tmp:
        rows = measure(Path(tmp), args.rounds, args.per_round)
    args.output.write_text(json.dumps({"results": rows}, indent=2) + "\n")
    table = Table(title="decide() in-process vs through the worker pool (us; same bundle, input and context)")
    for column in (
        "input", "decide p50", "pool p50", "pool/inline", "+us", "p99", "pool p99",
        "engine p50", "pool engine p50", "pool/inline", "2 threads /s", "pool /s", "pool start s",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["input"], f"{row['inline']['p50_us']:,.0f}", f"{row['pool']['p50_us']:,.0f}",
            f"{row['decide_ratio']:.2f}", f"{row['decide_overhead_us']:,.0f}", f"{row['inline']['p99_us']:,.0f}",
            f"{row['pool']['p99_us']:,.0f}", f"{row['inline_engine']['p50_us']:,.0f}",
            f"{row['pool_engine']['p50_us']:,.0f}", f"{row['engine_ratio']:.2f}",
            f"{row['inline_two_threads_per_s']:,.0f}", f"{row['pool_two_threads_per_s']:,.0f}",
            f"{row['pool_start_s']:.2f}",
        )  # fmt: skip
    Console(width=220).print(table)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
