"""A deployment written only from the KCP spec's examples (tests/deployments/spec-examples)
validates, compiles and decides as the spec says, through the CLI a user runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import VOUCH, run_cli

_BASE = Path(__file__).parent / "deployments" / "spec-examples"
_NOW = "2026-11-29T10:00:00Z"


def _action(task: str, unit: str, created_at: str = "2026-11-29T09:59:00Z", **extra: Any) -> dict[str, Any]:
    action: dict[str, Any] = {
        "schema_version": "2.0",
        "action_id": f"act_{task}_{unit}",
        "idempotency_key": f"idem_spec_{task}_{unit}",
        "tenant_id": "tenant_a",
        "subject_id": "user_1",
        "agent_id": "agent/v1",
        "action_type": task,
        "requested_action": "kb.use",
        "target": {"type": "knowledge_unit", "reference": unit, "tenant_id": "tenant_a"},
        "authorization_context": {"requested_by": "user_1", "agent_scope": ["kb.use"]},
        "knowledge": {"project": "spec-examples", "unit": unit},
        "runtime": {"evidence_status": "present", "budget_state": "within_budget"},
        "created_at": created_at,
    }
    for key in ("environment",):
        if key in extra:
            action["runtime"][key] = extra[key]
    for key in ("actor_role", "authenticated_principal", "principal_scopes"):
        if key in extra:
            action["authorization_context"][key] = extra[key]
    return action


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proc = run_cli("validate", str(_BASE / "knowledge.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["valid"] is True
    out = tmp_path_factory.mktemp("spec") / "bundle.tar.gz"
    proc = run_cli("compile", str(_BASE / "knowledge.yaml"), "--matrix", str(_BASE / "matrix.yaml"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize(
    ("task", "unit", "decision", "code"),
    [
        # §4.17: the unit's own block.
        ("read", "gdpr-processing-records", "ALLOW", "policy_passed"),
        ("modify", "gdpr-processing-records", "DENY", "authority_denied"),
        ("execute", "gdpr-processing-records", "DENY", "authority_denied"),
        ("share", "gdpr-processing-records", "HUMAN_APPROVAL", "authority_requires_approval"),
        ("export", "gdpr-processing-records", "HUMAN_APPROVAL", "authority_requires_approval"),
        # §3.8: a unit without a block takes the root's default.
        ("modify", "deployment-guide", "HUMAN_APPROVAL", "authority_requires_approval"),
        ("share", "deployment-guide", "DENY", "authority_denied"),
        # Appendix B / §4.13: a deprecated unit is served, with the obligation to prefer its successor.
        ("read", "deployment-guide-v2", "ALLOW", "unit_deprecated"),
    ],
)
def test_spec_examples_decide_as_the_spec_says(
    bundle: Path, tmp_path: Path, task: str, unit: str, decision: str, code: str
) -> None:
    out = _decide(bundle, tmp_path, _action(task, unit), _NOW)
    assert out["decision"] == decision, out["reason_codes"]
    assert code in out["reason_codes"]
    assert out["execution_allowed"] is (decision == "ALLOW")


def _decide(bundle: Path, tmp_path: Path, action: dict[str, Any], now: str) -> dict[str, Any]:
    path = tmp_path / "action.json"
    path.write_text(json.dumps(action), encoding="utf-8")
    proc = run_cli(
        "decide",
        *VOUCH,
        "-b",
        str(bundle),
        "-i",
        str(path),
        "--now",
        now,
        "--ledger",
        str(tmp_path / "l.jsonl"),
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_deprecated_unit_names_its_successor(bundle: Path, tmp_path: Path) -> None:
    out = _decide(bundle, tmp_path, _action("read", "deployment-guide-v2"), _NOW)
    assert out["obligations"] == ["prefer_superseding_unit"]
    assert [r["message"] for r in out["reasons"]] == ["the unit is deprecated (KCP §4.13); prefer deployment-guide"]


@pytest.mark.parametrize(
    ("unit", "now", "decision", "code"),
    [
        # §4.22: migration-runbook is valid 2026-04-01 .. 2026-06-30, bounds inclusive (v0.25.1).
        ("migration-runbook", "2026-03-31T23:59:59Z", "DENY", "unit_not_yet_valid"),
        ("migration-runbook", "2026-04-01T00:00:00Z", "ALLOW", "policy_passed"),
        ("migration-runbook", "2026-06-30T23:59:59Z", "ALLOW", "policy_passed"),
        ("migration-runbook", "2026-07-01T00:00:00Z", "DENY", "unit_expired"),
        # legacy-sso-policy: valid_until 2026-03-01, valid_from from the root default 2026-01-01.
        ("legacy-sso-policy", "2026-02-15T12:00:00Z", "ALLOW", "policy_passed"),
        ("legacy-sso-policy", "2026-03-02T00:00:00Z", "DENY", "unit_expired"),
        ("legacy-sso-policy", "2025-12-31T23:59:59Z", "DENY", "unit_not_yet_valid"),
        # A unit without its own block takes the root's window (field by field).
        ("new-sso-policy", "2026-11-29T10:00:00Z", "ALLOW", "policy_passed"),
        ("new-sso-policy", "2027-01-01T00:00:00Z", "DENY", "unit_expired"),
    ],
)
def test_temporal_windows_as_the_spec_says(
    bundle: Path, tmp_path: Path, unit: str, now: str, decision: str, code: str
) -> None:
    created = now[:-3] + "00Z" if now.endswith(":59Z") else now
    out = _decide(bundle, tmp_path, _action("read", unit, created_at=created), now)
    assert (out["decision"], out["reason_codes"]) == (decision, [code])


def test_expired_unit_names_its_temporal_successor(bundle: Path, tmp_path: Path) -> None:
    out = _decide(bundle, tmp_path, _action("read", "legacy-sso-policy"), _NOW)
    assert out["reason_codes"] == ["unit_expired"]
    assert "its successor is new-sso-policy" in out["reasons"][0]["message"]


@pytest.mark.parametrize(
    ("purpose", "decision"),
    [
        ("Initial KCP adoption (no prior version)", "DENY"),
        ("migration from V2 to V3", "DENY"),
        ("Upgrade an existing v2 installation", "ALLOW"),
    ],
)
def test_not_for_as_the_spec_says(bundle: Path, tmp_path: Path, purpose: str, decision: str) -> None:
    action = _action("read", "v3-upgrade")
    action["knowledge"]["purpose"] = purpose
    out = _decide(bundle, tmp_path, action, _NOW)
    assert out["decision"] == decision
    assert out["reason_codes"] == (["unit_not_for_purpose"] if decision == "DENY" else ["policy_passed"])


_PRINCIPAL = {"authenticated_principal": "user_1"}


@pytest.mark.parametrize(
    ("unit", "extra", "decision", "code"),
    [
        # §4.16, the spec's branches (docs/kcp-spec-digest.md): development -> internal.
        ("ops-runbook", {"environment": "development", "actor_role": "developer"}, "ALLOW", "policy_passed"),
        # production + platform_admin -> confidential (the second condition wins over the third).
        (
            "ops-runbook",
            {"environment": "production", "actor_role": "platform_admin", **_PRINCIPAL},
            "USER_CONFIRMATION",
            "matrix_confirm",
        ),
        # production with any other role -> restricted.
        (
            "ops-runbook",
            {"environment": "production", "actor_role": "developer", **_PRINCIPAL},
            "HUMAN_APPROVAL",
            "matrix_approve",
        ),
        # staging, and an environment no condition lists -> the default (confidential).
        ("ops-runbook", {"environment": "staging", "actor_role": "developer"}, "USER_CONFIRMATION", "matrix_confirm"),
        ("ops-runbook", {"environment": "moon-base", "actor_role": "developer"}, "USER_CONFIRMATION", "matrix_confirm"),
        # requires_auth: true without an authenticated principal.
        (
            "ops-runbook",
            {"environment": "production", "actor_role": "platform_admin"},
            "DENY",
            "access_unauthenticated",
        ),
        # An environment the action does not state (kcp-opa: context_missing, stricter than the spec);
        # meanwhile the strictest branch applies (restricted, requires_auth), so no principal is a DENY.
        ("ops-runbook", {"actor_role": "developer", **_PRINCIPAL}, "ESCALATE", "context_missing"),
        ("ops-runbook", {"actor_role": "developer"}, "DENY", "access_unauthenticated"),
        # §4.11: authenticated needs a credential; restricted needs the scope too.
        ("internal-runbook", _PRINCIPAL, "ALLOW", "policy_passed"),
        ("internal-runbook", {}, "DENY", "access_unauthenticated"),
        ("executive-report", {**_PRINCIPAL, "principal_scopes": ["executive-team"]}, "ALLOW", "policy_passed"),
        ("executive-report", {**_PRINCIPAL, "principal_scopes": ["read:knowledge"]}, "DENY", "access_scope_missing"),
    ],
)
def test_spec_visibility_and_access_decide_as_the_spec_says(
    bundle: Path, tmp_path: Path, unit: str, extra: dict[str, Any], decision: str, code: str
) -> None:
    out = _decide(bundle, tmp_path, _action("read", unit, **extra), _NOW)
    assert out["decision"] == decision, out["reason_codes"]
    assert code in out["reason_codes"]
