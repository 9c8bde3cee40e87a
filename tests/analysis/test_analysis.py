"""kcp-opa prove, diff and cases pin on real bundles, decided on regopy and OPA (small budgets)."""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import DEPLOYMENTS, REPO, run_cli

from kcp_opa.analysis.covering import all_pairs
from kcp_opa.analysis.diff import classify, diff
from kcp_opa.analysis.engines import UserInvariants
from kcp_opa.analysis.pin import pin
from kcp_opa.analysis.prove import cases_document, prove
from kcp_opa.analysis.space import derive_space, required_facts
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.authoring.caserun import run_cases
from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.schemas import validator
from kcp_opa.trail.ledger import AuditLedger

ROUND_ONE = REPO / "tests" / "fixtures" / "analysis" / "round-one-support-desk.tar.gz"
TENANT = "contract.absent_needed_fact_never_allows[input.action.target.tenant_id]"
BUDGET = "contract.absent_needed_fact_never_allows[input.action.runtime.budget_state]"


def compiled(tmp: Path, name: str, policies: Path = REPO / "policies", matrix: Path | None = None) -> Path:
    base = DEPLOYMENTS / name
    out = tmp / f"{name}-{policies.name}-{matrix.name if matrix else 'matrix'}.tar.gz"
    compile_bundle([base / "knowledge.yaml"], matrix or base / "matrix.yaml", policies, out)
    return out


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("analysis")
    yield {name: compiled(tmp, name) for name in ("support-desk", "finance")}


def test_all_pairs_covers_every_pair_of_values() -> None:
    sizes = [4, 3, 5, 2, 3]
    rows = all_pairs(sizes, seed=7)
    for (i, a), (j, b) in itertools.combinations(enumerate(sizes), 2):
        for x, y in itertools.product(range(a), range(b)):
            assert any(row[i] == x and row[j] == y for row in rows), (i, x, j, y)
    assert len(rows) < 4 * 3 * 5 * 2 * 3 / 4  # far smaller than the product


def test_space_comes_from_the_bundle(bundles: dict[str, Path]) -> None:
    space = derive_space(read_bundle(bundles["support-desk"]))
    dims = {d.name: [c.label for c in d.choices] for d in space.dims}
    assert "support-desk/customer-records" in dims["unit"] and {"unknown", "none"} <= set(dims["unit"])
    assert {"read", "refund", "send", "analysis_unknown_task"} <= set(dims["task"])
    assert dims["fields"] == ["declared", "undeclared", "empty"]
    assert dims["tenant"] == ["same", "other", "absent"]
    # high_value_minor EUR 50000; "clean": a refund (the money-moving type) states a small amount, others none
    assert {"EUR:49999", "EUR:50000", "clean", "XTS:100"} <= set(dims["amount"])
    assert set(dims["budget_state"]) == {"within_budget", "approval_threshold", "exhausted", "absent"}
    assert dims["delegation"] == ["none", "max_depth", "max_depth+1", "widened"]
    assert {"max_age", "max_age+1", "unit_stale_edge", "unit_stale+1"} <= set(dims["clock"])
    assert {"input.action.target.tenant_id", "input.action.runtime.budget_state"} <= set(space.needed)


