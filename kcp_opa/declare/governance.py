"""The KCP governance blocks that bear on a decision: authority, visibility, access, lifecycle
(deprecated, supersedes, temporal, not_for) and rate_limits.

Two jobs: warn or refuse what a validator must (KCP §4.11-§4.22, docs/manifest-rules.md), and
resolve each unit's effective value with its provenance, which the bundle carries so that the
Rego evaluators (policies/kcp/evaluators/authority.rego, access.rego, lifecycle.rego) decide on
it. Python only resolves inheritance here; every allow/deny is decided in Rego.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TypedDict

from kcp_opa.core.errors import CompileError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping, strings
from kcp_opa.core.textfold import TextFoldError, fold_text
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.diagnostics import Findings, PathPart, Units

#: The five standard KCP actions (§4.17) and their safe defaults when no block applies.
KCP_ACTIONS = ("read", "summarize", "modify", "share_externally", "execute")
SAFE_DEFAULTS = {
    "read": "initiative",
    "summarize": "initiative",
    "modify": "denied",
    "share_externally": "denied",
    "execute": "denied",
}
AUTHORITY_VALUES = ("initiative", "requires_approval", "denied")
CONDITION_KEYS = ("environment", "agent_role")
RATE_WINDOWS = ("requests_per_minute", "requests_per_hour", "requests_per_day")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_DAY = 86400

# -- validation -------------------------------------------------------------------------------


def check_governance(doc: JsonObject, units: Units, ids: set[str], findings: Findings) -> None:
    """The validator's warnings and errors for the governance blocks of the whole manifest."""
    _check_authority(doc.get("authority"), ("authority",), findings)
    _check_visibility(doc.get("visibility"), ("visibility",), findings)
    _check_rate_limits(doc.get("rate_limits"), ("rate_limits",), findings)
    _check_temporal(doc.get("temporal"), ids, ("temporal",), findings)
    successors: dict[str, str] = {}
    for index, unit in units:
        here: tuple[PathPart, ...] = ("units", index)
        _check_authority(unit.get("authority"), (*here, "authority"), findings)
        _check_visibility(unit.get("visibility"), (*here, "visibility"), findings)
        _check_rate_limits(unit.get("rate_limits"), (*here, "rate_limits"), findings)
        temporal = _check_temporal(unit.get("temporal"), ids, (*here, "temporal"), findings)
        successor, unit_id = temporal.get("superseded_by"), unit.get("id")
        if isinstance(successor, str) and isinstance(unit_id, str):
            successors[unit_id] = successor
        if unit.get("not_for_strict") is True and not unit.get("not_for"):
            findings.warn("not_for_strict_without_not_for", "not_for_strict without not_for has no effect", here)
        not_for = unit.get("not_for")
        if "not_for" in unit and not (isinstance(not_for, list) and all(isinstance(n, str) for n in not_for)):
            findings.error("not_for_not_strings", "not_for must be a list of strings", (*here, "not_for"))
    _check_successor_cycles(successors, findings)


def _declared(block: object, code: str, message: str, here: tuple[PathPart, ...], findings: Findings) -> JsonObject:
    """``block`` if it is a mapping; an error (``code``) if it is declared as anything else."""
    if block is not None and not isinstance(block, Mapping):
        findings.error(code, message, here)
    return mapping(block)


def _check_authority(block: object, here: tuple[PathPart, ...], findings: Findings) -> None:
    message = "authority must map actions to initiative|requires_approval|denied"
    block = _declared(block, "authority_not_mapping", message, here, findings)
    for action, value in block.items():
        if value not in AUTHORITY_VALUES:
            fallback = SAFE_DEFAULTS.get(str(action), "denied")
            findings.warn(
                "authority_value_unknown",
                f"authority {action}: {value!r} is not initiative, requires_approval or denied; "
                f"ignored, so {action} is {fallback} (KCP §4.17 default)",
                (*here, str(action)),
                value=str(value),
            )


