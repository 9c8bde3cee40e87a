"""Every shipped ``*_test.rego`` passes on regopy and on the OPA reference engine.

A stop-gap runner until ``kcp-opa test`` exists: each ``test_*`` rule must evaluate to true
in both engines, and the engines must agree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import POLICIES

_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_TEST_RULE = re.compile(r"^(test_\w+)\b", re.MULTILINE)

MODULES = {p.relative_to(POLICIES).as_posix(): p.read_text() for p in sorted(POLICIES.rglob("*.rego"))}
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


def _regopy(package: str, rule: str) -> object:
    from regopy import Interpreter

    interp = Interpreter()
    interp.add_data_json("{}")
    for name, source in MODULES.items():
        interp.add_module(name, source)
    output = interp.query(f"x := data.{package}.{rule}")
    assert output.ok(), str(output)
    results = output.results
    return results[0].bindings.get("x") if results and results[0].bindings else None


def _opa(package: str, rule: str) -> object:
    from opa_bindings import OpaEngine

    with OpaEngine() as engine:
        for name, source in MODULES.items():
            engine.add_policy(name, source)
        result = engine.eval_query(f"x := data.{package}.{rule}", {})
    return result[0]["x"] if result else None


@pytest.mark.parametrize(("path", "package", "rule"), CASES, ids=[f"{c[0]}::{c[2]}" for c in CASES])
def test_rego_test_passes_on_both_engines(path: str, package: str, rule: str) -> None:
    on_regopy, on_opa = _regopy(package, rule), _opa(package, rule)
    assert on_opa is True, f"OPA: {json.dumps(on_opa)}"
    assert on_regopy is True, f"regopy: {json.dumps(on_regopy)}"


def test_suite_is_not_empty() -> None:
    assert len(CASES) >= 5
    assert Path(POLICIES / "VERSION").is_file()
