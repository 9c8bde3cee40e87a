"""The floor of a cold start: what regopy itself pays to load a compiled bundle's data.

Not a test. It compiles (or reads, with --bundle) a deployment, then times in this process,
each into a fresh regopy Interpreter: the data document's JSON alone (``add_data_json``), the
gate's cached binary plan (``load_bundle``, data and modules as rego-cpp saved them), and the
same plan built without ``kcp_data/units`` (so the plan's own share shows apart from the data's);
then reading the bundle as the gate does and OPA's load of the same bundle. CPU seconds are
reported beside wall seconds: on a shared machine the wall clock says more about the neighbours.

    .venv/bin/python bench/bench_data_load.py [--units 100000] [--bundle PATH]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import write_deployment

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.canonical import canonical_json

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = "kcp/gate/decision"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Callable[[], Any]) -> dict[str, float]:
    cpu, wall = _cpu(), time.perf_counter()
    fn()
    return {"wall_s": round(time.perf_counter() - wall, 3), "cpu_s": round(_cpu() - cpu, 3)}


def _interpreter() -> Any:
    from regopy import Interpreter

    interpreter = Interpreter()
    interpreter.strict_built_in_errors = True
    return interpreter


def _save_plan(data_text: str, modules: dict[str, str], path: Path) -> None:
    from regopy import BundleFormat

    interpreter = _interpreter()
    interpreter.add_data_json(data_text)
    for name, source in sorted(modules.items()):
        interpreter.add_module(name, source)
    built = interpreter.build(None, [ENTRYPOINT])
    if not built.ok():
        raise SystemExit(f"regopy cannot plan {ENTRYPOINT}: {built.node()}")
    interpreter.save_bundle(str(path), built, BundleFormat.Binary)


def _load_plan(path: Path) -> None:
    from regopy import BundleFormat

    if not _interpreter().load_bundle(str(path), BundleFormat.Binary).ok():
        raise SystemExit(f"{path}: the plan does not load")


def _opa_load(bundle_path: Path) -> None:
    from opa_bindings import OpaEngine

    bundle = read_bundle(bundle_path)
    engine = OpaEngine()
    for name, source in bundle.modules.items():
        engine.add_policy(name, source)
    engine.add_data(bundle.data)
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=100_000)
    parser.add_argument("--bundle", type=Path, help="a compiled bundle to measure instead of a generated one")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-data-load.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bundle_path = args.bundle
        if bundle_path is None:
            manifest, matrix = write_deployment(work / "d", args.units, 1000)
            bundle_path = work / "bundle.tar.gz"
            compile_bundle(
                [manifest], matrix, REPO / "policies", bundle_path, options=CompileOptions(max_bytes=256 << 20)
            )
        bundle = read_bundle(bundle_path)
        data_text = canonical_json(bundle.data).decode("utf-8")
        units = bundle.data["kcp_data"]["units"]
        without = {"kcp_data": {k: v for k, v in bundle.data["kcp_data"].items() if k != "units"}}
        full_plan, bare_plan = work / "full.rbb", work / "bare.rbb"
        _save_plan(data_text, bundle.modules, full_plan)
        _save_plan(canonical_json(without).decode("utf-8"), bundle.modules, bare_plan)
        row = {
            "units": units["count"],
            "data_bytes": len(data_text),
            "units_bytes": len(canonical_json(units)),
            "plan_bytes": full_plan.stat().st_size,
            "plan_without_units_bytes": bare_plan.stat().st_size,
            "read_bundle": _timed(lambda: read_bundle(bundle_path)),
            "add_data_json": _timed(lambda: _interpreter().add_data_json(data_text)),
            "load_plan": _timed(lambda: _load_plan(full_plan)),
            "load_plan_without_units": _timed(lambda: _load_plan(bare_plan)),
            "opa_load": _timed(lambda: _opa_load(bundle_path)),
        }
    print(json.dumps(row, indent=2))
    args.output.write_text(json.dumps(row, indent=2) + "\n")


if __name__ == "__main__":
    main()