def test_prove_finds_round_one_missing_tenant_and_budget_allows(bundles: dict[str, Path]) -> None:
    """Round one's policies allowed a knowledge-bound read without a resource tenant or budget.

    Round one's policies have no METADATA ``requires``: prove finds the holes alone, by supplying
    each absent fact's values (another tenant denies, an exhausted budget escalates).
    """
    assert not {p for p in required_facts(read_bundle(ROUND_ONE).modules) if "tenant" in p or "budget" in p}
    report = prove(read_bundle(ROUND_ONE), budget=250)
    found = {v.invariant: v for v in report.violations}
    assert TENANT in found and BUDGET in found, sorted(found)
    tenant, budget = found[TENANT], found[BUDGET]
    assert tenant.decision["decision"] == "ALLOW" and budget.decision["decision"] == "ALLOW"
    # Shrunk and isolated: the tenant case lacks the tenant but keeps the budget, and vice versa.
    assert "tenant_id" not in tenant.action["target"] and tenant.action["runtime"]["budget_state"]
    assert "budget_state" not in budget.action.get("runtime", {}) and budget.action["target"]["tenant_id"]
    assert "delegation_chain" not in tenant.action and "trace" not in tenant.action
    document = cases_document(report)
    assert not list(validator("decision-cases.schema.json").iter_errors(document))
    # Ready to pin: today's policies decide each counterexample as the case expects. Round one's
    # matrix bound no tools, so its actions name the task type; today's support-desk binds each
    # task type's tools (requested_actions), which the pinned actions then name.
    tools = yaml.safe_load((DEPLOYMENTS / "support-desk" / "matrix.yaml").read_text())["task_types"]
    for case in document["cases"]:
        bound = tools.get(case["action"].get("action_type"), {}).get("requested_actions")
        if bound:
            case["action"]["requested_action"] = bound[0]
    path = bundles["support-desk"].parent / "round-one-cases.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    picked = [c for c in load_cases(path) if "tenant_id" in c.case_id or "budget_state" in c.case_id]
    run = run_cases(picked, REPO / "policies", DEPLOYMENTS, engines=("regopy",))
    assert len(run.results) == 2 and all(r.passed for r in run.results), [r.problems for r in run.results]


#: Reference deployments whose every unit declares limits counted by the gate (rate limits, budgets).
COUNTED = {"budget", "kcp-governance"}


@pytest.mark.parametrize("name", sorted(p.name for p in DEPLOYMENTS.iterdir() if p.is_dir()))
def test_prove_passes_on_todays_reference_deployments(name: str, tmp_path: Path) -> None:
    report = prove(read_bundle(compiled(tmp_path, name)), budget=150)
    assert not report.violations, [(v.invariant, v.decision, v.action) for v in report.violations]
    # What a run leaves untested is named (VACUOUS), never called proved. Where units declare rate
    # limits or budgets, every action on them needs the gate's own counters, which a generated
    # action cannot state: nothing on them passes, and prove says so for each unit.
    if name in COUNTED:
        assert report.verdict == "VACUOUS" and set(report.units_passable.values()) == {0}, report.units_passable
    else:
        assert "no generated action reached ALLOW or an approval state" not in report.vacuous()
    assert report.engines == ("regopy", "opa") and report.decisions >= 150 and report.states
    assert report.meaning().startswith("sampled:")


def test_a_deployment_invariant_in_rego(bundles: dict[str, Path], tmp_path: Path) -> None:
    rules = tmp_path / "treasury_invariants.rego"
    rules.write_text(
        "package treasury.invariants\n\nimport rego.v1\n\n"
        "# A withdrawal on a unit is always DENY (the matrix forbids it; unit-less, KYA's controls govern it).\n"
        "default invariant_withdrawal_is_denied := true\n\n"
        'invariant_withdrawal_is_denied := false if {\n\tinput.input.action.action_type == "withdrawal"\n'
        '\tinput.input.action.knowledge.unit\n\tinput.decision.decision != "DENY"\n}\n\n'
        "# Deliberately false: nothing ever needs a human approval.\n"
        "default invariant_nothing_approved := true\n\n"
        'invariant_nothing_approved := false if input.decision.decision == "HUMAN_APPROVAL"\n',
        encoding="utf-8",
    )
    report = prove(read_bundle(bundles["finance"]), users=[UserInvariants.load(rules)], budget=150)
    names = {v.invariant for v in report.violations}
    assert names == {"treasury.invariants.invariant_nothing_approved"}
    assert "treasury.invariants.invariant_withdrawal_is_denied" in report.invariants
    (violation,) = report.violations
    assert violation.decision["decision"] == "HUMAN_APPROVAL" and violation.shrink_tries > 0


