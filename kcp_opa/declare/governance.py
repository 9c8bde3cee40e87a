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
from typing import Any

from kcp_opa.core.errors import CompileError
from kcp_opa.core.textfold import TextFoldError, fold_text
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.diagnostics import Findings, PathPart

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

Units = Sequence[tuple[int, dict[str, Any]]]


# -- validation -------------------------------------------------------------------------------


def check_governance(doc: Mapping[str, Any], units: Units, ids: set[str], findings: Findings) -> None:
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
        if isinstance(temporal.get("superseded_by"), str) and isinstance(unit.get("id"), str):
            successors[unit["id"]] = temporal["superseded_by"]
        if unit.get("not_for_strict") is True and not unit.get("not_for"):
            findings.warn("not_for_strict_without_not_for", "not_for_strict without not_for has no effect", here)
        not_for = unit.get("not_for")
        if "not_for" in unit and not (isinstance(not_for, list) and all(isinstance(n, str) for n in not_for)):
            findings.error("not_for_not_strings", "not_for must be a list of strings", (*here, "not_for"))
    _check_successor_cycles(successors, findings)


def _check_authority(block: Any, here: tuple[PathPart, ...], findings: Findings) -> None:
    if block is None:
        return
    if not isinstance(block, Mapping):
        findings.error(
            "authority_not_mapping", "authority must map actions to initiative|requires_approval|denied", here
        )
        return
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


def _check_visibility(block: Any, here: tuple[PathPart, ...], findings: Findings) -> None:
    if block is None:
        return
    if not isinstance(block, Mapping):
        findings.error("visibility_not_mapping", "visibility must be a mapping with default and conditions", here)
        return
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


def _check_rate_limits(block: Any, here: tuple[PathPart, ...], findings: Findings) -> None:
    if block is None:
        return
    if not isinstance(block, Mapping):
        findings.error("rate_limits_not_mapping", "rate_limits must be a mapping of tiers", here)
        return
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


def _check_temporal(block: Any, ids: set[str], here: tuple[PathPart, ...], findings: Findings) -> dict[str, Any]:
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        findings.error("temporal_not_mapping", "temporal must be a mapping", here)
        return {}
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


def bound_seconds(value: Any, *, end_of_day: bool) -> int | None:
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


