"""docs/reference.md is generated from the policies and the schemas: it fails here while stale,
and it names every reason code a policy can produce, so no rule goes undocumented."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from conftest import POLICIES, REPO, run_cli

from kcp_opa.compile.referencegen import reference_stale, render_reference

REFERENCE = REPO / "docs" / "reference.md"


def test_reference_is_up_to_date() -> None:
    assert reference_stale(POLICIES, REFERENCE) is None, "docs/reference.md is stale: run `make docs`"


def test_every_reason_code_in_the_policies_is_in_the_reference() -> None:
    text = render_reference(POLICIES)
    literals = set()
    for path in (POLICIES / "kcp" / "evaluators").glob("*.rego"):
        if not path.stem.endswith("_test"):
            literals |= set(re.findall(r'^\t\t"code": "(\w+)",$', path.read_text(encoding="utf-8"), re.MULTILINE))
    assert literals and all(f"| `{code}` |" in text for code in literals)
    for code in ("matrix_approve", "matrix_confirm", "matrix_forbidden"):  # built from the matrix's levels
        assert f"| `{code}` |" in text
    for state in ("DENY", "COMPLIANCE_REVIEW", "ESCALATE", "HUMAN_APPROVAL", "USER_CONFIRMATION", "ALLOW"):
        assert f"| `{state}` |" in text
    assert "| `new_beneficiary` |" in text and "| `cross_border_payment` |" in text


def test_a_policy_change_makes_the_reference_stale_and_make_docs_fixes_it(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    target = tmp_path / "reference.md"
    shutil.copy(REFERENCE, target)
    runtime = policies / "kcp" / "evaluators" / "runtime.rego"
    runtime.write_text(runtime.read_text(encoding="utf-8").replace('"budget_exhausted"', '"budget_gone"'), "utf-8")
    assert reference_stale(policies, target) is not None
    checked = run_cli("generate", "--policies", str(policies), "--reference", str(target), "--check")
    assert checked.returncode == 1
    written = run_cli("generate", "--policies", str(policies), "--reference", str(target), "--format", "text")
    assert written.returncode == 0, written.stderr
    assert reference_stale(policies, target) is None and "| `budget_gone` |" in target.read_text("utf-8")
