"""The effective view of a unit: what actually applies once root defaults, unit overrides and
kcp-opa's defaults are merged, and where each value came from.

Nobody else computes this (kcp-manifest.md); the policies only ever see the merged result, and
``kcp-opa explain`` shows the provenance so a compliance officer can see why a rule fired.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kcp_opa.core.errors import UnitNotFoundError
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, mapping, strings, text
from kcp_opa.declare import governance as gov
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.manifest import Manifest

ROOT = "root"
UNIT = "unit"
DEFAULT = "default"
_EPOCH = dt.date(1970, 1, 1)


class Sourced(NamedTuple):
    """A value and where it came from: ``root``, ``unit``, ``default`` or a note.

    A named tuple, not a frozen dataclass: a unit resolves ~40 of them, and at 100,000 units
    the dataclass's ``__init__`` alone was seconds of the compile."""

    value: object
    source: str


#: The unit fields the shipped policies (policies/kcp) and the audit entries read.
POLICY_FIELDS = (
    "sensitivity",
    "validated",
    "validated_epoch_day",
    "compliance.data_categories",
    "compliance.data_residency",
    "compliance.declared_fields",
    "compliance.declared_fields_by_task_type",
    "compliance.restrictions",
    "compliance.legal_basis",
    "compliance.waivable_restrictions",
    "delegation.max_depth",
    "delegation.require_capability_attenuation",
    "delegation.audit_chain",
    "delegation.human_in_the_loop.required",
    "delegation.human_in_the_loop.approval_mechanism",
    "trust.agent_must_log",
    "trust.require_trace_context",
    "freshness",
    "access",
    "auth_scope",
    "deprecated",
    "superseded_by",
    "authority",
    "visibility",
    "effective_visibility",
    "rate_limits",
    "temporal",
    "not_for",
    "not_for_strict",
)

_POLICY_PATHS = tuple((tuple(d.split(".")[:-1]), d.split(".")[-1]) for d in POLICY_FIELDS)

#: The policy fields that differ unit by unit. The rest form the unit's *profile*, which the
#: bundle stores once for every unit that shares it (docs/data-layout.md).
UNIT_FIELDS = ("validated", "validated_epoch_day")


@dataclass(frozen=True)
class EffectiveUnit:
    project: str
    unit_id: str
    fields: Mapping[str, Sourced]

    def __getitem__(self, name: str) -> object:
        return self.fields[name].value

    def to_policy_data(self) -> JsonDict:
        """What the compiled bundle carries per unit: only the fields policies and the audit read.

        Intent, path, audience, provenance and the like stay in the manifest (``explain``,
        ROPA): at ~1 KB a unit they tripled the data document, and regopy's load time and
        memory grow with it (docs/performance.md). The bundle keeps the ``UNIT_FIELDS`` in the
        unit's index entry and the rest once per distinct profile (``kcp_opa.datadoc``).
        """
        full = self.to_data()
        out: JsonDict = {}
        for parents, leaf in _POLICY_PATHS:
            source: object = full
            for parent in parents:
                source = source.get(parent) if isinstance(source, dict) else None
            if isinstance(source, dict) and leaf in source:
                _nested(out, parents)[leaf] = source[leaf]
        return out

    def to_data(self) -> dict[str, Any]:
        """The whole effective unit: nested plain values, provenance dropped."""
        out: JsonDict = {"project": self.project, "id": self.unit_id}
        for dotted, sourced in self.fields.items():
            *parents, leaf = dotted.split(".")
            _nested(out, parents)[leaf] = sourced.value
        return out


def _nested(out: JsonDict, parents: Iterable[str]) -> JsonDict:
    """The object at ``parents`` under ``out``, made on the way (every node on it is one made here)."""
    for parent in parents:
        node = out.setdefault(parent, {})
        out = node if isinstance(node, dict) else {}
    return out


def effective_units(manifest: Manifest) -> Iterator[EffectiveUnit]:
    successors = gov.supersessors(manifest.units)  # once: a per-unit scan made compile quadratic
    for unit in manifest.units:
        yield resolve_unit(manifest, unit, successors)


def effective_unit(manifest: Manifest, unit_id: str) -> EffectiveUnit:
    unit = manifest.unit(unit_id)
    if unit is None:
        known = ", ".join(sorted(str(u.get("id")) for u in manifest.units)[:10])
        raise UnitNotFoundError(f"{manifest.file}: no unit {unit_id!r} (units: {known})")
    return resolve_unit(manifest, unit)


