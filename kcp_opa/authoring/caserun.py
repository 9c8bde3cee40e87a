"""Run decision cases against bundles compiled from the policies under test; score them.

Each case's deployment (``DEPLOYMENTS/<name>/{knowledge,matrix}.yaml``) is compiled with the
policies being tested; every case is decided on regopy (through ``Gate``, with the audit
ledger's system control satisfied) and, when installed, evaluated on the OPA reference with
the exact same input. The metrics are the contract's section 7: decision accuracy, the
false-allow rate (the most dangerous; target zero), the false-denial rate and approval-routing
accuracy, plus engine divergences.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from kcp_opa.authoring.casecontext import case_input, case_sources
from kcp_opa.authoring.cases import SYSTEM_CONTROLS, DecisionCase, check_case, decision_trace
from kcp_opa.authoring.regotest import CoverageMerger, CoverageReport, opa_engine, opa_installed
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.models.decision import Decision
from kcp_opa.trail.ledger import AuditLedger, verify_ledger

if TYPE_CHECKING:
    from opa_bindings import OpaEngine

APPROVAL_STATES = frozenset({"USER_CONFIRMATION", "STEP_UP_AUTHENTICATION", "IDENTITY_VERIFICATION", "HUMAN_APPROVAL"})


@dataclass
class CaseResult:
    case: DecisionCase
    decision: Decision | None
    problems: list[str]
    divergent: bool = False
    error: str | None = None

    @property
    def passed(self) -> bool:
        return not self.problems and not self.divergent and self.error is None

    @property
    def false_allow(self) -> bool:
        return self.decision is not None and self.case.expect.must_not_execute and self.decision.execution_allowed

    @property
    def false_denial(self) -> bool:
        return (
            self.decision is not None and self.case.expect.decision != "DENY" and self.decision.decision.value == "DENY"
        )

    @property
    def routing_relevant(self) -> bool:
        expect = self.case.expect
        return expect.decision in APPROVAL_STATES or bool(expect.required_controls) or bool(expect.approver_roles)

    @property
    def routed_right(self) -> bool:
        if self.decision is None:
            return False
        expect, got = self.case.expect, self.decision
        if got.decision.value != expect.decision:
            return False
        if expect.required_controls is not None and set(got.required_controls) != expect.required_controls:
            return False
        return expect.approver_roles is None or set(got.verdict.approver_roles) == expect.approver_roles


class CaseMetrics(TypedDict):
    """The contract's section 7 over a run's cases (a rate is None where nothing is under it)."""

    cases: int
    ran: int
    passed: int
    decision_accuracy: float | None
    false_allows: list[str]
    false_allow_rate: float | None
    false_denials: list[str]
    false_denial_rate: float | None
    approval_routing_accuracy: float | None
    approval_routing_cases: int
    divergences: list[str]
    errors: list[str]


@dataclass
class CaseRun:
    results: list[CaseResult] = field(default_factory=list)
    coverage: CoverageReport | None = None
    engines: tuple[str, ...] = ()

    def metrics(self) -> CaseMetrics:
        """Totals over the cases that produced a decision: a case that errored is counted as
        failed, never as a correct answer, and a rate with nothing under it is None ("n/a"), not
        0% (a run where every case errored must not read as "no false allows")."""
        total = len(self.results)
        ran = [r for r in self.results if r.decision is not None]
        must_not = [r for r in ran if r.case.expect.must_not_execute]
        not_deny = [r for r in ran if r.case.expect.decision != "DENY"]
        routing = [r for r in ran if r.routing_relevant]

        def rate(part: int, whole: int) -> float | None:
            return part / whole if whole else None

        return {
            "cases": total,
            "ran": len(ran),
            "passed": sum(r.passed for r in self.results),
            "decision_accuracy": rate(
                sum(1 for r in ran if r.decision and r.decision.decision.value == r.case.expect.decision), len(ran)
            ),
            "false_allows": [r.case.case_id for r in self.results if r.false_allow],
            "false_allow_rate": rate(sum(r.false_allow for r in must_not), len(must_not)),
            "false_denials": [r.case.case_id for r in self.results if r.false_denial],
            "false_denial_rate": rate(sum(r.false_denial for r in not_deny), len(not_deny)),
            "approval_routing_accuracy": rate(sum(r.routed_right for r in routing), len(routing)),
            "approval_routing_cases": len(routing),
            "divergences": [r.case.case_id for r in self.results if r.divergent],
            "errors": [r.case.case_id for r in self.results if r.error],
        }

    def nothing_ran(self) -> str | None:
        """Why this run proves nothing, or None: no case selected, or none produced a decision."""
        if not self.results:
            return "no decision case was selected: nothing was checked"
        if not any(r.decision is not None for r in self.results):
            return f"none of the {len(self.results)} decision cases ran (every one is an ERROR): nothing was checked"
        return None


def run_cases(
    cases: Sequence[DecisionCase],
    policies: Path,
    deployments: Path,
    engines: Iterable[str] = ("regopy", "opa"),
    *,
    coverage: bool = False,
) -> CaseRun:
    wanted = set(engines)
    run = CaseRun(engines=tuple(sorted(wanted)))
    merger = CoverageMerger() if coverage else None
    opa_available = "opa" in wanted and opa_installed()
    with tempfile.TemporaryDirectory(prefix="kcp-opa-cases-") as tmp:
        gates: dict[str, Gate] = {}
        ledgers: dict[str, Gate] = {}
        opa: dict[str, OpaEngine] = {}
        broken: dict[str, str] = {}  # deployment -> the first case that reported why it does not compile
        for case in cases:
            if case.deployment in broken:
                run.results.append(CaseResult(case, None, [], error=f"not run: see case {broken[case.deployment]}"))
                continue
            try:
                if case.deployment not in gates:
                    base = deployments / case.deployment
                    out = Path(tmp) / f"{case.deployment}.tar.gz"
                    try:
                        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, out)
                    except KcpOpaError as exc:
                        broken[case.deployment] = case.case_id
                        raise KcpOpaError(f"deployment {case.deployment!r} does not compile: {exc}") from None
                    gates[case.deployment] = Gate.from_bundle(out)
                    if opa_available:
                        bundle = gates[case.deployment].bundle
                        opa[case.deployment] = opa_engine(bundle.modules, bundle.data)
                gate = gates[case.deployment]
                problems: list[str] = []
                if case.ledger:
                    decision, raw, document = _through_ledger(case, gate, Path(tmp), ledgers, problems)
                else:
                    prepared = case_input(
                        case, satisfied_controls=SYSTEM_CONTROLS, bundle_revision=gate.bundle_revision
                    )
                    decision, raw = gate.evaluate(prepared)
                    document = prepared.document
                divergent = False
                if case.deployment in opa:
                    engine = opa[case.deployment]
                    on_opa = engine.eval_document("kcp.gate.decision", dict(document), coverage=coverage)
                    if merger is not None and engine.last_coverage:
                        merger.add(engine.last_coverage)
                    divergent = "regopy" in wanted and on_opa != raw
                problems += check_case(case, decision, decision_trace(case.action, decision))
                if decision.engine_error:
                    problems.append(f"engine error: {decision.engine_error}")
                run.results.append(CaseResult(case, decision, problems, divergent))
            except KcpOpaError as exc:  # the user's mistake, worded for them
                run.results.append(CaseResult(case, None, [], error=str(exc)))
            except Exception as exc:  # a case that cannot run is an error, never a crash
                run.results.append(CaseResult(case, None, [], error=f"{type(exc).__name__}: {exc}"))
        for engine in opa.values():
            engine.close()
        for name, ledger_gate in ledgers.items():
            report = verify_ledger(ledger_gate.audit.ledger.location) if ledger_gate.audit is not None else None
            if report is None or not report.ok:
                for result in run.results:
                    if result.case.ledger and result.case.deployment == name:
                        result.problems.append(f"the {name} ledger does not verify: {report}")
    run.coverage = merger.report() if merger is not None else None
    return run


def _through_ledger(
    case: DecisionCase, gate: Gate, tmp: Path, ledgers: dict[str, Gate], problems: list[str]
) -> tuple[Decision, object, JsonObject]:
    """Decide as a deployed gate does: the entry is written (fsynced) to a real ledger first,
    and only that satisfies ``standard_audit_logging``; the entry must record this decision."""
    if case.deployment not in ledgers:
        ledger = AuditLedger(tmp / f"{case.deployment}.jsonl")
        ledgers[case.deployment] = Gate(gate.bundle, config=GateConfig(preflight=False, ledger=ledger))
    ledger_gate = ledgers[case.deployment]
    sources, principal = case_sources(case.action, case.context, case.now, case.counters)
    prepared = ledger_gate.prepare(case.action, now=case.now, principal=principal, context=sources)
    decision, entry = ledger_gate.decide_recorded(prepared)
    if entry is None:
        problems.append("the decision was not written to the ledger")
        return decision, None, prepared.document
    if entry.get("decision_id") != decision.decision_id or entry.get("decision") != decision.decision.value:
        problems.append("the ledger entry does not record this decision")
    return decision, entry.get("result"), prepared.document
