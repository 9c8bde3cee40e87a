"""The cross-checked gate (issue 13): both engines on every decision; a difference is a DENY.

The divergence is forced with a test-only bundle whose no-ai-training rule calls lower() on the
raw purpose (regopy's lower is ASCII-only, engine-findings item 26): for ``TRAİNING`` regopy
finds no training purpose and OPA does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, VOUCH, run_cli, vouched_gate

from kcp_opa.audit.auditor import replay
from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import EngineLoadError
from kcp_opa.decide.gate import build_input
from kcp_opa.models.decision import RoutingState
from kcp_opa.trail.ledger import AuditLedger, read_entries

NOW = "2026-11-29T10:00:00Z"
_FOLDED = 'input.context.folded.purpose in {"training", "ai_training", "model_training"}'
_DIVERGENT = 'lower(input.action.knowledge.purpose) in {"training", "ai_training", "model_training"}'


def _memory_action(purpose: str) -> dict[str, Any]:
    cases = load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml")
    action = json.loads(json.dumps(next(c.action for c in cases if c.case_id == "sd-memory-for-training")))
    action["knowledge"]["purpose"] = purpose
    return action


def _compile(tmp_path: Path, *, divergent: bool) -> Path:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    rule = policies / "kcp" / "evaluators" / "restrictions.rego"
    source = rule.read_text()
    assert _FOLDED in source
    if divergent:
        rule.write_text(source.replace(_FOLDED, _DIVERGENT))
    base = DEPLOYMENTS / "support-desk"
    out = tmp_path / ("divergent.tar.gz" if divergent else "support-desk.tar.gz")
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", policies, out, options=CompileOptions(engine_check=False)
    )
    return out


@pytest.fixture(scope="module")
def divergent_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(tmp_path_factory.mktemp("divergent"), divergent=True)


def test_the_test_bundle_really_diverges(divergent_bundle: Path) -> None:
    """Without the cross-check, regopy misses the training purpose: the false ALLOW class 4 was."""
    decision = vouched_gate(divergent_bundle).decide(_memory_action("TRAİNING"), now=NOW)
    assert "ai_training_forbidden" not in decision.reason_codes


def test_divergence_is_a_deny_with_both_results_in_the_ledger(divergent_bundle: Path, tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.jsonl"
    gate = vouched_gate(divergent_bundle, cross_check="opa", ledger=AuditLedger(ledger_path))
    decision = gate.decide(_memory_action("TRAİNING"), now=NOW)
    assert decision.decision is RoutingState.DENY
    assert decision.reason_codes == ("engine_divergence",)
    assert decision.execution_allowed is False
    assert decision.engine_error is not None and "regopy and OPA differ at /" in decision.engine_error
    [(_, entry)] = [(n, e) for n, e in read_entries(ledger_path) if e.get("type") == "decision"]
    assert entry["result"] is None
    answers = entry["engine_results"]
    assert "ai_training_forbidden" in answers["opa"]["reason_codes"]
    assert "ai_training_forbidden" not in answers["regopy"]["reason_codes"]
    # Item 5: replay reports it as a failure, never as "not evaluated".
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    shutil.copy(divergent_bundle, bundles / divergent_bundle.name)
    report = replay(ledger_path, bundles)
    assert not report.ok
    assert [m["reason"] for m in report.mismatches] == ["engine_divergence"]


def test_agreeing_engines_decide_as_without_cross_check(divergent_bundle: Path) -> None:
    prepared = build_input(_memory_action("training"), now=NOW)
    plain, _ = vouched_gate(divergent_bundle).evaluate(prepared)
    checked, _ = vouched_gate(divergent_bundle, cross_check="opa").evaluate(prepared)
    assert checked.to_dict() == plain.to_dict()
    assert "ai_training_forbidden" in checked.reason_codes


def test_unknown_cross_check_engine_is_refused(divergent_bundle: Path) -> None:
    with pytest.raises(EngineLoadError, match="cross_check"):
        vouched_gate(divergent_bundle, cross_check="wasm")


def test_cli_cross_check(divergent_bundle: Path, tmp_path: Path) -> None:
    action = tmp_path / "action.json"
    action.write_text(json.dumps(_memory_action("TRAİNING"), ensure_ascii=False))
    proc = run_cli("decide", *VOUCH, "-b", str(divergent_bundle), "-i", str(action), "--now", NOW, "--cross-check",
                   "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reason_codes"] == ["engine_divergence"]
    shipped = _compile(tmp_path, divergent=False)
    proc = run_cli(
        "decide",
        *VOUCH,
        "-b",
        str(shipped),
        "-i",
        str(action),
        "--now",
        NOW,
        "--cross-check",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    assert "ai_training_forbidden" in json.loads(proc.stdout)["reason_codes"]


def test_replay_fails_on_a_missing_or_unparsable_result(tmp_path: Path) -> None:
    """Issue 13 item 4: before, a `result: null` entry counted as "not evaluated" and replay passed."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    decision_rego = policies / "kcp" / "gate" / "decision.rego"
    # An engine error (strict builtin errors): the action type is not a number.
    source = decision_rego.read_text().replace(
        '\t"decision": state,', '\t"decision": state,\n\t"x": to_number(input.action.action_type),', 1
    )
    decision_rego.write_text(source)
    (policies / "kcp" / "gate" / "decision_test.rego").unlink()
    base = DEPLOYMENTS / "support-desk"
    bundles = tmp_path / "bundles"
    bundle = bundles / "broken.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", policies, bundle, options=CompileOptions(engine_check=False)
    )
    ledger_path = tmp_path / "ledger.jsonl"
    ledger = AuditLedger(ledger_path)
    decision = vouched_gate(bundle, ledger=ledger).decide(_memory_action("training"), now=NOW)
    assert decision.reason_codes == ("engine_error",)
    [(_, entry)] = [(n, e) for n, e in read_entries(ledger_path) if e.get("type") == "decision"]
    garbled = {k: v for k, v in entry.items() if k not in {"seq", "previous_hash", "entry_hash"}}
    ledger.append({**garbled, "decision_id": "dec_garbled", "result": "not a decision"})
    report = replay(ledger_path, bundles)
    assert not report.ok
    reasons = {m["decision_id"]: m.get("reason") for m in report.mismatches}
    assert reasons[decision.decision_id] == "result_missing"
    assert reasons["dec_garbled"] == "result_unparsable"
    assert "not_evaluated" not in report.reproduced