def resolve_unit(
    manifest: Manifest, unit: JsonObject, successors: Mapping[str, list[str]] | None = None
) -> EffectiveUnit:
    """One unit's effective declaration; ``successors`` is the manifest's supersessors index."""
    root = manifest.data
    fields: dict[str, Sourced] = {}
    fields["manifest_version"] = Sourced(manifest.version, ROOT)
    for key in ("path", "intent", "scope", "audience"):
        fields[key] = Sourced(unit[key], UNIT)
    fields["kind"] = _own(unit, "kind", "knowledge")
    fields["access"] = _own(unit, "access", "public")
    fields["auth_scope"] = _own(unit, "auth_scope", None)
    fields["deprecated"] = _own(unit, "deprecated", False)
    fields["depends_on"] = Sourced(
        sorted(set(strings(unit.get("depends_on")))), UNIT if "depends_on" in unit else DEFAULT
    )
    validated = unit.get("validated")
    fields["validated"] = _own(unit, "validated", None)
    fields["validated_epoch_day"] = Sourced(
        (dt.date.fromisoformat(validated) - _EPOCH).days if isinstance(validated, str) else None,
        UNIT if validated else DEFAULT,
    )
    fields["sensitivity"] = _sensitivity(root, unit)
    fields["sensitivity_rank"] = Sourced(
        vocab.sensitivity_rank(text(fields["sensitivity"].value)), fields["sensitivity"].source
    )
    fields.update(_compliance(mapping(root.get("compliance")), mapping(unit.get("compliance"))))
    fields.update(_delegation(mapping(root.get("delegation")), mapping(unit.get("delegation"))))
    fields.update(_trust(mapping(root.get("trust"))))
    chain = fields["delegation.audit_chain"]
    if chain.value is True and fields["trust.require_trace_context"].value is not True:
        # an audit chain is followed by its trace context: policies/kcp/evaluators/trace.rego
        fields["trust.require_trace_context"] = Sourced(True, f"{chain.source}: delegation.audit_chain")
    fields["freshness"] = _freshness(root, unit)
    index = gov.supersessors(manifest.units) if successors is None else successors
    fields.update(_governance(index, root, unit, fields["sensitivity"].value))
    return EffectiveUnit(manifest.project, str(unit["id"]), fields)


def _governance(
    successors: Mapping[str, list[str]], root: JsonObject, unit: JsonObject, flat: object
) -> dict[str, Sourced]:
    """authority, visibility, lifecycle and rate limits (kcp_opa.declare.governance), with provenance."""
    out: dict[str, Sourced] = {}
    authority, source = gov.effective_authority(root, unit)
    out["authority"] = Sourced(authority, source)
    visibility, source = gov.effective_visibility(root, unit, text(flat))
    out["visibility"] = Sourced(visibility, source)
    out["effective_visibility"] = Sourced(gov.visibility_cells(visibility, text(flat)), f"resolved from {source}")
    out["superseded_by"] = Sourced(list(successors.get(str(unit["id"]), [])), "units that declare supersedes")
    out["rate_limits"] = Sourced(*gov.replaced_block(root, unit, "rate_limits"))
    out["temporal"] = Sourced(*gov.effective_temporal(root, unit))
    out["not_for"] = Sourced(gov.folded_not_for(unit), UNIT if "not_for" in unit else DEFAULT)
    out["not_for_strict"] = Sourced(unit.get("not_for_strict") is True, UNIT if "not_for_strict" in unit else DEFAULT)
    return out


def _own(unit: JsonObject, key: str, default: object) -> Sourced:
    return Sourced(unit[key], UNIT) if key in unit else Sourced(default, DEFAULT)


def _inherit(root: JsonObject, unit: JsonObject, key: str, default: object) -> Sourced:
    if key in unit:
        return Sourced(unit[key], UNIT)
    if key in root:
        return Sourced(root[key], ROOT)
    return Sourced(default, DEFAULT)


def _sensitivity(root: JsonObject, unit: JsonObject) -> Sourced:
    declared = [
        (value, source)
        for value, source in (
            (unit.get("sensitivity"), "unit"),
            (mapping(unit.get("compliance")).get("sensitivity"), "unit.compliance"),
        )
        if isinstance(value, str)
    ]
    if declared:
        return Sourced(*max(declared, key=lambda s: vocab.sensitivity_rank(s[0])))
    root_value = mapping(root.get("compliance")).get("sensitivity")
    if isinstance(root_value, str):
        return Sourced(root_value, ROOT)
    return Sourced(None, "not declared (unknown, not public)")