def _without_unit_rule(tmp: Path) -> Path:
    policies = tmp / "policies"
    shutil.copytree(REPO / "policies", policies)
    unit = policies / "kcp" / "evaluators" / "unit.rego"
    text = unit.read_text(encoding="utf-8")
    start = text.index("findings contains finding if {")
    end = text.index("\n}\n", start) + 3
    unit.write_text(text[:start] + "findings := set()\n" + text[end:], encoding="utf-8")
    return policies


def test_diff_reports_a_removed_rule_as_weakening(bundles: dict[str, Path], tmp_path: Path) -> None:
    weaker = compiled(tmp_path, "support-desk", _without_unit_rule(tmp_path))
    done = run_cli("diff", str(bundles["support-desk"]), str(weaker), "--budget", "200", "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["weakens"] and any(t.startswith("DENY -> ") for t in report["weakening"])
    example = next(c for cs in report["examples"].values() for c in cs if c["weakens"])
    assert example["old"]["decision"] == "DENY" and "unknown_unit" in example["old"]["reason_codes"]
    assert example["action"]["knowledge"]["unit"] == "analysis-unknown-unit"
    allowed = run_cli("diff", str(bundles["support-desk"]), str(weaker), "--budget", "60", "--allow-weakening")
    assert allowed.returncode == 0 and "WEAKEN" in allowed.stdout


def test_diff_of_a_bundle_against_itself_is_empty(bundles: dict[str, Path]) -> None:
    done = run_cli("diff", str(bundles["finance"]), str(bundles["finance"]), "--budget", "120", "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert "no change" in done.stdout


def test_diff_reports_a_matrix_cell_lowered_from_approve_to_confirm(tmp_path: Path) -> None:
    """kcp-visibility-access: reading restricted data needs approval; the cell lowered to confirm."""
    name = "kcp-visibility-access"
    matrix = yaml.safe_load((DEPLOYMENTS / name / "matrix.yaml").read_text(encoding="utf-8"))
    assert matrix["task_types"]["read"]["sensitivity"]["restricted"] == "approve"
    matrix["task_types"]["read"]["sensitivity"]["restricted"] = "confirm"
    lowered = tmp_path / "matrix-lowered.yaml"
    lowered.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    old = read_bundle(compiled(tmp_path, name))
    report = diff(old, read_bundle(compiled(tmp_path, name, matrix=lowered)), budget=120)
    assert report.weakens, report.to_dict()
    weakening = [c for cs in report.examples.values() for c in cs if c.weakens]
    assert weakening and all(c.action["action_type"] == "read" for c in weakening)
    assert any("no longer requires independent_human_approval" in c.why for c in weakening)


def _matrix_with(tmp: Path, name: str, task: str, *, lower_read: bool = False) -> Path:
    """The deployment's matrix with a new task type (a copy of `read`'s row), optionally with
    `read`'s restricted cell lowered from approve to confirm."""
    matrix = yaml.safe_load((DEPLOYMENTS / name / "matrix.yaml").read_text(encoding="utf-8"))
    matrix["task_types"][task] = {"sensitivity": dict(matrix["task_types"]["read"]["sensitivity"])}
    if "requested_actions" in matrix["task_types"]["read"]:  # a matrix binding tools: the new type's own
        matrix["task_types"][task]["requested_actions"] = [f"{task}.run"]
    if lower_read:
        matrix["task_types"]["read"]["sensitivity"]["restricted"] = "confirm"
    path = tmp / f"matrix-{task}-{'lowered' if lower_read else 'grown'}.yaml"
    path.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["kcp-visibility-access", "finance"])  # finance binds tools to task types
def test_diff_counts_a_new_task_type_as_new_coverage_not_weakening(tmp_path: Path, name: str) -> None:
    """A task type added to the matrix: the actions OLD denied as task_type_not_in_matrix (and,
    where the matrix binds tools, requested_action_not_in_task_type) are new coverage, shown with
    the states NEW gives them; the diff does not weaken (exit 0)."""
    grown = _matrix_with(tmp_path, name, "summarise")
    old, new = compiled(tmp_path, name), compiled(tmp_path, name, matrix=grown)
    report = diff(read_bundle(old), read_bundle(new), budget=300)
    assert report.new_coverage and not report.weakens, report.to_dict()
    covered = [c for t, cs in report.examples.items() if t in report.new_coverage for c in cs]
    assert covered and {c.action["action_type"] for c in covered} == {"summarise"}
    assert all("task_type_not_in_matrix" in c.old["reason_codes"] for c in covered)
    assert any(c.new["decision"] != "DENY" for c in covered)  # NEW decides them on its own terms
    deploy = str(DEPLOYMENTS / name)
    done = run_cli("diff", deploy, deploy, "--new-matrix", str(grown), "--budget", "300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "new coverage:" in done.stdout and "(new coverage)" in done.stdout and "WEAKEN" not in done.stdout


def test_the_undeclared_codes_are_the_shipped_policies_codes() -> None:
    """diff's UNDECLARED set names codes the shipped evaluators emit, so a rename cannot turn
    new coverage back into weakening (or a weakening into coverage) unnoticed."""
    from kcp_opa.analysis.diff import UNDECLARED

    sources = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "policies").rglob("*.rego"))
    assert all(f'"code": "{code}"' in sources for code in UNDECLARED), sorted(UNDECLARED)


