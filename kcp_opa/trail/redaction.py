"""What the ledger keeps for a unit under ``no-logging``: an allow-list, never a deny-list.

An allow-list because a deny-list leaks whatever nobody thought of: every field that is not
named here (free text, references, attributes, prompts, trace state, fields added to the action
format later) is erased and listed in ``erased`` as a JSON pointer. What stays is the shape of
the access: who, which unit, which action type and fields, which controls and outcome. The same
lists apply to decision, control, receipt, intent, execution and failure events (docs/fail-closed.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.models.decision import SHAPE_FIELDS

#: ``True`` keeps the value whole (ids, enums, names, numbers); a mapping keeps only the keys
#: it names; a one-item list applies its spec to every element of an array.
Spec = bool | Mapping[str, "Spec"] | list["Spec"]

ACTION_FIELDS: Mapping[str, Spec] = {
    "schema_version": True,
    "action_id": True,
    "idempotency_key": True,
    "tenant_id": True,
    "subject_id": True,
    "agent_id": True,
    "action_type": True,
    "requested_action": True,
    "created_at": True,
    "target": {"type": True, "tenant_id": True, "country": True},
    "amount": {"value_minor": True, "currency": True},
    # The principal, its scopes and the environment are identifiers the gate decides on (KCP
    # access and visibility), kept like requested_by so `audit replay` reproduces the decision.
    "authorization_context": {
        "requested_by": True,
        "agent_scope": True,
        "actor_role": True,
        "authenticated_principal": True,
        "principal_scopes": True,
    },
    "knowledge": {"project": True, "unit": True, "fields_read": True},
    "runtime": {
        "deployment_region": True,
        "environment": True,
        "model": {"id": True, "hosting": True},
        "risk_level": True,
        "evidence_status": True,
        "budget_state": True,
    },
    "trace": {"traceparent": True},
    "delegation_chain": [{"agent_id": True, "capabilities": True}],
}

#: The decision input: the action (above) and the gate's own context, all system values.
INPUT_FIELDS: Mapping[str, Spec] = {
    "action": ACTION_FIELDS,
    "context": {
        "decision_id": True,
        "action_hash": True,
        "bundle_revision": True,
        "evaluated_at": True,
        "trace_id": True,
        "trace_id_generated": True,
        "decision_epoch_seconds": True,
        "decision_epoch_day": True,
        "action_created_epoch_seconds": True,
        "satisfied_controls": True,
    },
}

_EVIDENCE: Mapping[str, Spec] = {
    "control": True,
    "status": True,
    "actor_type": True,
    "actor_id": True,
    "completed_at": True,
    "decision_id": True,
    "action_hash": True,
}

#: Fields of control, receipt, intent, execution and failure events (beside the KCP fields, which name
#: no content). Absent here, and so erased: messages (exception text, refusal wording that may
#: quote the action), evidence references, handler outcomes.
#: A shadow entry's two answers: their routing only, never an engine's message.
_SHAPE: Mapping[str, Spec] = {name: True for name in ("revision", "sha256", *SHAPE_FIELDS, "engine_error")}

EVENT_FIELDS: Mapping[str, Spec] = {
    "active": _SHAPE,
    "candidate": _SHAPE,
    "weakens": True,
    "decision_id": True,
    "action_hash": True,
    "authorization_status": True,
    "missing_controls": True,
    "evidence": _EVIDENCE,
    "code": True,
    "receipt_id": True,
    "signature": {"alg": True, "kid": True},
    "issued_at": True,
    "expires_at": True,
    "approver_ids": True,
    "idempotency_key": True,
    "intent_seq": True,
    "replayed": True,
    "state": True,
}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def keep_only(value: object, spec: Spec, pointer: str, erased: list[str]) -> object:
    """``value`` reduced to what ``spec`` names; the pointer of every dropped value is appended."""
    if spec is True:
        return value
    if isinstance(spec, Mapping) and isinstance(value, Mapping):
        kept: JsonDict = {}
        for key, item in value.items():
            where = f"{pointer}/{_escape(str(key))}"
            if key in spec:
                kept[key] = keep_only(item, spec[key], where, erased)
            else:
                erased.append(where)
        return kept
    if isinstance(spec, list) and isinstance(value, list):
        return [keep_only(item, spec[0], f"{pointer}/{index}", erased) for index, item in enumerate(value)]
    erased.append(pointer)  # a shape the spec does not expect: content until proven otherwise
    return None


def redact(document: JsonObject, spec: Mapping[str, Spec], pointer: str = "") -> tuple[JsonDict, list[str]]:
    """A copy of ``document`` with only the allow-listed values, and the JSON pointers erased."""
    erased: list[str] = []
    kept = keep_only(document, spec, pointer, erased)
    return (kept if isinstance(kept, dict) else {}), erased