def effective_authority(root: Mapping[str, Any], unit: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The unit's block replaces the root's whole (no per-action merge, KCP §3.8); absent -> safe defaults.

    A standard action the block leaves out, or gives an unknown value, takes its safe default;
    a custom action with an unknown value is dropped, so the gate denies it as undeclared.
    """
    if isinstance(unit.get("authority"), Mapping):
        block, source = unit["authority"], "unit"
    elif isinstance(root.get("authority"), Mapping):
        block, source = root["authority"], "root"
    else:
        return {"declared": False, "actions": dict(SAFE_DEFAULTS)}, "default (KCP §4.17 safe defaults)"
    actions = dict(SAFE_DEFAULTS)
    for action, value in block.items():
        if value in AUTHORITY_VALUES:
            actions[str(action)] = value
    return {"declared": True, "actions": dict(sorted(actions.items()))}, source


def effective_visibility(
    root: Mapping[str, Any], unit: Mapping[str, Any], flat_sensitivity: str | None
) -> tuple[dict[str, Any] | None, str]:
    """Conditions in order with their sensitivity already resolved (then > default > flat), or None.

    A unit block replaces the root's (KCP §3.8). The gate matches the first condition whose
    every ``when`` key lists the action's value (policies/kcp/lib/visibility.rego).
    """
    if isinstance(unit.get("visibility"), Mapping):
        block, source = unit["visibility"], "unit"
    elif isinstance(root.get("visibility"), Mapping):
        block, source = root["visibility"], "root"
    else:
        return None, "not declared (flat sensitivity applies)"
    default = block.get("default") if block.get("default") in vocab.SENSITIVITY_ORDER else flat_sensitivity
    conditions: list[dict[str, Any]] = []
    needs: set[str] = set()
    for condition in block.get("conditions") or []:
        when = condition.get("when") if isinstance(condition, Mapping) else None
        then = condition.get("then") if isinstance(condition, Mapping) else None
        if not isinstance(when, Mapping) or not isinstance(then, Mapping):
            continue
        match = {key: _strings(when[key]) for key in CONDITION_KEYS if key in when}
        needs.update(match)
        sensitivity = then.get("sensitivity") if then.get("sensitivity") in vocab.SENSITIVITY_ORDER else default
        conditions.append(
            {"when": match, "sensitivity": sensitivity, "requires_auth": then.get("requires_auth") is True}
        )
    return {"default": default, "conditions": conditions, "needs": sorted(needs)}, source


def visibility_cells(visibility: Mapping[str, Any] | None, flat_sensitivity: str | None) -> dict[str, Any]:
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
        flat = {"sensitivity": flat_sensitivity or "undeclared", "requires_auth": False, "condition": None}
        only = {**flat, "source": "flat sensitivity (no visibility block)"}
        return {"needs": [], "cells": {"": {"": only}}, "incomplete": only}
    default, conditions = visibility["default"], visibility["conditions"]
    levels = [lvl for lvl in [default, *(c["sensitivity"] for c in conditions)] if isinstance(lvl, str)]
    strictest = max(levels, key=vocab.sensitivity_rank) if levels else "undeclared"
    incomplete = {
        "sensitivity": strictest,
        "requires_auth": any(c["requires_auth"] for c in conditions),
        "condition": None,
        "source": "strictest branch (a condition's input is missing)",
    }
    return {"needs": visibility["needs"], "cells": _cells(default, conditions), "incomplete": incomplete}


def _cells(default: str | None, conditions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    envs = sorted({e for c in conditions for e in c["when"].get("environment", [])})
    roles = sorted({r for c in conditions for r in c["when"].get("agent_role", [])})
    cells: dict[str, Any] = {}
    for env in ["", *envs]:
        row: dict[str, Any] = {}
        for role in ["", *roles]:
            hit = {
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


def _strings(value: Any) -> list[str]:
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    return sorted({item for item in items if isinstance(item, str)})


def replaced_block(root: Mapping[str, Any], unit: Mapping[str, Any], key: str) -> tuple[Any, str]:
    """A block the unit replaces whole when it declares one (rate_limits, KCP §4.15)."""
    if isinstance(unit.get(key), Mapping):
        return dict(unit[key]), "unit"
    if isinstance(root.get(key), Mapping):
        return dict(root[key]), "root"
    return None, "not declared"


def effective_temporal(root: Mapping[str, Any], unit: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """Root defaults applied field by field (KCP §4.22), bounds as inclusive epoch seconds."""
    root_block: Mapping[str, Any] = root["temporal"] if isinstance(root.get("temporal"), Mapping) else {}
    unit_block: Mapping[str, Any] = unit["temporal"] if isinstance(unit.get("temporal"), Mapping) else {}
    if not root_block and not unit_block:
        return None, "not declared (always active)"
    out: dict[str, Any] = {}
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


def folded_not_for(unit: Mapping[str, Any]) -> list[str]:
    """not_for entries in the folded form the gate compares the action's purpose with."""
    values = unit.get("not_for")
    if not isinstance(values, list):
        return []
    try:
        return sorted({fold_text(v) for v in values if isinstance(v, str)})
    except TextFoldError as exc:  # validate names the entry; never compiled as a not_for matching nothing
        raise CompileError(f"unit {unit.get('id', '?')!s}: a not_for entry cannot be folded: {exc}") from None


def supersessors(units: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per unit id, the units that declare ``supersedes: <id>`` (KCP §4.8): what an agent should
    prefer. One pass over the manifest, so resolving every unit stays linear in the unit count."""
    found: dict[str, set[str]] = {}
    for unit in units:
        target = unit.get("supersedes")
        if isinstance(target, str) and "id" in unit:
            found.setdefault(target, set()).add(str(unit["id"]))
    return {target: sorted(ids) for target, ids in found.items()}
