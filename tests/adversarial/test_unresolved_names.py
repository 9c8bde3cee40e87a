"""Attack class: a name that resolves nowhere, so a green check ships a rule that fails at run time.

A custom evaluator requiring a control the desk cannot record (``medical_review``, or the
misspelled ``medical_reveiw``) passed ``generate``, ``check --strict`` and ``compile --trust``
and was refused only by ``controls record`` (``unknown_control``). An approver role no registered
principal holds passed ``compile --trust``. A signed exception waiving a code no rule lets it
waive (``cross_border_transfer``, ``field_acess_violation``) validated and loaded, and a DPO
signed something that did nothing. And an exception could lift ``no-external-llm`` on GDPR
Art. 9 data. Each is now refused before run time, naming the file, the line, the unknown name
and its nearest known spelling; the Art. 9 lock is the policy's, decided alike on both engines.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, opa_query, run_cli
from exceptionkit import exception, key, write_file, write_registry

from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.context import SignedExceptions
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.decide.gate import Gate
from kcp_opa.service.loading import with_exceptions

NOW = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)
ISSUED, EXPIRES = NOW - dt.timedelta(hours=1), NOW + dt.timedelta(days=2)
SUPPORT = DEPLOYMENTS / "support-desk"
REGISTRY = REPO / "fixtures" / "trust" / "registry.yaml"

_MEDICAL = """# METADATA
# title: Medical review
# description: An action on health data needs a medical reviewer's sign-off.
# custom:
#   evaluator_id: medical_check
#   evaluator_version: "1.0.0"
package kcp.evaluators.medical

import rego.v1

import data.kcp.lib.facts

