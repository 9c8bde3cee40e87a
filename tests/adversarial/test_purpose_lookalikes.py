"""Attack class: an agent spells a forbidden purpose with look-alike letters to pass it.

A unit restricted ``no-ai-training`` (support-desk's ``agent-memory``) or declaring ``not_for``
(kcp-governance's ``v3-upgrade``, here with ``fine-tuning`` added) must refuse every spelling a
person reads as the forbidden purpose: Cyrillic or Greek letters, fullwidth forms, ligatures,
small capitals, zero-width joiners and spaces, dash, underscore and space variants, mixed case.
Each is decided on regopy and OPA together (the cross-checked gate: a difference would be an
``engine_divergence`` DENY) and is either folded to the forbidden purpose (denied as the plain
spelling is) or refused as unreadable (denied ``purpose_not_folded``). On 284d160 the Cyrillic,
Greek and small-capital spellings were served.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from actionkit import case_action, with_
from conftest import DEPLOYMENTS, POLICIES, vouched_gate

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import KcpOpaError
from kcp_opa.models.decision import RoutingState

NOW = "2026-11-29T10:00:00Z"

#: Spellings of ``training`` (no-ai-training's purposes fold to training, ai_training, model_training).
TRAINING = {
    "cyrillic a": "tr\u0430ining",
    "cyrillic i": "tra\u0456ning",
    "greek alpha": "tr\u03b1ining",
    "greek capitals": "\u03a4R\u0391\u0399\u039d\u0399\u039dG",
    "cyrillic capitals": "\u0422R\u0410\u0406NING",
    "fullwidth": "\uff54\uff52\uff41\uff49\uff4e\uff49\uff4e\uff47",
    "mathematical bold": "\U0001d42d\U0001d42b\U0001d41a\U0001d422\U0001d427\U0001d422\U0001d427\U0001d420",
    "small capitals": "\u1d1b\u0280\u1d00\u026a\u0274\u026a\u0274\u0262",
    "latin script g": "trainin\u0261",
    "zero-width joiner": "trai\u200dning",
    "zero-width space": "train\u200bing",
    "bidi mark": "training\u200e",
    "mixed case": "TrAiNiNg",
    "en dash": "ai\u2013training",
    "non-breaking space": "AI\u00a0Training",
    "fullwidth low line": "model\uff3ftraining",
    "minus sign": "ai\u2212training",
    "cyrillic in model": "M\u043edel training",
    "full stop": "training.",
    "brackets": "(training)",
    "curly quotes": "\u201ctraining\u201d",
    "slash": "ai/training",
    "middle dot": "ai\u00b7training",
    "exclamation and cyrillic": "model tr\u0430ining!",
}

#: Spellings a person reads as ``training`` that cannot be folded to one spelling: refused.
UNREADABLE = {
    "dental click for I": "tra\u01c0ning",
    "cyrillic that does not map": "tr\u0430ining\u0436",
    "hangul filler": "train\u3164ing",
    "private use": "trai\ue000ning",
}

#: Spellings of the added ``not_for`` entry ``fine-tuning``.
FINE_TUNING = {
    "ligature": "\ufb01ne-tuning",
    "ligature and en dash": "\ufb01ne\u2013tuning",
    "underscore": "FINE_TUNING",
    "space": "fine tuning",
    "cyrillic i": "f\u0456ne-tuning",
    "cyrillic e": "fin\u0435 tuning",
    "fullwidth": "\uff46\uff49\uff4e\uff45\uff0d\uff54\uff55\uff4e\uff49\uff4e\uff47",
    "zero-width joiner": "fine-tu\u200dning",
    "figure dash": "fine\u2012tuning",
    "katakana prolonged mark": "fine\u30fctuning",
}


@pytest.fixture(scope="module")
def support_desk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lookalike") / "support-desk.tar.gz"
    base = DEPLOYMENTS / "support-desk"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out, options=CompileOptions(engine_check=False)
    )
    return out


@pytest.fixture(scope="module")
def governance(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kcp-governance with ``fine-tuning`` added to v3-upgrade's not_for."""
    work = tmp_path_factory.mktemp("lookalike-gov")
    base = DEPLOYMENTS / "kcp-governance"
    shutil.copytree(base, work / "deployment")
    manifest = work / "deployment" / "knowledge.yaml"
    text = manifest.read_text()
    old = 'not_for: ["Initial KCP adoption (no prior version)"]'
    assert old in text
    manifest.write_text(text.replace(old, 'not_for: ["Initial KCP adoption (no prior version)", "fine-tuning"]'))
    out = work / "kcp-governance.tar.gz"
    compile_bundle(
        [manifest], work / "deployment" / "matrix.yaml", POLICIES, out, options=CompileOptions(engine_check=False)
    )
    return out