def test_diff_compiles_declaration_pairs_on_the_fly(bundles: dict[str, Path], tmp_path: Path) -> None:
    """OLD and NEW as declarations (a deployment directory, a matrix, a policies directory): the
    lowered cell is a weakening (exit 1); a bundle against its own declarations is no change."""
    name = "kcp-visibility-access"
    matrix = yaml.safe_load((DEPLOYMENTS / name / "matrix.yaml").read_text(encoding="utf-8"))
    matrix["task_types"]["read"]["sensitivity"]["restricted"] = "confirm"
    lowered = tmp_path / "matrix-lowered.yaml"
    lowered.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    deploy = str(DEPLOYMENTS / name)
    done = run_cli("diff", deploy, deploy, "--new-matrix", str(lowered), "--new-policies", str(REPO / "policies"),
                   "--budget", "120", "--format", "json")  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["weakens"] and report["old"] == deploy and "compiled from" in report["new_provenance"]
    assert any("no longer requires independent_human_approval" in c["why"] for cs in report["examples"].values()
               for c in cs)  # fmt: skip
    same = run_cli("diff", str(bundles["support-desk"]), str(DEPLOYMENTS / "support-desk" / "knowledge.yaml"),
                   "--budget", "40")  # fmt: skip
    assert same.returncode == 0 and "no change" in same.stdout, same.stdout + same.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "knowledge.yaml").write_text("project: [\n", encoding="utf-8")
    refused = run_cli("diff", deploy, str(broken), "--new-matrix", str(lowered), "--budget", "20")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "new declarations do not compile" in refused.stderr, refused.stderr


def _ledger_decision(tmp: Path, bundle: Path) -> tuple[Path, str, dict[str, object]]:
    cases = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text(encoding="utf-8"))
    action = cases["base_action"]
    ledger = tmp / "ledger.jsonl"
    gate = Gate(read_bundle(bundle), config=GateConfig(preflight=False, ledger=AuditLedger(ledger)))
    sources, principal = case_sources(action, {"from_action": True}, cases["now"])
    decision = gate.decide_prepared(gate.prepare(action, now=cases["now"], principal=principal, context=sources))
    assert decision.decision.value == "ALLOW"
    return ledger, decision.decision_id, action


