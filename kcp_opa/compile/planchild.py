"""The child side of the engine check: plan (and optionally evaluate) a bundle with regopy.

rego-cpp aborts the whole process on some inputs (docs/engine-findings.md hazards 2 and 4), so
a bundle is planned here first, in a process of its own, where a crash costs nothing but this
process. The parent (kcp_opa.compile.enginecheck) runs this file as a script, not as a module of
the package: importing ``kcp_opa`` costs ~0.4 s (three quarters of the child's time at 1,000
units), so this file imports the standard library and regopy only.

The parent writes one JSON object to stdin: the bundle's data document as text (the parent's
canonical UTF-8 JSON, exactly what it loads itself), its modules, its entrypoints and packages,
``evaluate``, ``strict`` (undefined builtins as errors, as the gate builds) and ``plan`` (a path
in a private directory of the parent's, or null). With ``plan`` the built entrypoints are saved
there in rego-cpp's binary format, so the parent loads this plan instead of building a second.
With ``query`` (``{"entrypoint": ..., "input": ...}``) it evaluates that one entrypoint over the
given input and prints its value as one JSON line, or no line when it is undefined (the decision
plan: kcp_opa.compile.decisionplan).
Exit 0: planned (and evaluated); 1: a one-line reason on stdout; killed by a signal: a crash.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def query(job: dict[str, Any]) -> int:
    """Evaluate ``job["query"]``'s entrypoint over its input; print the value (names and numbers)."""
    from regopy import Input, Interpreter

    interp = Interpreter()
    interp.strict_built_in_errors = True
    interp.add_data_json(job["data"])
    for name, source in job["modules"]:
        interp.add_module(name, source)
    entrypoint = job["query"]["entrypoint"]
    built = interp.build(None, [entrypoint])
    if not built.ok():
        print(f"build failed: {built.node()}")
        return 1
    interp.set_input(Input(job["query"]["input"]))
    output = interp.query_bundle_entrypoint(built, entrypoint)
    if not output.ok():
        print(f"entrypoint {entrypoint} does not evaluate: {str(output).splitlines()[0][:300]}")
        return 1
    text = str(output)  # "undefined", not JSON, when the entrypoint is
    results = [] if text == "undefined" else json.loads(text).get("expressions", [])
    if len(results) == 1:
        print(json.dumps(results[0]))
    return 0  # undefined: no value line, which the parent names


def probe(job: dict[str, Any]) -> int:
    from regopy import BundleFormat, Interpreter

    interp = Interpreter()
    if job.get("strict"):
        interp.strict_built_in_errors = True
    interp.add_data_json(job["data"])
    for name, source in job["modules"]:
        interp.add_module(name, source)
    entrypoints = list(job["entrypoints"])
    if entrypoints:
        built = interp.build(None, entrypoints)
        if not built.ok():
            print(f"build failed: {built.node()}")
            return 1
        if job.get("plan"):
            interp.save_bundle(job["plan"], built, BundleFormat.Binary)
        if not job.get("evaluate"):
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
    for package in job["packages"]:
        output = interp.query(f"x := data.{package}")
        if not output.ok():
            print(f"package {package}: {str(output).splitlines()[0][:300]}")
            return 1
    return 0


if __name__ == "__main__":
    job = json.load(sys.stdin.buffer)
    sys.exit(query(job) if job.get("query") else probe(job))
