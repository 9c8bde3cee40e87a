"""The whole benchmark suite in one run: `make bench` -> bench/results.json and a table.

Not a test. For generated deployments of 10 / 1,000 / 100,000 units (and 10 / 1,000 matrix
cells at 1,000 units) it measures validate and compile time, cold start in a fresh process
(`Gate.from_bundle(path)` as shipped, with its default preflight; the same without the
preflight; a cached plan loaded, with its max RSS; the OPA reference),
`Gate.decide()` p50/p99 single-threaded and decisions/s with 2 threads, the engine step beside
OPA on the same inputs, batches of 1 / 100 / 1,000 (prepared, then evaluated on 2 threads as
`decide_many` does) against single calls; then receipts and the ledger (bench_receipts.py,
bench_ledger.py), one decide() by step plus the engine's growth with the delegation chain and
the fields read (bench_growth.py), the engine step split by probe entrypoints
(bench_engine.py), and the floor: a minimal module doing one read's lookups (bench_floor.py).
Ratios, not absolute times, are what to compare.

Every decision timed carries the context a host vouches for (bench/vouched.py) and must be the
read's intended decision, never a hold for missing context. Flatness is like for like: every
deployment reads the same three units (first, middle, last position, the same attributes at
every size: synthetic.pinned_reads), and the suite fails unless the decisions compared across
sizes and matrices are equal (all of the decision document but the text naming the unit read:
bench_decide.signature).

    .venv/bin/python bench/suite.py [--sizes 10,1000,100000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decide import (
    SYNTHETIC_EXPECTED,
    _opa_engine,
    _summary,
    _synthetic_action,
    _synthetic_matrix,
    _timed,
    signature,
)
from synthetic import manifest_text, matrix_text, pinned_reads
from targets import suite_targets
from vouched import Vouched, expect

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.manifest import validate_manifest

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-11-29T10:00:00Z"
_FRESH_LOAD = """
import json, resource, sys, time
from pathlib import Path
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
start = time.perf_counter()
bundle = read_bundle(sys.argv[1])
read = time.perf_counter()
if sys.argv[2] == "default":
    Gate(bundle)  # what Gate.from_bundle(path) does: preflight on, no plan cache
elif sys.argv[2] == "none":
    Gate(bundle, config=GateConfig(preflight=False))  # the same start without the preflight, nothing cached
else:
    Gate(bundle, config=GateConfig(preflight=False, plan_cache=Path(sys.argv[2])))
done = time.perf_counter()
print(json.dumps({"total_s": done - start, "read_s": read - start, "gate_s": done - read,
    "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "children_max_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _fresh_load(bundle: Path, mode: str) -> dict[str, float]:
    """Cold start in a new process (imports excluded): ``default`` or a plan-cache directory."""
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_LOAD, str(bundle), mode], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _matrix(cells: int) -> str:
    return (
        _synthetic_matrix()
        if cells >= 200
        else matrix_text(cells).replace(
            "task_types:\n",
            "task_types:\n  read:\n    data_categories: {personal: autonomous, contact: autonomous, financial: confirm,"
            " health: approve, location: autonomous}\n    sensitivity: {public: autonomous, internal: autonomous,"
            " confidential: confirm, restricted: approve}\n",
            1,
        )
    )


def deployment(tmp: Path, units: int, cells: int, rounds: int, batches: bool) -> dict[str, Any]:
    directory = tmp / f"d{units}-{cells}"
    directory.mkdir()
    reads = pinned_reads(units)
    (directory / "knowledge.yaml").write_text(manifest_text(units, pinned=reads), encoding="utf-8")
    (directory / "matrix.yaml").write_text(_matrix(cells), encoding="utf-8")
    row: dict[str, Any] = {"units": units, "cells": cells}
    start = time.perf_counter()
    report = validate_manifest(directory / "knowledge.yaml")  # held: compile reuses this validation
    row["validate_s"] = time.perf_counter() - start
    assert report.valid, report.errors[:3]
    bundle = directory / "bundle.tar.gz"
    start = time.perf_counter()
    compile_bundle([directory / "knowledge.yaml"], directory / "matrix.yaml", REPO / "policies", bundle)
    row["compile_s"] = time.perf_counter() - start
    plans = directory / "plans"
    start = time.perf_counter()
    gate = Gate.from_bundle(bundle, config=GateConfig(preflight=False, plan_cache=plans))
    row["cold_start_build_s"] = time.perf_counter() - start
    row["data_mb"] = len(canonical_json(gate.bundle.data)) / 1e6
    row["cold_start_default"] = _fresh_load(bundle, "default")
    row["cold_start_default_s"] = row["cold_start_default"]["total_s"]
    row["cold_start_nopreflight_s"] = _fresh_load(bundle, "none")["total_s"]
    row["cold_start_cached"] = _fresh_load(bundle, str(plans))
    row["cold_start_cached_s"] = row["cold_start_cached"]["total_s"]
    opa, row["cold_start_opa_s"] = _opa_engine(gate)
    actions = [_synthetic_action(position) for position in sorted(reads)]
    vouched = Vouched(gate, NOW)  # the host's context, built once (bench/vouched.py)
    prepared = [vouched.prepare(a) for a in actions]
    on_opa = [opa.eval_document("kcp.gate.decision", dict(p.document)) for p in prepared]
    for index, (action, answer) in enumerate(zip(actions, on_opa, strict=True)):
        expect(answer, [SYNTHETIC_EXPECTED[index]], f"{units:,} units, read {index}")
        expect(vouched.decide(action), [SYNTHETIC_EXPECTED[index]], f"{units:,} units, read {index}, decide()")
    row["divergences"] = sum(gate.engine.evaluate(p.document).value != o for p, o in zip(prepared, on_opa, strict=True))
    row["signatures"] = [signature(o) for o in on_opa]
    row["read_decisions"] = [f"{o['decision']} {','.join(o['reason_codes'])}" for o in on_opa]
    samples: dict[str, list[float]] = {"decide": [], "regopy": [], "opa": []}
    for index in range(rounds):
        action, item = actions[index % len(actions)], prepared[index % len(prepared)]
        _timed(lambda a=action: vouched.decide(a), 50, samples["decide"])
        _timed(lambda i=item: gate.engine.evaluate(i.document), 50, samples["regopy"])
        _timed(lambda d=dict(item.document): opa.eval_document("kcp.gate.decision", d), 50, samples["opa"])
    opa.close()
    for key, values in samples.items():
        row[key] = _summary(values)
    row["engine_ratio"] = row["regopy"]["p50_us"] / row["opa"]["p50_us"]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda i: vouched.decide(actions[i % len(actions)]), range(400)))
    row["two_threads_per_s"] = 400 / (time.perf_counter() - start)
    if batches:
        row["batches"] = {}
        for size in (1, 100, 1000):
            batch = [actions[i % len(actions)] for i in range(size)]
            start = time.perf_counter()
            vouched.decide_many(batch, workers=2)
            batch_s = time.perf_counter() - start
            start = time.perf_counter()
            for action in batch:
                vouched.decide(action)
            single_s = time.perf_counter() - start
            row["batches"][str(size)] = {"batch_per_s": size / batch_s, "single_per_s": size / single_s}
    return row