def _compliance(root: JsonObject, unit: JsonObject) -> dict[str, Sourced]:
    out: dict[str, Sourced] = {}
    residency = _inherit(root, unit, "data_residency", None)
    value = residency.value
    regions: list[str] | None
    if isinstance(value, Mapping):
        regions = sorted(set(strings(value.get("regions", []))))
        hard = Sourced(
            bool(value.get("hard_requirement", True)),
            residency.source if "hard_requirement" in value else DEFAULT,
        )
    else:
        regions = sorted(set(strings(value))) if isinstance(value, list) else None
        hard = Sourced(True, DEFAULT)
    out["compliance.data_residency"] = Sourced(regions, residency.source)
    out["compliance.residency_hard_requirement"] = hard
    for key in ("regulations", "restrictions", "data_categories"):
        sourced = _inherit(root, unit, key, [])
        out[f"compliance.{key}"] = Sourced(sorted(set(strings(sourced.value))), sourced.source)
    fields = _inherit(root, unit, "declared_fields", None)
    ceiling = None if fields.value is None else sorted(set(strings(fields.value)))
    out["compliance.declared_fields"] = Sourced(ceiling, fields.source)
    by_task = _inherit(root, unit, "declared_fields_by_task_type", None)
    if by_task.value is not None:  # only when declared: profiles that say nothing stay as they are
        out["compliance.declared_fields_by_task_type"] = Sourced(
            _within(mapping(by_task.value), ceiling), by_task.source
        )
    out["compliance.legal_basis"] = _inherit(root, unit, "legal_basis", None)
    out["compliance.article_9_condition"] = _inherit(root, unit, "article_9_condition", None)
    opted = _inherit(root, unit, "waivable_restrictions", None)
    if opted.value is not None:  # only when declared: profiles that say nothing stay as they are
        out["compliance.waivable_restrictions"] = Sourced(sorted(set(strings(opted.value))), opted.source)
    return out


def _within(by_task: JsonObject, ceiling: list[str] | None) -> dict[str, list[str]]:
    """Each task type's list, never wider than ``declared_fields`` even if validation was
    bypassed: a field outside the ceiling is dropped (read, it is a finding), not granted."""
    allowed = None if ceiling is None else set(ceiling)
    return {
        task: sorted(f for f in set(strings(fields)) if allowed is None or f in allowed)
        for task, fields in sorted(by_task.items())
    }


def _delegation(root: JsonObject, unit: JsonObject) -> dict[str, Sourced]:
    """Merged field by field, and never looser than the root even if validation was bypassed."""
    out: dict[str, Sourced] = {}
    depths = [
        (d, name) for name, block in ((UNIT, unit), (ROOT, root)) if (d := integer(block.get("max_depth"))) is not None
    ]
    out["delegation.max_depth"] = (
        Sourced(*min(depths, key=lambda s: s[0])) if depths else Sourced(None, "default (unlimited)")
    )
    for flag in ("require_capability_attenuation", "audit_chain"):
        out[f"delegation.{flag}"] = _strictest_flag(root.get(flag), unit.get(flag))
    root_hitl, unit_hitl = mapping(root.get("human_in_the_loop")), mapping(unit.get("human_in_the_loop"))
    out["delegation.human_in_the_loop.required"] = _strictest_flag(root_hitl.get("required"), unit_hitl.get("required"))
    out["delegation.human_in_the_loop.approval_mechanism"] = _inherit(root_hitl, unit_hitl, "approval_mechanism", None)
    out["delegation.human_in_the_loop.docs_url"] = _inherit(root_hitl, unit_hitl, "docs_url", None)
    return out


def _strictest_flag(root_value: object, unit_value: object) -> Sourced:
    if unit_value is True:
        return Sourced(True, UNIT)
    if root_value is True:
        return Sourced(True, ROOT)
    if unit_value is False:
        return Sourced(False, UNIT)
    if root_value is False:
        return Sourced(False, ROOT)
    return Sourced(False, DEFAULT)


def _trust(root: JsonObject) -> dict[str, Sourced]:
    audit, provenance = mapping(root.get("audit")), mapping(root.get("provenance"))
    out: dict[str, Sourced] = {}
    for key in ("agent_must_log", "require_trace_context"):
        out[f"trust.{key}"] = Sourced(audit[key], ROOT) if key in audit else Sourced(False, DEFAULT)
    for key in ("publisher", "publisher_url", "contact"):
        out[f"trust.provenance.{key}"] = Sourced(provenance[key], ROOT) if key in provenance else Sourced(None, DEFAULT)
    return out


def _freshness(root: JsonObject, unit: JsonObject) -> Sourced:
    """A unit's freshness_policy replaces the root's wholesale (kcp-manifest.md)."""
    chosen = gov.replacing(root, unit, "freshness_policy")
    if chosen is None:
        return Sourced(None, DEFAULT)
    block, source = chosen
    if not isinstance(block.get("max_age_days"), int):
        return Sourced(None, f"{source} (no max_age_days: no age limit)")
    return Sourced(
        {
            "max_age_days": block["max_age_days"],
            "on_stale": block.get("on_stale", "warn"),
            "review_contact": block.get("review_contact"),
        },
        source,
    )
