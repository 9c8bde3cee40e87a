"""Attacks on the checked action (kcp_opa/decide/checked.py): checked once, trusted after, never changed.

``check_action`` returns the proof the gate, the executor and the service accept without walking
the action again. That is safe only if nothing can change what was checked: not the caller
editing its own mapping afterwards, not a context source or handler editing the action it is
shown, not a mapping dressed as checked. Real bundle, real regopy, real context sources.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import pickle
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from conftest import REPO

from kcp_opa.context import ContextSources
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.frozen import FrozenObject
from kcp_opa.decide.action import action_hash, check_action
from kcp_opa.decide.checked import CheckedAction, CheckedRoot
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

NOW = "2026-11-29T10:00:00Z"
ACTION: dict[str, Any] = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


@pytest.fixture(scope="module")
def gate(finance_bundle: Path) -> Gate:
    return Gate.from_bundle(finance_bundle, config=GateConfig(preflight=False))


def _action() -> dict[str, Any]:
    return copy.deepcopy(ACTION)


def test_a_checked_action_cannot_be_changed_after_its_check() -> None:
    action = _action()
    checked = check_action(action)
    assert type(checked) is CheckedAction and checked.hash == canonical_hash(action)
    frozen = checked.mapping
    edits = [
        lambda: frozen.__setitem__("tenant_id", "tenant_other"),
        lambda: frozen.update(tenant_id="tenant_other"),
        lambda: frozen.pop("amount"),
        lambda: frozen.setdefault("extra", 1),
        lambda: frozen.__delitem__("amount"),
        lambda: frozen["amount"].__setitem__("value_minor", 1),
        lambda: frozen["evidence_references"].append("invoice:INV-1"),
        lambda: frozen["evidence_references"].__setitem__(0, "invoice:INV-1"),
        lambda: frozen["evidence_references"].extend(["invoice:INV-1"]),
    ]
    for edit in edits:
        with pytest.raises(TypeError, match="read-only"):
            edit()
    with pytest.raises(AttributeError):
        checked.hash = "sha256:" + "0" * 64  # type: ignore[misc]
    with pytest.raises(TypeError):
        CheckedAction(frozen, checked.canonical)
    # The caller's own mapping is not what was checked: editing it changes nothing checked.
    action["amount"]["value_minor"] = 1
    action["evidence_references"].append("invoice:INV-1")
    assert checked.hash == canonical_hash(ACTION) == canonical_hash(frozen)
    assert checked.canonical == json.dumps(ACTION, sort_keys=True, separators=(",", ":")).encode()


def test_the_gate_decides_the_bytes_it_checked_not_the_callers_mapping(gate: Gate) -> None:
    action = _action()
    checked = check_action(action)
    first = gate.decide(checked, now=NOW)
    action["amount"]["value_minor"] = 10**12  # edited after the check
    action["runtime"] = 1.5
    again = gate.decide(checked, now=NOW)
    assert again.action_hash == first.action_hash == checked.hash
    assert (again.decision, again.reason_codes) == (first.decision, first.reason_codes)
    prepared = gate.prepare(checked, now=NOW)
    assert prepared.document["action"] is checked.mapping and prepared.action_hash == checked.hash
    # A plain mapping is checked on every call: the edited one is refused.
    with pytest.raises(ActionRejectedError, match="float"):
        gate.decide(action, now=NOW)


class _EditingCounters:
    """A host counter source that edits the action it is shown (a bug, or a hostile plug-in)."""

    def counters(self, action: Any, *, now: dt.datetime) -> dict[str, Any]:
        action["amount"]["value_minor"] = 1  # a smaller payment, after the hash was taken
        return {"source": "gate", "budgets": {}, "velocity": {}}


def test_a_context_source_cannot_change_the_action_after_it_was_hashed(gate: Gate) -> None:
    action = _action()
    sources = ContextSources(counters=_EditingCounters())
    try:
        prepared = gate.prepare(action, now=NOW, context=sources)
    except TypeError as refused:  # the source was shown the read-only copy
        assert "read-only" in str(refused)
    else:  # whatever was built, the action evaluated must be the action hashed
        assert canonical_hash(prepared.document["action"]) == prepared.action_hash
    assert action == ACTION  # and the caller's own mapping was never handed to the source


def test_a_mapping_handed_where_a_checked_action_is_expected_is_checked(gate: Gate) -> None:
    checked = check_action(_action())
    # A frozen mapping anyone can build: checked, never trusted for being frozen.
    dressed = FrozenObject({**checked.mapping, "amount": {"value_minor": 1.5, "currency": "EUR"}})
    with pytest.raises(ActionRejectedError, match="float"):
        gate.decide(dressed, now=NOW)
    assert check_action(FrozenObject(checked.mapping)) is not checked  # checked again, a new proof
    # The checked copy itself carries its proof (a record keeping only the mapping is not walked
    # again); a root dressed with another action's proof, or a proof moved onto it, is not trusted.
    assert check_action(checked.mapping) is checked and action_hash(checked.mapping) == checked.hash
    forged = CheckedRoot({**checked.mapping, "amount": {"value_minor": 1.5, "currency": "EUR"}})
    forged.proof = checked
    with pytest.raises(ActionRejectedError, match="float"):
        gate.decide(forged, now=NOW)
    assert action_hash(forged) != checked.hash
    other = check_action({**checked.mapping, "action_id": "act_other"})
    moved = check_action(_action())
    moved.mapping.proof = other
    assert check_action(moved.mapping) not in (other, moved)  # checked again: a new, matching proof
    # Copies of a checked action are plain data (they are checked wherever they are used).
    thawed = copy.deepcopy(checked.mapping)
    assert type(thawed) is dict and type(thawed["evidence_references"]) is list
    thawed["authorization_context"]["api_token"] = "t"
    with pytest.raises(ActionRejectedError, match="secret-bearing"):
        gate.decide(thawed, now=NOW)
    assert type(pickle.loads(pickle.dumps(checked.mapping))) is dict
    with pytest.raises(TypeError):
        pickle.dumps(checked)
    proxied = MappingProxyType({**ACTION, "created_at": "\x00"})
    with pytest.raises(ActionRejectedError, match="U\\+0000"):
        gate.decide(proxied, now=NOW)
    assert action_hash(checked) == checked.hash and copy.copy(checked) is checked


def test_an_edited_prepared_input_is_refused_and_its_action_cannot_be_edited(gate: Gate) -> None:
    prepared = gate.prepare(_action(), now=NOW)
    with pytest.raises(TypeError, match="read-only"):
        prepared.document["action"]["amount"]["value_minor"] = 1
    edited = copy.deepcopy(dict(prepared.document))
    edited["action"]["amount"]["value_minor"] = 1
    with pytest.raises(ActionRejectedError, match="edited after prepare"):
        gate.decide_prepared(dataclasses.replace(prepared, document=edited))
    controls = copy.deepcopy(dict(prepared.document))
    controls["context"]["satisfied_controls"] = ["independent_human_approval"]
    with pytest.raises(ActionRejectedError, match="edited after prepare"):
        gate.decide_prepared(dataclasses.replace(prepared, document=controls))
    assert gate.decide_prepared(prepared).action_hash == canonical_hash(ACTION)