def _check_visibility(block: object, here: tuple[PathPart, ...], findings: Findings) -> None:
    message = "visibility must be a mapping with default and conditions"
    block = _declared(block, "visibility_not_mapping", message, here, findings)
    if "default" in block and block["default"] not in vocab.SENSITIVITY_ORDER:
        findings.error(
            "visibility_sensitivity_unknown",
            f"visibility default {block['default']!r} is not a sensitivity level (the matrix cells need one)",
            (*here, "default"),
        )
    conditions = block.get("conditions", [])
    if not isinstance(conditions, list):
        findings.error("visibility_conditions_not_list", "visibility.conditions must be a list", (*here, "conditions"))
        return
    for index, condition in enumerate(conditions):
        at = (*here, "conditions", index)
        when = condition.get("when") if isinstance(condition, Mapping) else None
        then = condition.get("then") if isinstance(condition, Mapping) else None
        if not isinstance(when, Mapping) or not isinstance(then, Mapping):
            findings.warn("visibility_condition_incomplete", "condition without when or then: ignored", at)
            continue
        for key in when:
            if key not in CONDITION_KEYS:
                findings.error(
                    "visibility_condition_key_unknown",
                    f"when.{key}: kcp-opa matches only environment and agent_role; a condition it cannot "
                    "evaluate would silently match more than declared",
                    (*at, "when", str(key)),
                )
        if "sensitivity" in then and then["sensitivity"] not in vocab.SENSITIVITY_ORDER:
            findings.error(
                "visibility_sensitivity_unknown",
                f"then.sensitivity {then['sensitivity']!r} is not a sensitivity level",
                (*at, "then", "sensitivity"),
            )
        if "requires_auth" in then and not isinstance(then["requires_auth"], bool):
            findings.error("visibility_requires_auth_type", "then.requires_auth must be true or false", at)


def _check_rate_limits(block: object, here: tuple[PathPart, ...], findings: Findings) -> None:
    block = _declared(block, "rate_limits_not_mapping", "rate_limits must be a mapping of tiers", here, findings)
    for tier, limits in block.items():
        if tier in ("headers", "backoff", "tokens") or not isinstance(limits, Mapping):
            continue
        for window, value in limits.items():
            valid = value == "unlimited" or (isinstance(value, int) and not isinstance(value, bool) and value > 0)
            if window in RATE_WINDOWS and not valid:
                findings.error(
                    "rate_limit_value",
                    f"rate_limits.{tier}.{window}: {value!r} is neither a positive integer nor 'unlimited'",
                    (*here, str(tier), str(window)),
                )


def _check_temporal(block: object, ids: set[str], here: tuple[PathPart, ...], findings: Findings) -> JsonObject:
    block = _declared(block, "temporal_not_mapping", "temporal must be a mapping", here, findings)
    bounds: dict[str, int] = {}
    for key in ("valid_from", "valid_until"):
        if key in block:
            seconds = bound_seconds(block[key], end_of_day=key == "valid_until")
            if seconds is None:
                findings.error(
                    "bad_date", f"temporal.{key} {block[key]!r} is not a date or RFC 3339 date-time", (*here, key)
                )
            else:
                bounds[key] = seconds
    if len(bounds) == 2 and bounds["valid_from"] > bounds["valid_until"]:
        findings.warn("temporal_empty_window", "valid_from is after valid_until: the unit is never active", here)
    successor = block.get("superseded_by")
    if isinstance(successor, str) and successor not in ids and here[0] == "units":
        findings.warn("temporal_dangling_successor", f"superseded_by {successor!r}: no unit with that id", here)
    return dict(block)


def _check_successor_cycles(successors: Mapping[str, str], findings: Findings) -> None:
    for start in sorted(successors):
        seen = [start]
        node = successors.get(start)
        while node is not None and node not in seen:
            seen.append(node)
            node = successors.get(node)
        if node == start:
            findings.error(
                "temporal_superseded_by_cycle",
                f"temporal.superseded_by cycle: {' -> '.join([*seen, start])} (KCP §4.22: a manifest error)",
                ("units",),
            )
            return


def bound_seconds(value: object, *, end_of_day: bool) -> int | None:
    """Epoch seconds of a temporal bound; a bare date is inclusive (its last second for valid_until)."""
    if not isinstance(value, str):
        return None
    try:
        if len(value) == 10:
            day = dt.date.fromisoformat(value)
            start = int((dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC) - _EPOCH).total_seconds())
            return start + _DAY - 1 if end_of_day else start
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int((moment - _EPOCH).total_seconds())


# -- effective values -------------------------------------------------------------------------


