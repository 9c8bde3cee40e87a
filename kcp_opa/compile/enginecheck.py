"""Check that regopy can load and plan a bundle, in a child process.

rego-cpp aborts the whole process on some inputs (docs/engine-findings.md hazards 2 and 4), so a build
of modules the compiler has not seen before runs in a child: a crash there becomes a compile
error, never a dead CI job or agent host. The child (kcp_opa.compile.planchild) is given the
bundle's contents by the parent, so it plans the very bytes the parent loaded, and it can hand
its plan back, so the gate's preflight costs one build, not two.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import CompileError
from kcp_opa.core.jsonread import JsonObject

PROBE_TIMEOUT_S = 600
_CHILD = Path(__file__).with_name("planchild.py")


def check_bundle_in_child(bundle: Path, *, evaluate: bool = True) -> None:
    """Plan the bundle file's entrypoints in a child; with ``evaluate``, also evaluate each once."""
    plan_in_child(read_bundle(bundle, skip_verification=True), evaluate=evaluate)  # the caller verified


def plan_in_child(
    bundle: LoadedBundle, *, evaluate: bool = False, strict: bool = False, plan: Path | None = None
) -> None:
    """Plan ``bundle``'s entrypoints in a child process (raises :class:`CompileError` if it cannot).

    ``evaluate=False`` is the gate's preflight: only a plan that crashes or fails refuses the
    bundle; errors while evaluating are the gate's to turn into fail-closed decisions. With
    ``plan`` the child saves its built entrypoints there (rego-cpp's binary plan); ``strict``
    builds as the gate does (undefined builtins are errors).
    """
    metadata = bundle.manifest.get("metadata", {}).get("kcp_opa", {})
    job = {
        # UTF-8, never \u escapes inside the data text: regopy keeps escapes raw (engine-findings 2).
        # The envelope itself is ASCII JSON, so the child reads exactly these strings back.
        "data": canonical_json(bundle.data).decode("utf-8"),
        "modules": sorted(bundle.modules.items()),
        "entrypoints": list(metadata.get("entrypoints", [])),
        "packages": list(metadata.get("packages", [])),
        "evaluate": evaluate,
        "strict": strict,
        "plan": None if plan is None else str(plan),
    }
    _run_child(job, bundle.source)


def query_in_child(
    data: JsonObject, modules: Mapping[str, str], entrypoint: str, input_doc: object, *, source: str, fix: str = ""
) -> object:
    """Evaluate one entrypoint of ``modules`` over ``data`` and ``input_doc`` with regopy, in a
    child (as every first build of modules is); its value, or :class:`CompileError` (when it is
    undefined, one that ends with ``fix``: what to do about it)."""
    job = {
        "data": canonical_json(data).decode("utf-8"),
        "modules": sorted(modules.items()),
        "query": {"entrypoint": entrypoint, "input": input_doc},
    }
    out = _run_child(job, source)
    try:
        return json.loads(out.splitlines()[-1])
    except (IndexError, ValueError):
        raise CompileError(f"{source}: {entrypoint} is undefined over these policies and data{fix}") from None


def _run_child(job: JsonObject, source: str) -> str:
    """Run the child on ``job``; its stdout, or :class:`CompileError` (a crash, a timeout, a reason)."""
    try:
        proc = subprocess.run(
            # -P: the child's directory is not put on sys.path (its imports are the standard
            # library's and regopy's); PYTHONPATH still applies, as it does to this process.
            [sys.executable, "-P", str(_CHILD)],
            input=json.dumps(job).encode("ascii"),
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CompileError(f"{source}: regopy did not finish planning the bundle in {PROBE_TIMEOUT_S} s") from None
    if proc.returncode < 0:
        raise CompileError(
            f"{source}: regopy crashed (signal {-proc.returncode}) planning the bundle; "
            "see docs/engine-findings.md hazards 2 and 4 (`x in coll` under `with input as`)"
        )
    if proc.returncode != 0:
        out = proc.stdout.decode("utf-8", "replace").strip()
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        detail = out.splitlines()[0] if out else (err[0] if err else "no detail")
        raise CompileError(f"{source}: regopy cannot load the bundle: {detail}")
    return proc.stdout.decode("utf-8", "replace")
