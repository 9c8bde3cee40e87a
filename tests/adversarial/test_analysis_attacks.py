"""Attacks on the analysis: a weakened policy must not pass `prove` or `diff` unnoticed.

A bad day: someone deletes the rule that denies an unknown unit (or an old policy lacked the
tenant and budget checks). prove must name the broken invariant with a counterexample that
really decides that way on the gate, and diff must fail the change.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import DEPLOYMENTS, REPO

from kcp_opa.analysis.diff import diff
from kcp_opa.analysis.prove import prove
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate

UNKNOWN = "contract.unknown_unit_never_allows"


def _bundle(tmp: Path, policies: Path, name: str = "support-desk") -> Path:
    base = DEPLOYMENTS / name
    out = tmp / f"{policies.parent.name}-{name}.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, out)
    return out


def _without_unknown_unit_rule(tmp: Path) -> Path:
    policies = tmp / "weakened" / "policies"
    shutil.copytree(REPO / "policies", policies)
    unit = policies / "kcp" / "evaluators" / "unit.rego"
    text = unit.read_text(encoding="utf-8")
    start = text.index("findings contains finding if {")
    end = text.index("\n}\n", start) + 3
    unit.write_text(text[:start] + "findings := set()\n" + text[end:], encoding="utf-8")
    return policies


def test_prove_catches_a_deleted_unknown_unit_rule_with_a_real_counterexample(tmp_path: Path) -> None:
    weakened = read_bundle(_bundle(tmp_path, _without_unknown_unit_rule(tmp_path)))
    report = prove(weakened, budget=150, opa=False)
    found = {v.invariant: v for v in report.violations}
    assert UNKNOWN in found, sorted(found)
    violation = found[UNKNOWN]
    # The counterexample is the gate's own answer, not the analysis's say-so.
    gate = Gate(weakened, preflight=False)
    sources, principal = case_sources(violation.action, {"from_action": True}, violation.now)
    prepared = gate.prepare(violation.action, now=violation.now, principal=principal, context=sources)
    decision = gate.decide_prepared(prepared)
    assert decision.decision.value == "ALLOW"
    assert violation.action["knowledge"]["unit"] == "analysis-unknown-unit"


def test_diff_fails_the_deleted_rule_and_today_passes_prove(tmp_path: Path) -> None:
    today = read_bundle(_bundle(tmp_path, REPO / "policies"))
    weakened = read_bundle(_bundle(tmp_path, _without_unknown_unit_rule(tmp_path)))
    report = diff(today, weakened, budget=120)
    assert report.weakens and any(t.startswith("DENY -> ") for t in report.weakening)
    assert prove(today, budget=120, opa=False).proved
