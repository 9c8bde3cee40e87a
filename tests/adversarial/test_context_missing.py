"""Attack class: missing context. An absent fact a rule needs is never an allow, and an action
dated far from the decision is held (issue 14, item 2). Real bundles, real regopy gate."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from actionkit import DROP, support_read, with_
from conftest import vouched_gate

from kcp_opa import Gate
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.trail.ledger import AuditLedger

REPO = Path(__file__).resolve().parents[2]
NOW = "2026-11-29T10:00:00Z"


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    out = tmp_path_factory.mktemp("ctx")
    base = REPO / "fixtures" / "deployments" / "support-desk"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", out / "sd.tar.gz")
    return vouched_gate(out / "sd.tar.gz", ledger=AuditLedger(out / "ledger.jsonl"))


def test_the_clean_read_is_an_executable_allow(gate: Gate) -> None:
    decision = gate.decide(support_read(), now=NOW)
    assert decision.decision.value == "ALLOW" and decision.execution_allowed  # the baseline the attacks start from


@pytest.mark.parametrize(
    ("dropped", "changes"),
    [
        ("target.tenant_id", {}),  # was an executable ALLOW
        ("runtime.budget_state", {}),  # was an executable ALLOW
        ("knowledge", {"action_type": "refund", "requested_action": "refunds.create"}),  # skipped every knowledge rule
    ],
)
def test_an_absent_fact_is_context_missing_naming_its_path(gate: Gate, dropped: str, changes: dict[str, Any]) -> None:
    decision = gate.decide(with_(support_read(), {dropped: DROP}, **changes), now=NOW)
    assert decision.decision.value in {"ESCALATE", "COMPLIANCE_REVIEW", "DENY"} and not decision.execution_allowed
    document = decision.to_dict()
    named = {field for v in document["violations"] if v["code"] == "context_missing" for field in v["fields"]}
    assert any(path.startswith(f"input.action.{dropped}") for path in named), named


@pytest.mark.parametrize(
    ("created_at", "code"), [("2023-11-29T10:00:00Z", "action_stale"), ("2029-11-29T10:00:00Z", "clock_skew")]
)
def test_an_action_years_away_from_the_decision_is_held(gate: Gate, created_at: str, code: str) -> None:
    decision = gate.decide(with_(support_read(), created_at=created_at), now=NOW)
    assert decision.decision.value == "ESCALATE" and not decision.execution_allowed
    assert code in decision.reason_codes


_BLOCK = re.compile(r"((?:^#.*\n)+)^findings contains finding if \{", re.MULTILINE)


def _enforced() -> set[str]:
    """Paths whose absence the policy itself turns into a finding: context.rego and action.rego."""
    context = (REPO / "policies" / "kcp" / "evaluators" / "context.rego").read_text()
    paths = set(re.findall(r'"(input\.(?:action|context)\.[a-z_.]+)"', context))
    action = (REPO / "policies" / "kcp" / "evaluators" / "action.rego").read_text()
    fields = re.search(r"_required := \{([^}]*)\}", action)
    assert fields is not None
    paths |= {f"input.action.{name}" for name in re.findall(r'"([a-z_.]+)"', fields.group(1))}
    return paths


def test_every_rule_states_its_facts_and_none_is_silently_skipped() -> None:
    """Each findings rule carries METADATA custom.requires; a required fact is enforced (its
    absence is context_missing / action_incomplete) or the rule states what its absence means."""
    enforced = _enforced()
    rules = 0
    for path in sorted((REPO / "policies" / "kcp" / "evaluators").glob("*.rego")):
        if path.name.endswith("_test.rego"):
            continue
        for block in _BLOCK.findall(path.read_text()):
            meta = block[block.rindex("# METADATA") :]
            custom = yaml.safe_load("\n".join(line[2:] for line in meta.splitlines()[1:]))["custom"]
            rules += 1
            assert isinstance(custom["requires"], list), path
            unenforced = set(custom["requires"]) - enforced
            assert not unenforced or custom.get("absent"), f"{path.name}: {sorted(unenforced)} may be silently absent"
    assert rules >= 38