def test_cases_pin_turns_an_archived_decision_into_a_failing_case(bundles: dict[str, Path], tmp_path: Path) -> None:
    ledger, decision_id, action = _ledger_decision(tmp_path, bundles["support-desk"])
    target = tmp_path / "pinned.yaml"
    done = run_cli(
        "cases",
        "pin",
        str(ledger),
        decision_id,
        "--expect",
        "DENY",
        "--reason",
        "tenant_boundary",
        "--to",
        str(target),
        "--deployment",
        "support-desk",
    )
    assert done.returncode == 0, done.stderr
    (case,) = load_cases(target)
    assert case.action == action and case.expect.decision == "DENY"
    run = run_cases([case], REPO / "policies", DEPLOYMENTS, engines=("regopy",))
    assert not run.results[0].passed  # the next `kcp-opa test` fails until the policy denies it
    # Appended to an existing file with a base_action: written as a patch, comments kept.
    existing = tmp_path / "support-desk.yaml"
    shutil.copy(REPO / "fixtures" / "cases" / "support-desk.yaml", existing)
    before = len(load_cases(existing))
    pin(ledger, decision_id, expect="ALLOW", reasons=(), to=existing, case_id="pinned-clean-read")
    after = load_cases(existing)
    assert len(after) == before + 1 and after[-1].action == action
    assert existing.read_text(encoding="utf-8").startswith("# Decision cases for the support-desk")
    again = run_cli(
        "cases",
        "pin",
        str(ledger),
        decision_id,
        "--expect",
        "DENY",
        "--to",
        str(existing),
        "--case-id",
        "pinned-clean-read",
    )
    assert again.returncode == 2 and "already pinned" in again.stderr
    missing = run_cli("cases", "pin", str(ledger), "dec_nope", "--expect", "DENY", "--to", str(existing))
    assert missing.returncode == 2 and "no decision dec_nope" in missing.stderr


def test_prove_with_requires_from_holds_the_newer_contract_too(bundles: dict[str, Path]) -> None:
    today = read_bundle(bundles["support-desk"])
    report = prove(read_bundle(ROUND_ONE), budget=250, requires_from=[today], opa=False)
    assert {TENANT, BUDGET} <= {v.invariant for v in report.violations}


def test_prove_cli_prints_the_meaning_and_exits_1_on_a_violation(bundles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "found.yaml"
    done = run_cli(
        "prove",
        str(ROUND_ONE),
        "--budget",
        "250",
        "--engines",
        "regopy",
        "--cases-out",
        str(out),
    )
    assert done.returncode == 1, done.stderr
    assert "what was proved: sampled:" in done.stdout and "VIOLATION contract.absent_needed_fact" in done.stdout
    assert load_cases(out)
    bad = run_cli("prove", str(ROUND_ONE), "--invariants", str(out))
    assert bad.returncode == 2 and "no package line" in bad.stderr


def test_classify_weakening() -> None:
    approve = {"decision": "HUMAN_APPROVAL", "required_controls": ["independent_human_approval", "user_confirmation"]}
    confirm = {"decision": "HUMAN_APPROVAL", "required_controls": ["user_confirmation"]}
    assert classify(approve, confirm)[1] == ["no longer requires independent_human_approval"]
    assert classify(confirm, approve)[1] == []
    deny = {"decision": "DENY", "required_controls": ["standard_audit_logging"]}
    assert classify(deny, {"decision": "DENY", "required_controls": []})[1] == []  # a DENY's controls are moot
    assert classify(deny, {"decision": "ALLOW", "execution_allowed": True})[1] == [
        "state DENY -> ALLOW is weaker",
        "execution is now allowed",
        "no longer requires standard_audit_logging",
    ]


def test_diff_round_one_to_today_only_strengthens(bundles: dict[str, Path]) -> None:
    report = diff(read_bundle(ROUND_ONE), read_bundle(bundles["support-desk"]), budget=120)
    assert not report.weakens, report.weakening
    assert report.transitions["ALLOW -> ESCALATE"] > 0  # the absent tenant and budget now escalate
