"""The KCP governance blocks: what validate says, what the bundle carries (effective values with
provenance), and that the gate decides on them (the decisions themselves are decision cases in
fixtures/cases/kcp-governance.yaml and Rego tests beside each evaluator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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


def _doc(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded
