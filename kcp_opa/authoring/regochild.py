"""regopy in child processes, for the Rego test runner and ``kcp-opa check``.

Some policies abort rego-cpp (docs/engine-findings.md), so regopy never plans a test file in
the runner's own process. :func:`regopy_child` plans and runs entrypoints over modules in one
child; :func:`regopy_files` runs test files one after another in one child that reports each
file as it finishes, each file with its own time limit.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from kcp_opa.core.jsonread import JsonObject, mapping

#: Per test file (planning it with the policies and running its tests), not for the whole run.
CHILD_TIMEOUT_S = 300

#: The child's work: plan MODULES, query each entrypoint, print the results (``wrap``-ped) while
#: the interpreter is still alive.
_RUN = """
import json, sys
from regopy import Interpreter
def run(modules, entrypoints, wrap=lambda out: out):
    interp = Interpreter()
    interp.strict_built_in_errors = True
    interp.add_data_json("{}")
    for name, source in modules.items():
        interp.add_module(name, source)
    bundle = interp.build(None, entrypoints)
    if not bundle.ok():
        print(json.dumps(wrap({"__build_error__": str(bundle.node())[:2000]})), flush=True)
        return
    out = {}
    for entrypoint in entrypoints:
        try:
            output = interp.query_bundle_entrypoint(bundle, entrypoint)
        except Exception as exc:
            out[entrypoint] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        if not output.ok():
            out[entrypoint] = {"error": " ".join(str(output).split())[:500]}
            continue
        results = output.results
        value = results[0].expressions[0] if results and results[0].expressions else None
        out[entrypoint] = {"value": value}
    print(json.dumps(wrap(out)), flush=True)
"""
_CHILD = _RUN + "run(*json.load(sys.stdin))\n"
_FILES_CHILD = (
    _RUN
    + """
policy, files = json.load(sys.stdin)
for name, source, entrypoints in files:
    run({**policy, name: source}, entrypoints, lambda out: {"file": name, "out": out})
"""
)


def regopy_files(
    policy: Mapping[str, str], files: Sequence[tuple[str, str, Sequence[str]]], timeout_s: float | None = None
) -> dict[str, JsonObject | None]:
    """Results by entrypoint per test file, from one child that reports file by file.

    Each file gets ``timeout_s`` from the previous report: a file over it is ``{"__timeout__":
    s}`` and a fresh child takes the rest. A file whose child died is None (an engine abort);
    the files after it go to a fresh child too.
    """
    limit = CHILD_TIMEOUT_S if timeout_s is None else timeout_s
    done: dict[str, JsonObject | None] = {}
    left = list(files)
    while left:
        proc = subprocess.Popen(
            [sys.executable, "-c", _FILES_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps([dict(policy), [[n, s, list(e)] for n, s, e in left]]).encode("utf-8"))
            proc.stdin.close()
        except OSError:
            pass  # the child died before reading: its first file is reported below
        reported, overran = _reports(proc, limit, len(left))
        for name, out in reported:
            done[name] = out
        left = left[len(reported) :]
        if left:  # the child stopped (died or overran) at this file
            name = left[0][0]
            # Whether it overran is what the reader saw (the deadline passed), not whether the
            # process has been reaped yet: a child that aborts closes its stdout a moment before
            # it exits, and on a loaded box poll() still finds it running then.
            proc.kill()
            proc.wait()
            done[name] = {"__timeout__": limit} if overran else None
            left = left[1:]
        else:
            proc.wait()
    return done


def _reports(
    proc: subprocess.Popen[bytes], timeout_s: float, expected: int
) -> tuple[list[tuple[str, JsonObject]], bool]:
    """The child's file reports, in order, until it ends, overruns a file's limit or has sent all;
    and whether it overran (True) rather than ended or finished."""
    assert proc.stdout is not None
    reports: list[tuple[str, JsonObject]] = []
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while len(reports) < expected:
            wait = deadline - time.monotonic()
            if wait <= 0 or not selector.select(wait):
                return reports, True
            chunk = os.read(proc.stdout.fileno(), 1 << 20)
            if not chunk:
                return reports, False
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    report = json.loads(line)
                except ValueError:
                    return reports, False
                reports.append((str(report["file"]), mapping(report["out"])))
                deadline = time.monotonic() + timeout_s  # progress: the next file gets its own limit
    return reports, False


def regopy_child(
    modules: Mapping[str, str], entrypoints: Sequence[str], timeout_s: float = CHILD_TIMEOUT_S
) -> JsonObject | None:
    """Results by entrypoint; None if the child died (an engine abort); ``{"__timeout__": s}`` if
    planning did not finish in time (docs/engine-findings.md item 12)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps([dict(modules), list(entrypoints)]),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"__timeout__": timeout_s}
    if proc.returncode != 0:
        return None
    try:
        return mapping(json.loads(proc.stdout))
    except json.JSONDecodeError:
        return None
