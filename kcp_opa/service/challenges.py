"""Control challenges: one-time, expiring requests for one control result, kept in a store.

A challenge is bound to a decision id and an action hash, addressed to the principals or roles
who may answer it, and carries the frozen action's summary a person needs to decide (amount and
currency in major units, beneficiary, fees, consequence). Its state lives in the service's store,
never with the caller: answering consumes it atomically (one UPDATE guarded by its state and
expiry), so a second answer or a late one is refused whatever the caller holds. The store is
:class:`kcp_opa.stores.protocols.ChallengeStore`; this module builds what goes in it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping, number, objects

if TYPE_CHECKING:
    from kcp_opa.authorize.controls import GateDecision
    from kcp_opa.decide.gate import Gate

__all__ = [
    "action_summary",
    "addressees",
    "major_units",
]

#: ISO 4217 minor-unit exponents that are not 2 (the summary shows major units, as text).
_EXPONENTS = {"JPY": 0, "KRW": 0, "CLP": 0, "ISK": 0, "VND": 0, "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3}
_EXPONENTS |= {"OMR": 3, "TND": 3}
#: Controls a person answers; the subject answers these two, an approver the others.
SUBJECT_CONTROLS = frozenset({"user_confirmation", "step_up_authentication"})
APPROVER_CONTROLS = frozenset({"independent_human_approval", "compliance_review"})


def major_units(value_minor: int, currency: str) -> str:
    """800000 USD -> "8000.00": exact decimal text, never a float."""
    exponent = _EXPONENTS.get(currency, 2)
    sign, digits = ("-" if value_minor < 0 else ""), str(abs(value_minor)).rjust(exponent + 1, "0")
    return f"{sign}{digits[:-exponent]}.{digits[-exponent:]}" if exponent else f"{sign}{digits}"


def action_summary(action: JsonObject, decision: JsonObject) -> JsonDict:
    """What a person answering a challenge must see of the frozen action, nothing more."""
    amount = mapping(action.get("amount"))
    target = mapping(action.get("target"))
    attributes = mapping(action.get("attributes"))
    money = None
    if amount:
        money = {
            "value_minor": amount["value_minor"],
            "currency": amount["currency"],
            "major": major_units(int(number(amount["value_minor"]) or 0), str(amount["currency"])),
        }
    fees = attributes.get("fees")
    what = f"{action.get('requested_action')} ({action.get('action_type')})"
    if money is not None:
        what += f": {money['major']} {money['currency']} to {target.get('reference', 'an unnamed target')}"
    return {
        "action_id": action.get("action_id"),
        "tenant_id": action.get("tenant_id"),
        "subject_id": action.get("subject_id"),
        "agent_id": action.get("agent_id"),
        "requested_action": action.get("requested_action"),
        "action_type": action.get("action_type"),
        "amount": money,
        "beneficiary": {k: target.get(k) for k in ("type", "reference", "account_fingerprint", "country")},
        "fees": fees if fees is not None else "none stated in the action",
        "consequence": f"{what}; executed once under a one-time receipt if every control passes",
        "decision": decision.get("decision"),
        "risk_level": decision.get("risk_level"),
        "reasons": [r.get("message") for r in objects(decision.get("reasons"))],
    }


def addressees(gate: Gate, control: str, record: GateDecision) -> dict[str, list[str]]:
    """Who may answer: the subject for its own confirmation, approvers, else a provider."""
    if control in SUBJECT_CONTROLS:
        return {"principals": [str(record.action.get("subject_id", ""))], "kinds": ["human"], "roles": []}
    if control in APPROVER_CONTROLS:
        return {"principals": [], "kinds": ["human"], "roles": _approval_roles(gate, control, record)}
    # A provider, unless the control policy does not admit one (a safe_stop is a system's or a
    # person's): then whoever it admits, since a challenge no admissible actor can answer never completes.
    admitted = policy_actor_kinds(gate).get(control, frozenset({"provider"}))
    kinds = ["provider"] if "provider" in admitted else sorted(admitted & _ANSWERING_KINDS)
    return {"principals": [], "kinds": kinds or ["provider"], "roles": []}


#: Actor types of the control policy that a principal kind answers as ("user" is the subject).
_ANSWERING_KINDS = frozenset({"provider", "human", "system"})
_ACTORS: dict[str, dict[str, frozenset[str]]] = {}
_ACTORS_LOCK = threading.Lock()


def policy_actor_kinds(gate: Gate) -> dict[str, frozenset[str]]:
    """``data.kcp.controls.allowed_actors`` of the gate's bundle, read once per revision."""
    from kcp_opa.core.errors import QueryError
    from kcp_opa.decide.query import evaluate_query

    with _ACTORS_LOCK:
        if gate.bundle_revision not in _ACTORS:
            try:
                found = evaluate_query(gate.bundle, "data.kcp.controls.allowed_actors", values_only=True)
            except QueryError:
                found = []
            value = found[0] if isinstance(found, list) and found and isinstance(found[0], dict) else {}
            _ACTORS[gate.bundle_revision] = {
                str(k): frozenset(str(a) for a in v) for k, v in value.items() if isinstance(v, list)
            }
        return _ACTORS[gate.bundle_revision]


def _approval_roles(gate: Gate, control: str, record: GateDecision) -> list[str]:
    """The roles the policy will ask of the approver (so a wrong one does not spend the challenge)."""
    if control == "compliance_review":
        return ["compliance_officer"]
    if record.decision.verdict.approver_roles:
        return list(record.decision.verdict.approver_roles)
    role = gate.bundle.parameters.approver_roles.for_task(str(record.action.get("action_type")))
    return [role] if role else ["approver"]
