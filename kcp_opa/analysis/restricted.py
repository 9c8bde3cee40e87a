"""The facts the manifest's restrictions read, as edits of a generated action: where the data
goes (no-cross-border), the stated purpose (no-ai-training, a unit's not_for), and for each
enforced restriction the value that breaks it, which ``prove`` decides on every unit early."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping, strings
from kcp_opa.declare.regions import a_country_in


class DimContext(Protocol):
    """What an edit here reads of the per-action context: the chosen unit's profile."""

    @property
    def profile(self) -> JsonObject: ...


Edit = Callable[[JsonDict, DimContext], None]

#: For each restriction a rule enforces, the (dimension, value) that breaks it: the fact it needs.
#: ``prove`` decides these on every unit early, whatever the unit declares (a restriction lost
#: to a typo leaves the unit unrestricted; the action that restriction forbids must still be tried).
#: A value None is the first purpose a policy forbids by name.
RESTRICTED_FACTS = {
    "no-external-llm": ("hosting", "external"),
    "no-cross-border": ("target_place", "outside"),
    "no-ai-training": ("purpose", None),
}
OUTSIDE_PLACE = "ZZ"
OTHER_PURPOSE = "analysis_purpose"


def branch(action: JsonDict, *keys: str) -> JsonDict:
    """ACTION[k1][k2]..., each level an object made where it is missing (the base action has them)."""
    for key in keys:
        node = action.setdefault(key, {})
        action = node if isinstance(node, dict) else {}
    return action


def inside(action: JsonDict, c: DimContext) -> None:
    """The target in a country of the first region of the unit's data_residency (none declared:
    no place). A region names a country the region table places in it (EU: AT), as an agent
    would state it: ``target.country`` is a country, not a region."""
    regions = mapping(c.profile.get("compliance")).get("data_residency")
    if isinstance(regions, list) and regions and isinstance(regions[0], str):
        branch(action, "target")["country"] = a_country_in(regions[0])
    else:
        branch(action, "target").pop("country", None)


def purpose(stated: str | None) -> Edit:
    def edit(action: JsonDict, c: DimContext) -> None:
        knowledge = action.get("knowledge")
        if isinstance(knowledge, dict):
            if stated is None:
                knowledge.pop("purpose", None)
            else:
                knowledge["purpose"] = stated

    return edit


def not_for(action: JsonDict, c: DimContext) -> None:
    """The first purpose the unit declares itself not for (KCP not_for), where it declares one."""
    entries = [e for e in strings(c.profile.get("not_for")) if e]
    purpose(entries[0] if entries else None)(action, c)