def flatness(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """p50 at the largest over p50 at the smallest deployment (1,000 cells), and 10 vs 1,000 cells
    (1,000 units), for decide, regopy and OPA; ``engine_vs_opa`` is regopy's flatness over OPA's."""
    out: dict[str, dict[str, Any]] = {}
    full = sorted((row for row in rows if row["cells"] == 1000), key=lambda row: row["units"])
    pairs = {"units": (full[0], full[-1])}
    by_cells = sorted((row for row in rows if row["units"] == 1000), key=lambda row: row["cells"])
    if len(by_cells) > 1:
        pairs["cells"] = (by_cells[0], by_cells[-1])
    for name, (small, large) in pairs.items():
        item: dict[str, Any] = {"from": small[name], "to": large[name]}
        for key in ("decide", "regopy", "opa"):
            item[key] = large[key]["p50_us"] / small[key]["p50_us"]
        item["engine_vs_opa"] = item["regopy"] / item["opa"]
        out[name] = item
    return out


def like_for_like(rows: list[dict[str, Any]]) -> list[str]:
    """Rows whose reads decide differently from the first row's: flatness would compare decisions."""
    first = rows[0]
    return [
        f"{row['units']:,} units / {row['cells']:,} cells: {row['read_decisions']} vs {first['read_decisions']}"
        for row in rows[1:]
        if row["signatures"] != first["signatures"]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,100000")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="10 and 1,000 units only, fewer rounds.")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results.json")
    args = parser.parse_args()
    sizes = [10, 1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rounds = 4 if args.quick else args.rounds
    console = Console(stderr=True)
    load_at_start = list(os.getloadavg())
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcp-opa-suite-") as tmp:
        plan = [(units, 1000, units == 1000) for units in sizes] + [(1000, 10, False)]
        for units, cells, batches in plan:
            console.print(f"[bold]{units:,} units, {cells:,} cells[/] ...")
            rows.append(deployment(Path(tmp), units, cells, rounds, batches))
    console.print("[bold]receipts and ledger[/] ...")
    receipts = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_receipts.py"), "--count", "1000",
         "--output", str(REPO / "bench" / "results-receipts.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    ledger = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_ledger.py"), "--count", "300",
         "--output", str(REPO / "bench" / "results-ledger.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    console.print("[bold]the engine step by probe entrypoint[/] ...")
    engine = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_engine.py"), "--rounds", "3" if args.quick else "7",
         "--output", str(REPO / "bench" / "results-engine.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    console.print("[bold]decide() by step, growth with chain length and fields read[/] ...")
    growth = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_growth.py"), "--rounds", "3" if args.quick else "5",
         "--output", str(REPO / "bench" / "results-growth.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    console.print("[bold]the worker pool (crash isolation) and cross_check='opa'[/] ...")
    pool = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_pool.py"), "--rounds", "4" if args.quick else "8",
         "--output", str(REPO / "bench" / "results-pool.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cross = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_cross_check.py"), "--rounds", "2" if args.quick else "5",
         "--output", str(REPO / "bench" / "results-cross-check.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    console.print("[bold]the floor: a minimal module doing the read's lookups[/] ...")
    floor = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_floor.py"), "--rounds", "3" if args.quick else "7",
         "--output", str(REPO / "bench" / "results-floor.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    mismatched = like_for_like(rows)
    results = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": list(os.getloadavg()),
        },
        "elapsed_s": time.perf_counter() - started,
        "deployments": rows,
        "flatness": flatness(rows),
        "like_for_like": not mismatched,
        "engine": json.loads((REPO / "bench" / "results-engine.json").read_text()),
        "receipts": json.loads((REPO / "bench" / "results-receipts.json").read_text())["results"],
        "ledger": json.loads((REPO / "bench" / "results-ledger.json").read_text())["results"],
        **json.loads((REPO / "bench" / "results-growth.json").read_text()),
        "pool": json.loads((REPO / "bench" / "results-pool.json").read_text())["results"],
        "cross_check": json.loads((REPO / "bench" / "results-cross-check.json").read_text())["results"],
        "floor": json.loads((REPO / "bench" / "results-floor.json").read_text()),
    }
    results["targets"] = suite_targets(results)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    table = Table(title="kcp-opa benchmark suite (us unless stated; regopy and OPA on the same bundle and inputs)")
    for column in (
        "units", "cells", "validate s", "compile s", "start: default s", "no preflight s", "cached s", "OPA s",
        "decide p50", "p99", "/s", "2 threads /s", "regopy p50", "OPA p50", "regopy/OPA", "diverge",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row['units']:,}", f"{row['cells']:,}", f"{row['validate_s']:.2f}", f"{row['compile_s']:.2f}",
            f"{row['cold_start_default_s']:.2f}", f"{row['cold_start_nopreflight_s']:.2f}",
            f"{row['cold_start_cached_s']:.2f}", f"{row['cold_start_opa_s']:.2f}",
            f"{row['decide']['p50_us']:.0f}", f"{row['decide']['p99_us']:.0f}", f"{row['decide']['per_s']:.0f}",
            f"{row['two_threads_per_s']:.0f}", f"{row['regopy']['p50_us']:.0f}", f"{row['opa']['p50_us']:.0f}",
            f"{row['engine_ratio']:.2f}", str(row["divergences"]),
        )  # fmt: skip
    out = Console(width=240)
    out.print(table)
    for row in rows:
        for size, item in (row.get("batches") or {}).items():
            ratio = item["batch_per_s"] / item["single_per_s"]
            batch_rate, single_rate = item["batch_per_s"], item["single_per_s"]
            out.print(f"decide_many batch of {size}: {batch_rate:.0f}/s vs {single_rate:.0f}/s single ({ratio:.2f}x)")
    for row in rows:
        cached, default = row["cold_start_cached"], row["cold_start_default"]
        out.print(
            f"{row['units']:,} units: data {row['data_mb']:.1f} MB; default start {default['total_s']:.2f} s "
            f"(read {default['read_s']:.2f}, gate with preflight {default['gate_s']:.2f}; max RSS "
            f"{default['max_rss_mb']:.0f} MB, preflight child {default['children_max_rss_mb']:.0f} MB); cached "
            f"{cached['total_s']:.2f} s (read {cached['read_s']:.2f}, plan load {cached['gate_s']:.2f}; max RSS "
            f"{cached['max_rss_mb']:.0f} MB)"
        )
    for name, item in results["flatness"].items():
        out.print(
            f"flatness, {name} {item['from']:,} -> {item['to']:,} (same decisions): decide {item['decide']:.2f}, "
            f"regopy {item['regopy']:.2f}, OPA {item['opa']:.2f}; regopy/OPA {item['engine_vs_opa']:.2f}"
        )
    out.print(f"reads compared at every size: {rows[0]['read_decisions']}")
    for line in mismatched:
        out.print(f"[red]NOT like for like[/]: {line}")
    for part in (receipts, ledger, engine, growth, pool, cross, floor):
        # Their tables, without the structlog lines of the bundles they compile.
        print("\n".join(line for line in part.stdout.splitlines() if "[info" not in line).rstrip())
    targets = Table(title="Targets (docs/performance.md); absolute ones assume an idle machine")
    for column in ("row", "target", "measured", "met"):
        targets.add_column(column)
    for item in results["targets"]:
        met = {True: "met", False: "NOT met", None: "not measured"}[item["met"]]
        targets.add_row(item["row"], item["target"], item["measured"], met)
    out.print(targets)
    load = results["machine"]
    out.print(f"load average at start {load['load_average_at_start']}, at end {load['load_average_at_end']}")
    out.print(f"wrote {args.output} in {results['elapsed_s']:.0f} s")
    return 1 if mismatched or any(row["divergences"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
