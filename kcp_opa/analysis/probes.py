"""The extra decisions beside a generated action: absent facts supplied, a stronger declaration.

``supplied`` decides an allowing action again with each value of a fact it lacks (``PROBED``):
a value that holds or denies it shows a rule reads that fact, so its absence must not allow,
even where the policies' METADATA lists no ``requires`` (round one's). ``next_restriction``
names the restriction a unit lacks that the next stronger-declaration check adds.
"""

from __future__ import annotations

from kcp_opa.analysis.engines import Evaluator, Outcome, brief
from kcp_opa.analysis.space import Sample, Space
from kcp_opa.core.jsonread import JsonDict, mapping, strings
from kcp_opa.declare.vocabulary import READ_BY, REFUSED

#: The restrictions a rule reads (the manifest vocabulary's, less those no rule enforces).
ENFORCED_RESTRICTIONS = tuple(r for r, rule in READ_BY["restrictions"].items() if rule != REFUSED)
_SUPPLIED = ("decision", "execution_allowed", "reason_codes", "required_controls", "missing_controls")


def supplied(
    ev: Evaluator, space: Space, sample: Sample, outcome: Outcome, only: set[str] | None = None
) -> dict[str, list[JsonDict]]:
    """{path: the decisions with each value of an absent probed fact supplied} for a
    knowledge-bound action that allows (only there can an absence break the invariant)."""
    decision = outcome.decision or {}
    allows = decision.get("decision") == "ALLOW" or decision.get("execution_allowed") is True
    if not allows or not sample.facts.get("knowledge_bound"):
        return {}
    out: dict[str, list[JsonDict]] = {}
    for path, variants in space.variants(sample.action, only).items():
        decided = (ev.decide(variant, sample.now) for variant in variants)
        out[path] = [brief(o.decision, _SUPPLIED) for o in decided if o.decision is not None]
    return out


def next_restriction(space: Space, sample: Sample, turn: int) -> str | None:
    """A restriction the action's unit lacks, in turn (one more decision per action, not six)."""
    knowledge = sample.action.get("knowledge")
    if not isinstance(knowledge, dict):
        return None
    entry = space.context.units.get((str(knowledge.get("project")), str(knowledge.get("unit"))))
    if entry is None:
        return None
    have = set(strings(mapping(entry[0].get("compliance")).get("restrictions")))
    lacking = [r for r in ENFORCED_RESTRICTIONS if r not in have]
    return lacking[turn % len(lacking)] if lacking else None
