"""Benchmark: validate and compile generated deployments of 100 / 10,000 / 100,000 units.

Not a test: it measures, prints a table and writes bench/results-compile.json. It also times
one unit lookup through the compiled index on regopy and on the OPA reference engine, first and
last unit, to show the data layout keeps lookups flat as the deployment grows.

    .venv/bin/python bench/bench_compile.py [--sizes 100,10000,100000] [--cells 1000]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import write_deployment

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.declare.manifest import validate_manifest

REPO = Path(__file__).resolve().parent.parent
LOOKUP = "data.kcp.lib.index.unit(input.project, input.unit)"


def _cpu() -> float:
    """CPU seconds of this process and its finished children (compile plans in a child)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _time(fn: Any) -> tuple[float, float, Any]:
    """Wall and CPU seconds (on a shared machine the CPU figure says what the work costs)."""
    cpu, start = _cpu(), time.perf_counter()
    value = fn()
    return time.perf_counter() - start, _cpu() - cpu, value


def _lookup_us(bundle_path: Path, unit_ids: list[str], repeats: int = 200) -> dict[str, float]:
    """Median microseconds per compiled-entrypoint lookup on regopy and per eval on OPA."""
    from opa_bindings import OpaEngine
    from regopy import Interpreter

    bundle = read_bundle(bundle_path)
    module = "package kcp.bench\n\nimport rego.v1\n\nfound := data.kcp.lib.index.unit(input.project, input.unit)\n"
    out: dict[str, float] = {}
    start = time.perf_counter()
    interp = Interpreter()
    interp.add_data_json(canonical_json(bundle.data).decode("utf-8"))
    for name, source in bundle.modules.items():
        interp.add_module(name, source)
    interp.add_module("bench.rego", module)
    out["regopy_add_s"] = time.perf_counter() - start
    planned = interp.build(None, ["kcp/bench/found"])
    out["regopy_load_s"] = time.perf_counter() - start
    start = time.perf_counter()
    engine = OpaEngine()
    for name, source in bundle.modules.items():
        engine.add_policy(name, source)
    engine.add_policy("bench.rego", module)
    engine.add_data(bundle.data)
    engine.eval_document("kcp.bench.found", {"project": "synthetic", "unit": unit_ids[0]})
    out["opa_load_s"] = time.perf_counter() - start
    for label, unit_id in zip(("first", "last"), unit_ids, strict=True):
        doc = {"project": "synthetic", "unit": unit_id}
        interp.set_input_term(canonical_json(doc).decode("utf-8"))
        for _ in range(repeats // 4):  # warm-up, not measured
            interp.query_bundle_entrypoint(planned, "kcp/bench/found")
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            output = interp.query_bundle_entrypoint(planned, "kcp/bench/found")
            samples.append(time.perf_counter() - start)
        assert output.results and output.results[0].expressions, f"{unit_id} not found on regopy"
        out[f"regopy_{label}_us"] = statistics.median(samples) * 1e6
        for _ in range(repeats // 4):
            engine.eval_document("kcp.bench.found", doc)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = engine.eval_document("kcp.bench.found", doc)
            samples.append(time.perf_counter() - start)
        assert isinstance(result, dict) and "profile" in result, f"{unit_id} not found on OPA"
        out[f"opa_{label}_us"] = statistics.median(samples) * 1e6
    engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,10000,100000", help="unit counts, comma-separated")
    parser.add_argument("--cells", type=int, default=1000, help="matrix cells")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-compile.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    console = Console(stderr=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for units in sizes:
            console.print(f"[dim]generating {units:,} units...[/dim]")
            manifest, matrix = write_deployment(Path(tmp) / f"d{units}", units, args.cells)
            # `report` is held through the compile, so compile reuses this validation (one parse).
            validate_s, validate_cpu_s, report = _time(lambda m=manifest: validate_manifest(m, max_bytes=256 << 20))
            assert report.valid, report.errors[:3]
            out = Path(tmp) / f"b{units}.tar.gz"
            console.print(f"[dim]compiling {units:,} units...[/dim]")
            compile_s, compile_cpu_s, result = _time(
                lambda m=manifest, x=matrix, o=out: compile_bundle(
                    [m], x, REPO / "policies", o, options=CompileOptions(max_bytes=256 << 20)
                )
            )
            lookups = _lookup_us(out, ["unit-000000", f"unit-{units - 1:06d}"])
            rows.append(
                {
                    "units": units,
                    "cells": args.cells,
                    "manifest_bytes": manifest.stat().st_size,
                    "bundle_bytes": result.size,
                    "validate_s": round(validate_s, 3),
                    "compile_s": round(compile_s, 3),
                    "validate_cpu_s": round(validate_cpu_s, 3),
                    "compile_cpu_s": round(compile_cpu_s, 3),
                    **{k: round(v, 3 if k.endswith("_s") else 1) for k, v in lookups.items()},
                }
            )
    table = Table(title="validate / compile, and one unit lookup through the index (median)")
    columns = (
        "units",
        "manifest",
        "bundle",
        "validate",
        "compile",
        "load regopy/OPA",
        "regopy first/last",
        "OPA first/last",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row['units']:,}",
            f"{row['manifest_bytes'] / 1e6:.1f} MB",
            f"{row['bundle_bytes'] / 1e6:.2f} MB",
            f"{row['validate_s']:.2f} s ({row['validate_cpu_s']:.2f} CPU)",
            f"{row['compile_s']:.2f} s ({row['compile_cpu_s']:.2f} CPU)",
            f"{row['regopy_load_s']:.2f} / {row['opa_load_s']:.2f} s",
            f"{row['regopy_first_us']:.0f} / {row['regopy_last_us']:.0f} us",
            f"{row['opa_first_us']:.0f} / {row['opa_last_us']:.0f} us",
        )
    Console().print(table)
    payload = {"machine": {"python": platform.python_version(), "processor": platform.machine()}, "rows": rows}
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    console.print(f"[dim]wrote {args.output}[/dim]")


if __name__ == "__main__":
    main()
