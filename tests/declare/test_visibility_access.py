"""KCP visibility (§4.16) and access (§4.11): the compile-time table the gate looks up, and
`kcp-opa explain` showing exactly what the policy decides on (the decisions themselves are in
fixtures/cases/kcp-visibility-access.yaml, on both engines, and tests/test_spec_examples.py)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli
from deploykit import hr_manifest

from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.declare import governance as gov

_REPO = Path(__file__).resolve().parents[2]
_DEPLOY = _REPO / "fixtures" / "deployments" / "kcp-visibility-access"

_BLOCK = {
    "default": "internal",
    "conditions": [
        {"when": {"environment": ["production"]}, "then": {"sensitivity": "confidential", "requires_auth": True}},
        {"when": {"agent_role": ["auditor"]}, "then": {"sensitivity": "restricted"}},
        {"when": {"environment": ["production"], "agent_role": ["auditor"]}, "then": {"sensitivity": "public"}},
    ],
}


def _cells() -> dict[str, object]:
    visibility, source = gov.effective_visibility({}, {"visibility": _BLOCK}, "internal")
    assert source == "unit"
    return gov.visibility_cells(visibility, "internal")


def test_first_match_wins_for_every_listed_combination() -> None:
    table = _cells()
    cells = table["cells"]
    assert isinstance(cells, dict)
    # production + auditor matches all three conditions: the first one wins, never the public one.
    assert cells["production"]["auditor"]["condition"] == 0
    assert cells["production"]["auditor"]["sensitivity"] == "confidential"
    assert cells["production"][""]["requires_auth"] is True
    assert cells[""]["auditor"] == {
        "sensitivity": "restricted",
        "requires_auth": False,
        "condition": 1,
        "source": "visibility.conditions[1] (first match)",
    }
    # "" = a value no condition lists: the default (the spec's MUST), not the most permissive match.
    assert cells[""][""]["sensitivity"] == "internal" and cells[""][""]["condition"] is None
    assert table["needs"] == ["agent_role", "environment"]


def test_missing_input_takes_the_strictest_branch() -> None:
    incomplete = _cells()["incomplete"]
    assert incomplete == {
        "sensitivity": "restricted",
        "requires_auth": True,
        "condition": None,
        "source": "strictest branch (a condition's input is missing)",
    }


def test_no_block_is_the_flat_sensitivity_and_none_is_undeclared() -> None:
    assert gov.visibility_cells(None, "confidential")["cells"] == {
        "": {
            "": {
                "sensitivity": "confidential",
                "requires_auth": False,
                "condition": None,
                "source": "flat sensitivity (no visibility block)",
            }
        }
    }
    assert gov.visibility_cells(None, None)["cells"][""][""]["sensitivity"] == "undeclared"


def test_explain_shows_what_the_bundle_decides_on(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    compile_bundle([_DEPLOY / "knowledge.yaml"], _DEPLOY / "matrix.yaml", _REPO / "policies", bundle)
    data = read_bundle(bundle).data["kcp_data"]
    # ops-notes is the deployment's only unit with a visibility block.
    (profile,) = [p for p in data["profiles"] if p.get("visibility")]
    proc = run_cli("explain", str(_DEPLOY / "knowledge.yaml"), "ops-notes", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["effective"]["effective_visibility"] == profile["effective_visibility"]
    assert out["sources"]["effective_visibility"] == "resolved from unit"
    assert profile["effective_visibility"]["cells"]["production"][""]["sensitivity"] == "confidential"
    (restricted,) = [p for p in data["profiles"] if p.get("access") == "restricted"]
    assert restricted["auth_scope"] == "executive-team"


def test_validate_warns_when_a_restricted_unit_leaves_access_to_the_public_default(tmp_path: Path) -> None:
    proc = run_cli("validate", "--format", "json", str(hr_manifest(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    findings = json.loads(proc.stdout)["warnings"]
    flagged = [f["path"] for f in findings if f["code"] == "access_not_declared"]
    assert flagged == ["units[0]"]  # payroll only: sick-leave declares access: restricted
