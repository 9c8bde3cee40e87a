"""Attacks on the analysis: a weakened policy must not pass `prove` or `diff` unnoticed.

A bad day: someone deletes the rule that denies an unknown unit (or an old policy lacked the
tenant and budget checks). prove must name the broken invariant with a counterexample that
really decides that way on the gate, and diff must fail the change.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import yaml
from conftest import DEPLOYMENTS, REPO, run_cli

from kcp_opa.analysis.diff import Declared, diff, newly_covered
from kcp_opa.analysis.prove import prove
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.compile.bundle import BundleFile, read_bundle, tarball_bytes
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.compile.signatures import SIGNATURES_NAME
from kcp_opa.compile.signkeys import load_pem_signer
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

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
    gate = Gate(weakened, config=GateConfig(preflight=False))
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
    proof = prove(today, budget=300, opa=False)
    assert proof.verdict == "PROVED", (proof.vacuous(), [v.invariant for v in proof.violations])


def _signed(tmp: Path, policies: Path, key: Path, name: str) -> Path:
    base = DEPLOYMENTS / "support-desk"
    out = tmp / f"{name}.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        policies,
        out,
        options=CompileOptions(signing_key=load_pem_signer(key)),
    )
    return out


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle, "r:gz") as tar:
        return {i.name: tar.extractfile(i).read() for i in tar if i.isfile()}  # type: ignore[union-attr]


def test_prove_and_diff_refuse_a_signed_bundle_that_does_not_verify(tmp_path: Path) -> None:
    """A forged bundle (a weakened policy under the real bundle's signature) is never analysed as
    the signed one: with the verification key, prove and diff refuse it (exit 2, one line); a
    bundle signed by another key is refused too; the genuine one is read and said verified."""
    keys = tmp_path / "keys"
    keys.mkdir()
    assert run_cli("bundle", "keygen", str(keys / "ours.pem")).returncode == 0
    assert run_cli("bundle", "keygen", str(keys / "theirs.pem")).returncode == 0
    genuine = _signed(tmp_path, REPO / "policies", keys / "ours.pem", "genuine")
    weakened = _bundle(tmp_path, _without_unknown_unit_rule(tmp_path))
    forged = _members(weakened) | {SIGNATURES_NAME: _members(genuine)[SIGNATURES_NAME]}
    (tmp_path / "forged.tar.gz").write_bytes(tarball_bytes([BundleFile(n, c) for n, c in forged.items()]))
    other = _signed(tmp_path, REPO / "policies", keys / "theirs.pem", "other")
    key = ["--verification-key", str(keys / "ours.pem.pub")]
    refusals = ((tmp_path / "forged.tar.gz", "edited after signing"), (other, "not a configured verification key"))
    for bundle, why in refusals:
        proved = run_cli("prove", str(bundle), "--budget", "20", "--engines", "regopy", *key)
        assert proved.returncode == 2 and why in proved.stderr and len(proved.stderr.splitlines()) == 1, proved.stderr
        diffed = run_cli("diff", str(genuine), str(bundle), "--budget", "20", *key)
        assert diffed.returncode == 2 and why in diffed.stderr, diffed.stderr
    verified = run_cli("prove", str(genuine), "--budget", "20", "--engines", "regopy", *key)
    # Read and verified; 20 decisions test little, and the verdict says so (VACUOUS, exit 1).
    assert "signature verified (key kcp-" in verified.stdout, verified.stderr
    assert verified.returncode == 1 and "): VACUOUS" in verified.stdout, verified.stdout
    unverified = run_cli("diff", str(genuine), str(genuine), "--budget", "20")
    assert unverified.returncode == 0 and "signature NOT verified" in unverified.stdout, unverified.stderr


WINDOWED = """kcp_version: "0.30"
project: windowed
version: "1.0.0"
updated: "2026-11-20"
compliance: {data_residency: [EU], sensitivity: internal}
units:
  - id: migration-runbook
    path: ops/migration.md
    intent: "How do we migrate the billing database?"
    scope: project
    audience: [operator, agent]
    temporal: {valid_from: "2026-11-01", valid_until: "2026-11-30"}
"""

WINDOWED_MATRIX = """kind: kcp-opa/delegation-matrix
format_version: 1
name: windowed-autonomy
version: "2026.11.1"
agreed_by:
  - {role: cto, name: "Ines Moreau", date: "2026-11-10"}
  - {role: compliance_officer, name: "Tomasz Kowal", date: "2026-11-11"}
task_types:
  read:
    sensitivity: {internal: autonomous}
"""


def test_prove_catches_a_unit_served_past_its_temporal_window(tmp_path: Path) -> None:
    """A bad day: the expiry check is off by a few years. prove decides the unit one second past
    its valid_until (and before its valid_from), and names the broken window invariant."""
    (tmp_path / "knowledge.yaml").write_text(WINDOWED, encoding="utf-8")
    (tmp_path / "matrix.yaml").write_text(WINDOWED_MATRIX, encoding="utf-8")
    policies = tmp_path / "late" / "policies"
    shutil.copytree(REPO / "policies", policies)
    lifecycle = policies / "kcp" / "evaluators" / "lifecycle.rego"
    text = lifecycle.read_text(encoding="utf-8")
    assert "\t_now > _until\n" in text
    lifecycle.write_text(text.replace("\t_now > _until\n", "\t_now > _until + 100000000\n"), encoding="utf-8")
    for source, broken in ((REPO / "policies", False), (policies, True)):
        out = tmp_path / f"{source.parent.name}.tar.gz"
        compile_bundle([tmp_path / "knowledge.yaml"], tmp_path / "matrix.yaml", source, out)
        report = prove(read_bundle(out), budget=400, opa=False)
        found = {v.invariant: v for v in report.violations}
        assert ("contract.unit_outside_its_window_never_allows" in found) is broken, sorted(found)
    violation = found["contract.unit_outside_its_window_never_allows"]
    assert violation.now == "2026-12-01T00:00:00Z" and violation.decision["decision"] == "ALLOW"
    assert report.counts["contract.unit_outside_its_window_never_allows"] >= 1


def test_prove_catches_a_policy_that_relaxes_on_a_stronger_restriction(tmp_path: Path) -> None:
    """A bad day: the human-approval-required check is inverted, so a unit that declares it is
    approved by no one while every other unit waits. The same action decided with the
    restriction added to its unit gets a weaker state: contract.monotone_stronger_restriction."""
    (tmp_path / "knowledge.yaml").write_text(WINDOWED, encoding="utf-8")
    (tmp_path / "matrix.yaml").write_text(WINDOWED_MATRIX, encoding="utf-8")
    policies = tmp_path / "inverted" / "policies"
    shutil.copytree(REPO / "policies", policies)
    restrictions = policies / "kcp" / "evaluators" / "restrictions.rego"
    text = restrictions.read_text(encoding="utf-8")
    rule = '_human_required if facts.restricted("human-approval-required")'
    assert rule in text
    # the edit widens where the evaluator fires, so it widens its applies too (docs/extending.md):
    # otherwise the decision plan keeps the evaluator off the units the inverted rule now reaches
    inverted = text.replace(rule, rule.replace(" if ", " if not ")) + "\napplies(_, _) := true\n"
    restrictions.write_text(inverted, encoding="utf-8")
    for source, broken in ((REPO / "policies", False), (policies, True)):
        out = tmp_path / f"{source.parent.name}.tar.gz"
        compile_bundle([tmp_path / "knowledge.yaml"], tmp_path / "matrix.yaml", source, out)
        report = prove(read_bundle(out), budget=200, opa=False)
        found = {v.invariant: v for v in report.violations}
        assert ("contract.monotone_stronger_restriction" in found) is broken, sorted(found)
    violation = found["contract.monotone_stronger_restriction"]
    assert violation.change == "stronger_restriction:human-approval-required"
    assert violation.before is not None and violation.before["decision"] == "HUMAN_APPROVAL"
    assert violation.decision["decision"] == "ALLOW"


def test_new_coverage_does_not_hide_a_weakening_beside_it(tmp_path: Path) -> None:
    """A matrix change that adds a task type and lowers an existing cell: the new task type's
    actions are new coverage, and the lowered cell still fails the diff (exit 1)."""
    name = "kcp-visibility-access"
    matrix = yaml.safe_load((DEPLOYMENTS / name / "matrix.yaml").read_text(encoding="utf-8"))
    matrix["task_types"]["summarise"] = {"sensitivity": dict(matrix["task_types"]["read"]["sensitivity"])}
    matrix["task_types"]["read"]["sensitivity"]["restricted"] = "confirm"
    changed = tmp_path / "matrix.yaml"
    changed.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    base = DEPLOYMENTS / name
    old, new = tmp_path / "old.tar.gz", tmp_path / "new.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", old)
    compile_bundle([base / "knowledge.yaml"], changed, REPO / "policies", new)
    report = diff(read_bundle(old), read_bundle(new), budget=300)
    assert report.new_coverage and report.weakens, report.to_dict()
    weakening = [c for cs in report.examples.values() for c in cs if c.weakens]
    assert weakening and {c.action["action_type"] for c in weakening} == {"read"}
    done = run_cli("diff", str(old), str(new), "--budget", "300")
    assert done.returncode == 1 and "WEAKEN" in done.stdout, done.stdout + done.stderr


def test_a_deleted_undeclared_rule_is_a_weakening_not_new_coverage(tmp_path: Path) -> None:
    """The rule that denies an unknown unit deleted: NEW no longer gives unknown_unit, but its
    declarations name no new unit, so the change is a weakening, never new coverage."""
    old = _bundle(tmp_path, REPO / "policies")
    new = _bundle(tmp_path, _without_unknown_unit_rule(tmp_path))
    report = diff(read_bundle(old), read_bundle(new), budget=200)
    assert report.weakens and not report.new_coverage, report.to_dict()


def test_a_renamed_unit_with_a_weaker_profile_is_not_new_coverage(tmp_path: Path) -> None:
    """A unit renamed and its restrictions cleared: its actions were unknown_unit under OLD's
    name, but NEW did not only add, so the change is judged as usual and fails the diff."""
    base = DEPLOYMENTS / "finance"
    text = (base / "knowledge.yaml").read_text(encoding="utf-8")
    assert "  - id: beneficiary-register\n" in text
    renamed = text.replace("  - id: beneficiary-register\n", "  - id: beneficiary-register-v2\n").replace(
        "restrictions: [audit-required, human-approval-required, no-external-llm, no-cross-border]", "restrictions: []"
    )
    assert renamed.count("restrictions: []") == 1
    (tmp_path / "knowledge.yaml").write_text(renamed, encoding="utf-8")
    old, new = tmp_path / "old.tar.gz", tmp_path / "new.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", old)
    compile_bundle([tmp_path / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", new)
    report = diff(read_bundle(old), read_bundle(new), budget=600)
    assert report.weakens and not report.new_coverage, report.to_dict()["transitions"]


def test_coverage_answers_each_undeclared_code_with_its_own_declaration() -> None:
    """A new task type does not excuse dropping unknown_unit: OLD denied the action for both, NEW
    declares the task type but not the unit, and NEW allows it. That is a weakening."""
    old_declared = Declared(frozenset({"read"}), frozenset({("treasury", "supplier-payments")}))
    new_declared = Declared(frozenset({"read", "payroll"}), frozenset({("treasury", "supplier-payments")}))
    action = {"action_type": "payroll", "knowledge": {"project": "treasury", "unit": "ghost"}}
    old = {"decision": "DENY", "reason_codes": ["task_type_not_in_matrix", "unknown_unit"]}
    new = {"decision": "ALLOW", "reason_codes": ["policy_passed"], "execution_allowed": True}
    assert not newly_covered(action, old, new, (old_declared, new_declared))
    only_task = {"decision": "DENY", "reason_codes": ["task_type_not_in_matrix"]}
    assert newly_covered(action | {"knowledge": {"project": "treasury", "unit": "supplier-payments"}},
                         only_task, new, (old_declared, new_declared))  # fmt: skip