# METADATA
# title: Findings
# custom:
#   requires: [input.action.knowledge.unit]
findings contains finding if {
	"health" in facts.profile.compliance.data_categories
	finding := {
		"code": "medical_review_required",
		"rule": "medical.review",
		"state": "HUMAN_APPROVAL",
		"controls": ["CONTROL"],
		"message": "a medical reviewer signs off actions on health data",
		"details": {},
	}
}
"""


_CONTROL_LINE = next(n for n, line in enumerate(_MEDICAL.splitlines(), start=1) if '"controls"' in line)


def _policies(root: Path, control: str) -> Path:
    """The shipped policies plus a medical evaluator requiring ``control``, registered (generate)."""
    policies = root / f"policies-{control}"
    shutil.copytree(POLICIES, policies)
    (policies / "kcp" / "evaluators" / "medical.rego").write_text(_MEDICAL.replace("CONTROL", control), "utf-8")
    generated = run_cli("generate", "--policies", str(policies), "--format", "json")
    assert generated.returncode == 0, generated.stderr
    return policies


def _registry(root: Path, *controls: str) -> Path:
    """The reference registry with ``controls`` declared as separation-of-duties controls."""
    data = yaml.safe_load(REGISTRY.read_text("utf-8"))
    data["separation_of_duties"] = [*data["separation_of_duties"], *controls]
    path = root / "registry.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    return path


def _compile(policies: Path, registry: Path, matrix: Path, out: Path) -> Any:
    return run_cli(
        "compile", str(SUPPORT / "knowledge.yaml"), "--matrix", str(matrix), "--trust", str(registry),
        "--policies", str(policies), "--output", str(out), "--format", "text",
    )  # fmt: skip


def test_check_refuses_a_control_the_desk_cannot_record(tmp_path: Path) -> None:
    """The new module checked beside the controls package (what the desk admits), as a user checks
    the files they changed: the whole tree takes minutes on a loaded machine and finds the same."""
    for control in ("medical_review", "medical_reveiw"):
        policies = _policies(tmp_path, control)
        changed = [str(policies / "kcp" / p) for p in ("evaluators/medical.rego", "controls/evidence.rego")]
        proc = run_cli("check", *changed, "--format", "json")
        refused = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "unknown_control"]
        assert proc.returncode == 1 and len(refused) == 1, proc.stdout[-2000:]
        assert refused[0]["file"] == "medical.rego" and refused[0]["line"] == _CONTROL_LINE
        assert f"requires control {control}," in refused[0]["message"]
        assert "separation_of_duties" in refused[0]["message"]


def test_compile_trust_resolves_a_control_against_the_registry(tmp_path: Path) -> None:
    right, wrong = _policies(tmp_path, "medical_review"), _policies(tmp_path, "medical_reveiw")
    undeclared = _compile(right, REGISTRY, SUPPORT / "matrix.yaml", tmp_path / "a.tar.gz")
    assert undeclared.returncode != 0 and "requires control medical_review," in undeclared.stderr
    assert "separation_of_duties" in undeclared.stderr and f"medical.rego:{_CONTROL_LINE}:" in undeclared.stderr
    declared = _registry(tmp_path, "medical_review")
    assert _compile(right, declared, SUPPORT / "matrix.yaml", tmp_path / "b.tar.gz").returncode == 0
    misspelled = _compile(wrong, declared, SUPPORT / "matrix.yaml", tmp_path / "c.tar.gz")
    assert misspelled.returncode != 0, misspelled.stdout
    assert "medical_reveiw" in misspelled.stderr and "(did you mean medical_review?)" in misspelled.stderr


def test_compile_trust_refuses_an_approver_role_no_principal_holds(tmp_path: Path) -> None:
    matrix = yaml.safe_load((SUPPORT / "matrix.yaml").read_text("utf-8"))
    matrix["parameters"]["approver_roles"]["by_task_type"]["refund"] = "finance_reveiwer"
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix, sort_keys=False), "utf-8")
    proc = _compile(POLICIES, REGISTRY, path, tmp_path / "out.tar.gz")
    lines = [line for line in proc.stderr.splitlines() if "finance_reveiwer" in line]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    line = next(n for n, text in enumerate(path.read_text("utf-8").splitlines(), start=1) if "finance_reveiwer" in text)
    assert f"{path}:{line}:" in lines[0] and "(did you mean finance_reviewer?)" in lines[0]
    assert "held by no principal of the trust registry" in lines[0]
    assert _compile(POLICIES, REGISTRY, SUPPORT / "matrix.yaml", tmp_path / "fine.tar.gz").returncode == 0


@pytest.fixture(scope="module")
def support_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("names") / "support-desk.tar.gz"
    compile_bundle([SUPPORT / "knowledge.yaml"], SUPPORT / "matrix.yaml", POLICIES, out)
    return out


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Any, Any]:
    signer = key()
    return signer, write_registry(tmp_path / "registry.yaml", signer)


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("cross_border_transfer", "not a code the policies let an exception waive"),
        ("field_acess_violation", "(did you mean field_access_violation?)"),
        ("tenant_boundary", "terminal"),
    ],
)
def test_exceptions_check_and_load_refuse_a_code_no_rule_lets_them_waive(
    tmp_path: Path, signed: tuple[Any, Any], support_bundle: Path, code: str, why: str
) -> None:
    signer, registry = signed
    path = write_file(tmp_path / "exc.yaml", [exception(signer, issued=ISSUED, expires=EXPIRES, waives=[code])])
    trust = ["--trust", str(tmp_path / "registry.yaml"), "--now", "2026-11-29T10:00:00Z", "--format", "text"]
    proc = run_cli("exceptions", "check", str(path), *trust)
    assert proc.returncode == 1 and code in proc.stdout and why in proc.stdout, proc.stdout + proc.stderr
    with pytest.raises(ValidationFailedError) as caught:
        with_exceptions(Gate.from_bundle(support_bundle), registry, path, None)
    assert code in str(caught.value) and why in str(caught.value)
    assert f"{path}:" in str(caught.value)


def test_a_waivable_code_an_exception_may_name_still_loads(
    tmp_path: Path, signed: tuple[Any, Any], support_bundle: Path
) -> None:
    signer, registry = signed
    path = write_file(tmp_path / "exc.yaml", [exception(signer, issued=ISSUED, expires=EXPIRES)])
    trust = ["--trust", str(tmp_path / "registry.yaml"), "--now", "2026-11-29T10:00:00Z", "--format", "text"]
    assert run_cli("exceptions", "check", str(path), *trust).returncode == 0
    gate = Gate.from_bundle(support_bundle)
    with_exceptions(gate, registry, path, None)
    assert gate.context is not None and gate.context.exceptions is not None


# The support-desk base action, its agent's model externally hosted.
_READ: dict[str, Any] = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]
_READ["runtime"]["model"]["hosting"] = "external"


def _art9_bundle(root: Path, categories: list[str], opted_in: list[str] | None) -> Path:
    """support-desk with customer-records under no-external-llm, its data ``categories``."""
    manifest = yaml.safe_load((SUPPORT / "knowledge.yaml").read_text("utf-8"))
    unit = next(u for u in manifest["units"] if u["id"] == "customer-records")
    unit["compliance"].update(data_categories=categories, restrictions=["no-external-llm"])
    if opted_in is not None:
        unit["compliance"]["waivable_restrictions"] = opted_in
    matrix = yaml.safe_load((SUPPORT / "matrix.yaml").read_text("utf-8"))
    matrix["task_types"]["read"]["data_categories"]["health"] = "autonomous"
    (root / "knowledge.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")
    (root / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False), "utf-8")
    out = root / "bundle.tar.gz"
    compile_bundle([root / "knowledge.yaml"], root / "matrix.yaml", POLICIES, out)
    return out


@pytest.mark.parametrize(
    ("categories", "opted_in", "expected"),
    [
        pytest.param(["personal", "health"], None, "DENY", id="art9-locked"),
        pytest.param(["personal", "health"], ["no-ai-training"], "DENY", id="art9-other-restriction-opted-in"),
        pytest.param(["personal", "health"], ["no-external-llm"], "ALLOW", id="art9-opted-in"),
        pytest.param(["personal", "contact"], None, "ALLOW", id="not-art9"),
    ],
)
def test_an_exception_cannot_lift_no_external_llm_on_special_category_data(
    tmp_path: Path, signed: tuple[Any, Any], categories: list[str], opted_in: list[str] | None, expected: str
) -> None:
    signer, registry = signed
    bundle = _art9_bundle(tmp_path, categories, opted_in)
    item = exception(signer, issued=ISSUED, expires=EXPIRES, waives=["external_llm_forbidden"])
    held = SignedExceptions(registry, path=write_file(tmp_path / "exc.yaml", [item]))
    gate = Gate.from_bundle(bundle)
    sources, principal = case_sources(_READ, {"from_action": True}, NOW.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert sources is not None
    prepared = gate.prepare(_READ, now=NOW, principal=principal, context=replace(sources, exceptions=held))
    decided = gate.decide_prepared(prepared).verdict
    assert decided.decision.value == expected, decided.reason_codes
    assert "external_llm_forbidden" in decided.reason_codes
    assert ("exception_applied" in decided.reason_codes) is (expected == "ALLOW")
    replayed = opa_query(read_bundle(bundle), "data.kcp.gate.decision", json.loads(json.dumps(prepared.document)))
    assert replayed["decision"] == expected and replayed["reason_codes"] == list(decided.reason_codes)
