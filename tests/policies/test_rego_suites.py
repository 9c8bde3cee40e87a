"""Structure of the shipped policy library (the tests themselves run through `kcp-opa test`,
tests/authoring/test_regotest.py: every test on both engines, coverage, decision cases)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import POLICIES

_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_TEST_RULE = re.compile(r"^(test_\w+)\b", re.MULTILINE)

MODULES = {p.relative_to(POLICIES).as_posix(): p.read_text() for p in sorted(POLICIES.rglob("*.rego"))}
#: A test file whose first line is this runs on OPA only; it must say why on the next lines.
from kcp_opa.authoring.regosyntax import OPA_ONLY  # noqa: E402

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


def _opa_only(path: str) -> bool:
    return MODULES[path].startswith(OPA_ONLY)


def test_opa_only_files_are_few_and_explained() -> None:
    opa_only = [p for p in MODULES if _opa_only(p)]
    assert opa_only == [
        "kcp/controls/evidence_opa_test.rego",
        "kcp/evaluators/budget_test.rego",
        "kcp/evaluators/context_opa_test.rego",
        "kcp/evaluators/runtime_test.rego",
        "kcp/gate/decision_test.rego",
        "kcp/gate/default_test.rego",
        "kcp/gate/plan_test.rego",
        "kcp/lib/risk_test.rego",
    ]
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