class Authority(TypedDict):
    declared: bool
    actions: dict[str, str]


class Condition(TypedDict):
    """One visibility condition, its sensitivity already resolved (then > default > flat)."""

    when: dict[str, list[str]]
    sensitivity: str | None
    requires_auth: bool


class Visibility(TypedDict):
    default: str | None
    conditions: list[Condition]
    needs: list[str]


class Cell(TypedDict):
    """What applies to one environment x role (``condition``: the index that matched, or None)."""

    sensitivity: str
    requires_auth: bool
    condition: int | None
    source: str


class VisibilityTable(TypedDict):
    needs: list[str]
    cells: dict[str, dict[str, Cell]]
    incomplete: Cell


def replacing(root: JsonObject, unit: JsonObject, key: str) -> tuple[JsonObject, str] | None:
    """The unit's ``key`` block, which replaces the root's whole (KCP §3.8), else the root's;
    None when neither declares one as a mapping."""
    for block, source in ((unit.get(key), "unit"), (root.get(key), "root")):
        if isinstance(block, Mapping):
            return block, source
    return None


def effective_authority(root: JsonObject, unit: JsonObject) -> tuple[Authority, str]:
    """The unit's block replaces the root's whole (no per-action merge, KCP §3.8); absent -> safe defaults.

    A standard action the block leaves out, or gives an unknown value, takes its safe default;
    a custom action with an unknown value is dropped, so the gate denies it as undeclared.
    """
    chosen = replacing(root, unit, "authority")
    if chosen is None:
        return {"declared": False, "actions": dict(SAFE_DEFAULTS)}, "default (KCP §4.17 safe defaults)"
    block, source = chosen
    actions = dict(SAFE_DEFAULTS)
    for action, value in block.items():
        if isinstance(value, str) and value in AUTHORITY_VALUES:
            actions[str(action)] = value
    return {"declared": True, "actions": dict(sorted(actions.items()))}, source


def effective_visibility(
    root: JsonObject, unit: JsonObject, flat_sensitivity: str | None
) -> tuple[Visibility | None, str]:
    """Conditions in order with their sensitivity already resolved (then > default > flat), or None.

    A unit block replaces the root's (KCP §3.8). The gate matches the first condition whose
    every ``when`` key lists the action's value (policies/kcp/lib/visibility.rego).
    """
    chosen = replacing(root, unit, "visibility")
    if chosen is None:
        return None, "not declared (flat sensitivity applies)"
    block, source = chosen
    default = _level(block.get("default"), flat_sensitivity)
    conditions: list[Condition] = []
    needs: set[str] = set()
    for condition in items(block.get("conditions")):
        when = condition.get("when") if isinstance(condition, Mapping) else None
        then = condition.get("then") if isinstance(condition, Mapping) else None
        if not isinstance(when, Mapping) or not isinstance(then, Mapping):
            continue
        match = {key: _strings(when[key]) for key in CONDITION_KEYS if key in when}
        needs.update(match)
        sensitivity = _level(then.get("sensitivity"), default)
        conditions.append(
            {"when": match, "sensitivity": sensitivity, "requires_auth": then.get("requires_auth") is True}
        )
    return {"default": default, "conditions": conditions, "needs": sorted(needs)}, source


def _level(value: object, otherwise: str | None) -> str | None:
    """``value`` if it is a sensitivity level, else ``otherwise``."""
    return value if isinstance(value, str) and value in vocab.SENSITIVITY_ORDER else otherwise


