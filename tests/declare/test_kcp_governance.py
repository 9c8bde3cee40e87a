"""The KCP governance blocks: what validate says, what the bundle carries (effective values with
provenance), and that the gate decides on them (the decisions themselves are decision cases in
fixtures/cases/kcp-governance.yaml and Rego tests beside each evaluator)."""

from __future__ import annotations

import json
from pathlib import Path

from kcp_opa.declare.effective import effective_unit
from kcp_opa.declare.manifest import load_manifest, validate_manifest

_BASE = "kcp_version: '0.30'\nproject: p\nversion: '1'\n"
_UNIT = "  - {id: %s, path: a.md, intent: 'x?', scope: project, audience: [agent]%s}\n"


def _write(tmp_path: Path, root: str, units: list[tuple[str, str]]) -> Path:
    path = tmp_path / "knowledge.yaml"
    body = _BASE + root + "units:\n" + "".join(_UNIT % (uid, extra) for uid, extra in units)
    path.write_text(body, encoding="utf-8")
    return path


def _codes(path: Path, severity: str) -> set[str]:
    report = validate_manifest(path).to_dict()
    return {d["code"] for d in report[severity]}


def test_unit_authority_replaces_the_root_block_whole(tmp_path: Path) -> None:
    """KCP §3.8: {read: initiative} on the unit leaves modify at the spec default (denied), not the root's."""
    root = "authority: {read: initiative, modify: requires_approval, execute: initiative}\n"
    path = _write(tmp_path, root, [("own", ", authority: {read: initiative}"), ("inherits", "")])
    manifest = load_manifest(path)
    own = effective_unit(manifest, "own").fields["authority"]
    inherits = effective_unit(manifest, "inherits").fields["authority"]
    assert own.source == "unit" and own.value["actions"]["modify"] == "denied"
    assert own.value["actions"]["execute"] == "denied"
    assert inherits.source == "root" and inherits.value["actions"]["modify"] == "requires_approval"
    assert inherits.value["actions"]["execute"] == "initiative"


def test_no_authority_anywhere_is_the_safe_defaults(tmp_path: Path) -> None:
    manifest = load_manifest(_write(tmp_path, "", [("u", "")]))
    authority = effective_unit(manifest, "u").fields["authority"]
    assert authority.value == {
        "declared": False,
        "actions": {
            "read": "initiative",
            "summarize": "initiative",
            "modify": "denied",
            "share_externally": "denied",
            "execute": "denied",
        },
    }
    assert authority.source.startswith("default")


def test_unknown_authority_value_warns_and_falls_to_the_default(tmp_path: Path) -> None:
    path = _write(tmp_path, "", [("u", ", authority: {modify: maybe, read: initiative, export_to_pdf: perhaps}")])
    assert "authority_value_unknown" in _codes(path, "warnings")
    actions = effective_unit(load_manifest(path), "u")["authority"]["actions"]
    assert actions["modify"] == "denied" and "export_to_pdf" not in actions


def test_matrix_maps_task_types_to_kcp_actions() -> None:
    from kcp_opa.declare.matrix import load_matrix

    matrix = load_matrix(Path("fixtures/deployments/kcp-governance/matrix.yaml"))
    actions = matrix.kcp_actions()
    assert actions["modify"] == "modify" and actions["share"] == "share_externally"
    assert "answer" not in actions


def test_explain_shows_effective_authority_visibility_access_with_sources() -> None:
    from conftest import run_cli

    proc = run_cli("explain", "fixtures/deployments/kcp-governance/knowledge.yaml", "ops-runbook", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["effective"]["authority"]["actions"]["modify"] == "denied"
    assert out["sources"]["authority"].startswith("default")
    assert out["effective"]["visibility"]["conditions"][1]["when"]["agent_role"] == [
        "platform_admin",
        "security_auditor",
    ]
    assert out["sources"]["visibility"] == "unit"
    assert out["sources"]["access"] == "default" and out["effective"]["access"] == "public"
    assert out["sources"]["rate_limits"] == "root"


def test_governance_validation_findings(tmp_path: Path) -> None:
    units = [
        (
            "a",
            ", visibility: {default: secret, conditions: [{when: {region: [eu]}, then: {sensitivity: internal}},"
            " {when: {environment: dev}}]}",
        ),
        ("b", ", rate_limits: {default: {requests_per_minute: 0}}, not_for_strict: true"),
        ("c", ", temporal: {valid_from: '2026-05-01', valid_until: '2026-04-01', superseded_by: d}"),
        ("d", ", temporal: {superseded_by: c}"),
    ]
    path = _write(tmp_path, "", units)
    errors, warnings = _codes(path, "errors"), _codes(path, "warnings")
    assert {
        "visibility_sensitivity_unknown",
        "visibility_condition_key_unknown",
        "rate_limit_value",
        "temporal_superseded_by_cycle",
    } <= errors
    assert {"visibility_condition_incomplete", "not_for_strict_without_not_for", "temporal_empty_window"} <= warnings


def test_visibility_and_temporal_resolution(tmp_path: Path) -> None:
    root = "compliance: {sensitivity: internal}\ntemporal: {valid_from: '2026-01-01', valid_until: '2026-12-31'}\n"
    vis = (
        ", visibility: {default: confidential,"
        " conditions: [{when: {environment: [development]}, then: {requires_auth: true}}]}"
    )
    path = _write(tmp_path, root, [("u", vis + ", temporal: {valid_until: '2026-06-30'}")])
    unit = effective_unit(load_manifest(path), "u")
    assert unit["visibility"]["conditions"] == [
        {"when": {"environment": ["development"]}, "sensitivity": "confidential", "requires_auth": True}
    ]
    assert unit["temporal"]["valid_from"] == "2026-01-01" and unit["temporal"]["valid_until"] == "2026-06-30"
    # Inclusive bounds: the last second of 30 June 2026 is inside the window.
    assert unit["temporal"]["until_epoch_seconds"] == 1782863999
    assert unit.fields["temporal"].source == "valid_from: root, valid_until: unit"


def test_explain_shows_the_trace_context_an_audit_chain_requires_with_its_source(tmp_path: Path) -> None:
    """delegation.audit_chain makes the gate require a W3C traceparent (trace.rego); explain says
    so on trust.require_trace_context, naming the audit chain as the source, instead of `false`."""
    from conftest import run_cli

    path = _write(tmp_path, "delegation: {audit_chain: true}\n", [("u1", "")])
    proc = run_cli("explain", str(path), "u1", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["effective"]["trust"]["require_trace_context"] is True
    assert shown["sources"]["trust.require_trace_context"] == "root: delegation.audit_chain"
    plain = _write(tmp_path, "", [("u1", "")])
    assert effective_unit(load_manifest(plain), "u1")["trust.require_trace_context"] is False
