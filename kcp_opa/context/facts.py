"""The facts a decision rests on, each with its class: intent, gate or attested.

An **intent** fact is what the agent asks (action type, target, amount, fields, purpose): the
agent is the only one who can say it. A **gate** fact is what the gate knows itself (its
region and environment, the caller's roles, the agent's granted scope, model and hosting): a
statement of it in the action is compared with the gate's value, never trusted. An **attested**
fact is signed by a registered issuer (evidence status, screening, beneficiary status) with an
expiry. The policy reads gate and attested facts from ``input.context.facts``; the evaluators'
METADATA (``custom.facts``) names the ones each rule reads, and the tests hold this table to it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FactClass(enum.StrEnum):
    INTENT = "intent"
    GATE = "gate"
    ATTESTED = "attested"


@dataclass(frozen=True)
class FactSpec:
    """One gate or attested fact: its class, where the action may state it, who establishes it."""

    name: str
    fact_class: FactClass
    #: The path in the action where an agent may state it (compared, never trusted).
    stated_path: tuple[str, ...]
    #: Which kind of source establishes it: ``config``, ``registry`` or ``attestation``.
    source_kind: str


_SPECS = (
    FactSpec("deployment_region", FactClass.GATE, ("runtime", "deployment_region"), "config"),
    FactSpec("environment", FactClass.GATE, ("runtime", "environment"), "config"),
    FactSpec("actor_role", FactClass.GATE, ("authorization_context", "actor_role"), "registry"),
    FactSpec("agent_scope", FactClass.GATE, ("authorization_context", "agent_scope"), "registry"),
    FactSpec("model_id", FactClass.GATE, ("runtime", "model", "id"), "registry"),
    FactSpec("model_hosting", FactClass.GATE, ("runtime", "model", "hosting"), "registry"),
    FactSpec("evidence_status", FactClass.ATTESTED, ("runtime", "evidence_status"), "attestation"),
    FactSpec("new_beneficiary", FactClass.ATTESTED, ("attributes", "new_beneficiary"), "attestation"),
    FactSpec("modified_beneficiary", FactClass.ATTESTED, ("attributes", "modified_beneficiary"), "attestation"),
    FactSpec("screening_uncertain", FactClass.ATTESTED, ("attributes", "screening_uncertain"), "attestation"),
)

#: Every gate and attested fact the context stage builds, by name.
FACTS: dict[str, FactSpec] = {spec.name: spec for spec in _SPECS}

#: Values an attested fact may take (the action schema's, so a statement compares like for like).
ATTESTED_VALUES: dict[str, frozenset[str | bool]] = {
    "evidence_status": frozenset({"present", "missing", "stale", "forbidden"}),
    "new_beneficiary": frozenset({True, False}),
    "modified_beneficiary": frozenset({True, False}),
    "screening_uncertain": frozenset({True, False}),
}


def stated(action: object, spec: FactSpec) -> tuple[bool, object]:
    """(True, value) when the action states the fact, else (False, None)."""
    node: object = action
    for part in spec.stated_path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node