def visibility_cells(visibility: Visibility | None, flat_sensitivity: str | None) -> VisibilityTable:
    """What the gate looks up per decision (policies/kcp/lib/visibility.rego), always present.

    ``cells``: first-match-wins resolved for every environment x role a condition lists; the key
    "" stands for a value no condition lists (an action's environment or role is never empty).
    ``incomplete``: what applies while an input a condition needs is missing (the gate answers
    context_missing then): the strictest branch, and requires_auth if any branch asks for it.
    Resolved here because regopy's planning time grows with every rule that reads the profile
    (docs/engine-findings.md item 27); a level nothing declares is "undeclared" (the matrix has
    no cell for it, so it denies).
    """
    if visibility is None:
        only: Cell = {
            "sensitivity": flat_sensitivity or "undeclared",
            "requires_auth": False,
            "condition": None,
            "source": "flat sensitivity (no visibility block)",
        }
        return {"needs": [], "cells": {"": {"": only}}, "incomplete": only}
    default, conditions = visibility["default"], visibility["conditions"]
    levels = [lvl for lvl in [default, *(c["sensitivity"] for c in conditions)] if isinstance(lvl, str)]
    strictest = max(levels, key=vocab.sensitivity_rank) if levels else "undeclared"
    incomplete: Cell = {
        "sensitivity": strictest,
        "requires_auth": any(c["requires_auth"] for c in conditions),
        "condition": None,
        "source": "strictest branch (a condition's input is missing)",
    }
    return {"needs": visibility["needs"], "cells": _cells(default, conditions), "incomplete": incomplete}


def _cells(default: str | None, conditions: Sequence[Condition]) -> dict[str, dict[str, Cell]]:
    envs = sorted({e for c in conditions for e in c["when"].get("environment", [])})
    roles = sorted({r for c in conditions for r in c["when"].get("agent_role", [])})
    cells: dict[str, dict[str, Cell]] = {}
    for env in ["", *envs]:
        row: dict[str, Cell] = {}
        for role in ["", *roles]:
            hit: Cell = {
                "sensitivity": default or "undeclared",
                "requires_auth": False,
                "condition": None,
                "source": "visibility.default",
            }
            for index, c in enumerate(conditions):
                when = c["when"]
                if env in when.get("environment", [env]) and role in when.get("agent_role", [role]):
                    hit = {
                        "sensitivity": c["sensitivity"] or "undeclared",
                        "requires_auth": c["requires_auth"],
                        "condition": index,
                        "source": f"visibility.conditions[{index}] (first match)",
                    }
                    break
            row[role] = hit
        cells[env] = row
    return cells


def _strings(value: object) -> list[str]:
    return sorted(set(strings(value if isinstance(value, list) else [value])))


def replaced_block(root: JsonObject, unit: JsonObject, key: str) -> tuple[JsonDict | None, str]:
    """A block the unit replaces whole when it declares one (rate_limits, KCP §4.15)."""
    chosen = replacing(root, unit, key)
    return (None, "not declared") if chosen is None else (dict(chosen[0]), chosen[1])


def effective_temporal(root: JsonObject, unit: JsonObject) -> tuple[JsonDict | None, str]:
    """Root defaults applied field by field (KCP §4.22), bounds as inclusive epoch seconds."""
    root_block, unit_block = mapping(root.get("temporal")), mapping(unit.get("temporal"))
    if not root_block and not unit_block:
        return None, "not declared (always active)"
    out: JsonDict = {}
    sources = []
    for key in ("valid_from", "valid_until", "superseded_by"):
        if key in unit_block:
            out[key], origin = unit_block[key], "unit"
        elif key in root_block:
            out[key], origin = root_block[key], "root"
        else:
            continue
        sources.append(f"{key}: {origin}")
    out["from_epoch_seconds"] = bound_seconds(out.get("valid_from"), end_of_day=False)
    out["until_epoch_seconds"] = bound_seconds(out.get("valid_until"), end_of_day=True)
    return out, ", ".join(sources)


def folded_not_for(unit: JsonObject) -> list[str]:
    """not_for entries in the folded form the gate compares the action's purpose with."""
    values = unit.get("not_for")
    if not isinstance(values, list):
        return []
    try:
        return sorted({fold_text(v) for v in values if isinstance(v, str)})
    except TextFoldError as exc:  # validate names the entry; never compiled as a not_for matching nothing
        raise CompileError(f"unit {unit.get('id', '?')!s}: a not_for entry cannot be folded: {exc}") from None


def supersessors(units: Iterable[JsonObject]) -> dict[str, list[str]]:
    """Per unit id, the units that declare ``supersedes: <id>`` (KCP §4.8): what an agent should
    prefer. One pass over the manifest, so resolving every unit stays linear in the unit count."""
    found: dict[str, set[str]] = {}
    for unit in units:
        target = unit.get("supersedes")
        if isinstance(target, str) and "id" in unit:
            found.setdefault(target, set()).add(str(unit["id"]))
    return {target: sorted(ids) for target, ids in found.items()}
