"""Stronger neighbours of an action (for monotonicity and DENY-is-terminal) and greedy shrinking.

A neighbour is the same action with one thing made stricter: one more undeclared field, a
larger amount, one more delegation hop, or (for a DENY) every required control recorded. A
counterexample is shrunk by dropping keys and list items, one at a time, while it still breaks
the same invariant: what is left is the smallest action the shrinker could find.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

from kcp_opa.analysis.spacedims import UNDECLARED_FIELD
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, items, mapping

MONOTONE = ("undeclared_field", "larger_amount", "one_more_hop")
EVIDENCE = "evidence_added"
#: The change of a stronger declaration: the same action, the unit with one more restriction.
RESTRICTION = "stronger_restriction:"
_MAX_MINOR = 10**15


def stronger(action: JsonObject, change: str) -> JsonDict | None:
    """ACTION with CHANGE applied, or None where the change does not apply (or changes the
    bundle, not the action: a stronger restriction)."""
    out = copy.deepcopy(dict(action))
    if change.startswith(RESTRICTION):
        return None
    if change == "undeclared_field":
        knowledge = out.get("knowledge")
        if not isinstance(knowledge, dict) or not isinstance(knowledge.get("fields_read", []), list):
            return None
        knowledge["fields_read"] = [*items(knowledge.get("fields_read", [])), f"{UNDECLARED_FIELD}_2"]
        return out
    if change == "larger_amount":
        amount = out.get("amount")
        value = integer(amount.get("value_minor")) if isinstance(amount, dict) else None
        if not isinstance(amount, dict) or value is None or value * 2 + 1 > _MAX_MINOR:
            return None
        amount["value_minor"] = value * 2 + 1
        return out
    if change == "one_more_hop":
        chain = out.get("delegation_chain")
        scope = items(mapping(out.get("authorization_context")).get("agent_scope"))
        links = list(items(chain)) or [{"agent_id": "agent-0", "capabilities": list(scope)}]
        last = mapping(links[-1])
        links.append({"agent_id": f"agent-{len(links)}", "capabilities": list(items(last.get("capabilities", [])))})
        if len(links) > 16:
            return None
        out["delegation_chain"] = links
        return out
    raise ValueError(change)


def _paths(node: object, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every key and list index, deepest first (so leaves are tried before their parents)."""
    if isinstance(node, dict):
        for key in sorted(node):
            yield from _paths(node[key], (*prefix, key))
            yield (*prefix, key)
    elif isinstance(node, list):
        for index in reversed(range(len(node))):
            yield from _paths(node[index], (*prefix, index))
            yield (*prefix, index)


def _without(action: JsonObject, path: tuple[str | int, ...]) -> JsonDict:
    """ACTION less the key or item at PATH (KeyError, IndexError, TypeError: PATH is gone)."""
    out = copy.deepcopy(dict(action))
    node: object = out
    for depth, part in enumerate(path, 1):
        if isinstance(node, list) and isinstance(part, int):
            node = node[part] if depth < len(path) else node.pop(part)
        elif isinstance(node, dict):
            node = node.pop(part) if depth == len(path) else node[part]
        else:
            raise TypeError(part)
    return out


def shrink(action: JsonObject, still_fails: Callable[[JsonDict], bool], attempts: int) -> tuple[JsonDict, int]:
    """Greedy: drop one key or item at a time while STILL_FAILS holds; (smallest action, tries)."""
    current = copy.deepcopy(dict(action))
    tried = 0
    progress = True
    while progress and tried < attempts:
        progress = False
        for path in list(_paths(current)):
            if tried >= attempts:
                break
            try:
                candidate = _without(current, path)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier removal in this pass took the parent
            tried += 1
            if still_fails(candidate):
                current = candidate
                progress = True
    return current, tried
