"""Check that regopy can load and plan a bundle, in a child process.

rego-cpp aborts the whole process on some inputs (docs/engine-findings.md hazards 2 and 4), so a build
of modules the compiler has not seen before runs in a child: a crash there becomes a compile
error, never a dead CI job or agent host.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import CompileError

PROBE_TIMEOUT_S = 600


def check_bundle_in_child(bundle: Path, *, evaluate: bool = True) -> None:
    """Plan the bundle's entrypoints in a child; with ``evaluate``, also evaluate each once.

    ``evaluate=False`` is the gate's preflight: only a plan that crashes or fails refuses the
    bundle; errors while evaluating are the gate's to turn into fail-closed decisions.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "kcp_opa.compile.enginecheck", str(bundle), *([] if evaluate else ["--plan-only"])],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    if proc.returncode < 0:
        raise CompileError(
            f"{bundle}: regopy crashed (signal {-proc.returncode}) planning the bundle; "
            "see docs/engine-findings.md hazards 2 and 4 (`x in coll` under `with input as`)"
        )
    if proc.returncode != 0:
        detail = proc.stdout.strip() or proc.stderr.strip().splitlines()[-1:] or ["no detail"]
        raise CompileError(
            f"{bundle}: regopy cannot load the bundle: {detail if isinstance(detail, str) else detail[0]}"
        )


def _probe(bundle_path: str, plan_only: bool = False) -> int:
    from regopy import Interpreter

    bundle = read_bundle(bundle_path, skip_verification=True)  # the parent verified these bytes
    interp = Interpreter()
    # UTF-8, never \u escapes: regopy keeps escapes raw inside strings (docs/engine-findings.md).
    interp.add_data_json(canonical_json(bundle.data).decode("utf-8"))
    for name, source in sorted(bundle.modules.items()):
        interp.add_module(name, source)
    entrypoints = list(bundle.manifest.get("metadata", {}).get("kcp_opa", {}).get("entrypoints", []))
    if entrypoints:
        built = interp.build(None, entrypoints)
        if not built.ok():
            print(f"build failed: {built.node()}")
            return 1
        if plan_only:
            return 0
        for entrypoint in entrypoints:
            try:
                output = interp.query_bundle_entrypoint(built, entrypoint)
            except ValueError as exc:  # hazard 3: error text that is not JSON
                print(f"entrypoint {entrypoint} does not evaluate: {exc}")
                return 1
            if not output.ok():
                print(f"entrypoint {entrypoint} does not evaluate: {str(output).splitlines()[0][:300]}")
                return 1
        return 0
    packages = bundle.manifest.get("metadata", {}).get("kcp_opa", {}).get("packages", [])
    for package in packages:
        output = interp.query(f"x := data.{package}")
        if not output.ok():
            print(f"package {package}: {str(output).splitlines()[0][:300]}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(_probe(sys.argv[1], plan_only="--plan-only" in sys.argv[2:]))
