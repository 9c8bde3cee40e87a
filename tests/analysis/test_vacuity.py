"""The verdict of a proof: PROVED only when something was tested (no engine runs here)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kcp_opa.analysis.engines import UserInvariants
from kcp_opa.analysis.prove import ProofReport, Violation

RULES = """package ours.invariants

import rego.v1

premise_withdrawal_is_denied if input.input.action.action_type == "withdrawal"

default invariant_withdrawal_is_denied := true

invariant_withdrawal_is_denied := false if {
	premise_withdrawal_is_denied
	input.decision.decision != "DENY"
}

invariant_counted_nowhere := input.decision.decision != "ALLOW"
"""


def _report(**counts: int) -> ProofReport:
    report = ProofReport("d", "b.tar.gz", ("regopy",), 100, 0, 10**9, False)
    report.invariants = ["contract.a", "ours.invariants.invariant_x"]
    report.states = Counter({"ALLOW": 1})
    report.reach = Counter(counts)
    return report


def test_a_premise_rule_is_recognised_beside_its_invariant(tmp_path: Path) -> None:
    rules = tmp_path / "ours.rego"
    rules.write_text(RULES, encoding="utf-8")
    loaded = UserInvariants.load(rules)
    assert loaded.rules == ("invariant_counted_nowhere", "invariant_withdrawal_is_denied")
    assert loaded.premised == ("invariant_withdrawal_is_denied",)


def test_the_verdict_names_what_was_not_reached() -> None:
    tested = _report(**{"contract.a": 3, "ours.invariants.invariant_x": 1})
    assert tested.verdict == "PROVED" and tested.proved and tested.vacuous() == []
    untested = _report(**{"ours.invariants.invariant_x": 1})
    assert untested.verdict == "VACUOUS" and not untested.proved
    assert untested.vacuous() == ["contract.a: no generated action met its premise"]
    untested.inapplicable["contract.a"] = "nothing to test"
    assert untested.verdict == "PROVED"
    untested.states = Counter({"DENY": 5, "ESCALATE": 2})
    assert untested.vacuous() == ["no generated action reached ALLOW or an approval state"]
    untested.states = Counter({"HUMAN_APPROVAL": 1})
    untested.units_passable = Counter({"p/u": 0, "p/v": 2})
    assert untested.vacuous() == ["unit p/u: no generated action on it reached ALLOW or an approval state"]


def test_strict_counts_an_invariant_without_a_premise_as_vacuous() -> None:
    report = _report(**{"contract.a": 3})
    report.uncounted = ["ours.invariants.invariant_x"]
    assert report.verdict == "PROVED"
    report.strict = True
    assert report.verdict == "VACUOUS" and "no premise_ rule" in report.vacuous()[0]
    report.violations.append(Violation("contract.a", {"decision": "ALLOW"}, {}, {}, "now"))
    assert report.verdict == "VIOLATED"
