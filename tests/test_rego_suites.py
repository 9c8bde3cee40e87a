"""Every shipped ``*_test.rego`` passes on regopy and on the OPA reference engine.

A stop-gap runner until ``kcp-opa test`` exists: each ``test_*`` rule must evaluate to true
in both engines, and the engines must agree.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import POLICIES

_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_TEST_RULE = re.compile(r"^(test_\w+)\b", re.MULTILINE)

MODULES = {p.relative_to(POLICIES).as_posix(): p.read_text() for p in sorted(POLICIES.rglob("*.rego"))}
#: A test file whose first line is this runs on OPA only; it must say why on the next lines.
OPA_ONLY = "# kcp-opa: engines=opa"
CASES = [
    (path, _PACKAGE.search(source).group(1), rule)  # type: ignore[union-attr]
    for path, source in MODULES.items()
    if path.endswith("_test.rego")
    for rule in dict.fromkeys(_TEST_RULE.findall(source))
]


def test_every_module_has_a_test_file() -> None:
    modules = {p for p in MODULES if not p.endswith("_test.rego")}
    for module in modules:
        assert module.replace(".rego", "_test.rego") in MODULES, f"{module} has no _test.rego beside it"


_CHILD = """
import json, sys
from regopy import Interpreter
modules, entrypoints = json.load(sys.stdin)
interp = Interpreter()
interp.add_data_json("{}")
for name, source in modules.items():
    interp.add_module(name, source)
bundle = interp.build(None, entrypoints)
out = {}
for entrypoint in entrypoints:
    output = interp.query_bundle_entrypoint(bundle, entrypoint)
    results = output.results
    out[entrypoint] = results[0].expressions[0] if results and results[0].expressions else None
print(json.dumps(out))
"""


@functools.cache
def _regopy_results() -> dict[str, Any]:
    """Plan every test once in a child process: query() re-plans all modules on each call
    (~0.7 s here), and a policy that aborts regopy must fail the tests, not kill pytest."""
    entrypoints = [f"{package.replace('.', '/')}/{rule}" for path, package, rule in CASES if not _opa_only(path)]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps([{p: s for p, s in MODULES.items() if not _opa_only(p)}, entrypoints]),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"regopy child failed ({proc.returncode}): {proc.stderr[-2000:]}"
    results: dict[str, Any] = json.loads(proc.stdout)
    return results


@functools.cache
def _opa_engine() -> Any:
    from opa_bindings import OpaEngine

    engine = OpaEngine()
    for name, source in MODULES.items():
        engine.add_policy(name, source)
    return engine


def _regopy(package: str, rule: str) -> object:
    return _regopy_results()[f"{package.replace('.', '/')}/{rule}"]


def _opa(package: str, rule: str) -> object:
    result = _opa_engine().eval_query(f"x := data.{package}.{rule}", {})
    return result[0]["x"] if result else None


@pytest.mark.parametrize(("path", "package", "rule"), CASES, ids=[f"{c[0]}::{c[2]}" for c in CASES])
def test_rego_test_passes_on_both_engines(path: str, package: str, rule: str) -> None:
    on_opa = _opa(package, rule)
    assert on_opa is True, f"OPA: {json.dumps(on_opa)}"
    if not _opa_only(path):
        on_regopy = _regopy(package, rule)
        assert on_regopy is True, f"regopy: {json.dumps(on_regopy)}"


def _opa_only(path: str) -> bool:
    return MODULES[path].startswith(OPA_ONLY)


def test_opa_only_files_are_few_and_explained() -> None:
    opa_only = [p for p in MODULES if _opa_only(p)]
    assert opa_only == ["kcp/gate/decision_test.rego"]
    for path in opa_only:
        assert "docs/engine-findings.md" in MODULES[path].split("package")[0]


def test_suite_is_not_empty() -> None:
    assert len(CASES) >= 5
    assert Path(POLICIES / "VERSION").is_file()


def test_no_rule_aliases_a_whole_index() -> None:
    """`x := data.kcp_data.units` makes OPA copy the whole index on every query (21 ms at 1,000
    units, growing with the deployment); every lookup spells out the static path instead."""
    alias = re.compile(r":=\s*data\.kcp_data\.(units|tasks)(\.slots)?\s*$", re.MULTILINE)
    offenders = [path for path, source in MODULES.items() if alias.search(source)]
    assert offenders == []