def _memory_action(purpose: str) -> dict[str, Any]:
    return with_(case_action("support-desk.yaml", "sd-memory-for-training"), {"knowledge.purpose": purpose})


def _upgrade_action(purpose: str) -> dict[str, Any]:
    return with_(case_action("kcp-lifecycle.yaml", "life-not-for-other-purpose"), {"knowledge.purpose": purpose})


def _decide(bundle: Path, action: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Decided on regopy and OPA together; the archived input returned beside the decision."""
    gate = vouched_gate(bundle, cross_check="opa")
    prepared = gate.prepare(action, now=NOW)
    decision, _ = gate.evaluate(prepared)
    assert "engine_divergence" not in decision.reason_codes, decision.engine_error
    return decision, json.loads(json.dumps(prepared.document))


def test_the_plain_spellings_are_denied(support_desk: Path, governance: Path) -> None:
    decision, _ = _decide(support_desk, _memory_action("training"))
    assert "ai_training_forbidden" in decision.reason_codes
    decision, _ = _decide(governance, _upgrade_action("fine-tuning"))
    assert decision.decision is RoutingState.DENY and "unit_not_for_purpose" in decision.reason_codes
    decision, _ = _decide(governance, _upgrade_action("Upgrade an existing v2 installation"))
    assert "unit_not_for_purpose" not in decision.reason_codes  # the unit is served for other purposes


@pytest.mark.parametrize("purpose", TRAINING.values(), ids=TRAINING.keys())
def test_lookalike_training_is_no_ai_training(support_desk: Path, purpose: str) -> None:
    decision, document = _decide(support_desk, _memory_action(purpose))
    assert "ai_training_forbidden" in decision.reason_codes
    assert decision.execution_allowed is False
    assert document["context"]["folded"]["purpose"] in {"training", "ai_training", "model_training"}
    assert document["action"]["knowledge"]["purpose"] == purpose  # the stated value kept for the record


@pytest.mark.parametrize("purpose", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_purpose_is_refused(support_desk: Path, governance: Path, purpose: str) -> None:
    decision, document = _decide(support_desk, _memory_action(purpose))
    assert decision.decision is RoutingState.DENY and "purpose_not_folded" in decision.reason_codes
    assert "purpose" not in document["context"]["folded"]
    assert document["context"]["folded_refused"]["purpose"]
    decision, _ = _decide(governance, _upgrade_action(purpose))
    assert decision.decision is RoutingState.DENY and "purpose_not_folded" in decision.reason_codes


@pytest.mark.parametrize("purpose", FINE_TUNING.values(), ids=FINE_TUNING.keys())
def test_lookalike_not_for_is_refused(governance: Path, purpose: str) -> None:
    decision, document = _decide(governance, _upgrade_action(purpose))
    assert decision.decision is RoutingState.DENY and "unit_not_for_purpose" in decision.reason_codes
    assert decision.execution_allowed is False
    assert document["context"]["folded"]["purpose"] == "fine_tuning"


def test_lookalike_not_for_entry_folds_at_compile_time(tmp_path: Path, support_desk: Path) -> None:
    """A manifest's entry is folded as a purpose is: a Cyrillic entry matches the Latin purpose."""
    del support_desk
    shutil.copytree(DEPLOYMENTS / "kcp-governance", tmp_path / "d")
    manifest = tmp_path / "d" / "knowledge.yaml"
    manifest.write_text(
        manifest.read_text().replace("Initial KCP adoption (no prior version)", "\u0456n\u0456t\u0456al adopt\u0456on")
    )
    out = tmp_path / "b.tar.gz"
    compile_bundle(
        [manifest], tmp_path / "d" / "matrix.yaml", POLICIES, out, options=CompileOptions(engine_check=False)
    )
    decision, _ = _decide(out, _upgrade_action("Initial adoption"))
    assert decision.decision is RoutingState.DENY and "unit_not_for_purpose" in decision.reason_codes


def test_unreadable_not_for_entry_is_refused_at_compile(tmp_path: Path) -> None:
    shutil.copytree(DEPLOYMENTS / "kcp-governance", tmp_path / "d")
    manifest = tmp_path / "d" / "knowledge.yaml"
    manifest.write_text(manifest.read_text().replace("Initial KCP adoption (no prior version)", "tra\u01c0ning"))
    with pytest.raises(KcpOpaError) as refused:
        compile_bundle(
            [manifest],
            tmp_path / "d" / "matrix.yaml",
            POLICIES,
            tmp_path / "b.tar.gz",
            options=CompileOptions(engine_check=False),
        )
    assert "reads as either I or l" in str(refused.value) or "U+01C0" in str(refused.value)
