"""Load and validate KCP manifests (kcp-manifest.md): schema for structure and closed
vocabularies, code for what a schema cannot say (duplicates, paths, tighten-only delegation,
federation, warnings for open vocabularies and dangling references)."""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kcp_opa import schemas
from kcp_opa.core import strings
from kcp_opa.core.jsonread import JsonObject, items, mapping, objects
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.coverage import check_coverage
from kcp_opa.declare.declstrings import MANIFEST_RULES, check_declaration_strings
from kcp_opa.declare.diagnostics import Findings, PathPart, Report, Units, did_you_mean
from kcp_opa.declare.governance import check_governance
from kcp_opa.declare.spec_rules import check_spec_rules
from kcp_opa.declare.unenforced import check_unknown_keys
from kcp_opa.declare.validation import DocumentKind, load_file, validate_file
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Manifest:
    """A manifest that passed validation; ``data`` is the document as written."""

    file: str
    sha256: str
    data: JsonObject

    @property
    def project(self) -> str:
        return str(self.data["project"])

    @property
    def version(self) -> str | None:
        value = self.data.get("version")
        return None if value is None else str(value)

    @property
    def kcp_version(self) -> str | None:
        value = self.data.get("kcp_version")
        return None if value is None else str(value)

    @cached_property
    def units(self) -> Sequence[JsonObject]:
        return objects(self.data["units"])

    def unit(self, unit_id: str) -> JsonObject | None:
        return next((u for u in self.units if u.get("id") == unit_id), None)


ManifestReport = Report[Manifest]


def _counts(data: JsonObject) -> dict[str, int]:
    units, relationships = data.get("units"), data.get("relationships")
    return {
        "unit_count": len(units) if isinstance(units, list) else 0,
        "relationship_count": len(relationships) if isinstance(relationships, list) else 0,
    }


def validate_manifest(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ManifestReport:
    """Validate one manifest file (see :func:`kcp_opa.validation.validate_file`)."""
    return validate_file(MANIFEST_KIND, path, max_bytes)


def load_manifest(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Manifest:
    """Load a manifest or raise :class:`ValidationFailedError` listing every error."""
    return load_file(MANIFEST_KIND, path, max_bytes)


# -- checks a schema cannot express -----------------------------------------------------------


def _check_semantics(doc: JsonObject, findings: Findings) -> None:
    _check_kcp_version(doc, findings)
    project = doc.get("project")
    why = _not_an_id(project) if isinstance(project, str) else None
    if why is not None:
        findings.error("project_characters", f"project {project!r}: {why}", ("project",))
    check_declaration_strings(doc, MANIFEST_RULES, findings)
    check_unknown_keys(doc, findings)
    units = [(i, u) for i, u in enumerate(items(doc.get("units"))) if isinstance(u, dict)]
    ids = _check_unit_ids(units, findings)
    _check_compliance_vocab(mapping(doc.get("compliance")), ("compliance",), findings)
    root_delegation = mapping(doc.get("delegation"))
    _check_custom_mechanism(root_delegation, None, ("delegation",), findings)
    root_freshness = _block(doc.get("freshness_policy"))
    _check_freshness(root_freshness, ("freshness_policy",), findings)
    for index, unit in units:
        here: tuple[PathPart, ...] = ("units", index)
        _check_unit_path(unit, here, findings)
        _check_unit_vocab(unit, here, findings)
        compliance = mapping(unit.get("compliance"))
        _check_compliance_vocab(compliance, (*here, "compliance"), findings)
        _check_sensitivity_conflict(unit, compliance, here, findings)
        delegation = mapping(unit.get("delegation"))
        _check_tighten_only(root_delegation, delegation, (*here, "delegation"), findings)
        _check_custom_mechanism(delegation, root_delegation, (*here, "delegation"), findings)
        freshness = _block(unit.get("freshness_policy"))
        _check_freshness(freshness, (*here, "freshness_policy"), findings)
        if "max_age_days" in ((freshness or root_freshness) or {}) and "validated" not in unit:
            findings.warn(
                "never_validated",
                "unit has a freshness_policy but no validated date: the gate treats it as stale",
                here,
            )
        if "trust" in unit:
            findings.warn("unit_trust_ignored", "trust is a root-only block; ignored here", (*here, "trust"))
        for dep_index, dep in enumerate(items(unit.get("depends_on"))):
            if isinstance(dep, str) and dep not in ids:
                findings.warn(
                    "dangling_depends_on",
                    f"depends_on {dep!r}: no unit with that id{did_you_mean(dep, ids)}",
                    (*here, "depends_on", dep_index),
                )
    _check_relationships(doc, ids, findings)
    _check_federation(doc, findings)
    check_spec_rules(doc, units, ids, findings)
    check_governance(doc, units, ids, findings)
    check_coverage(doc, units, findings)


def _not_an_id(value: str) -> str | None:
    """Why a project or unit id breaks the string contract (kcp_opa/core/strings.py), or None.

    The index hashes ``project/unit`` in Rego and an action names both as identifiers, so a quote,
    backslash or control character (read escaped by regopy) or any non-identifier character
    (no action could name it) is refused.
    """
    problem = strings.data_text_problem(value)
    if problem is not None or not value.strip():  # a blank project is the schema's finding
        return problem
    bad = strings.identifier_problem(value)
    return None if bad is None else f"{bad} is not allowed in an id ({strings.IDENTIFIER_RULE}: an action names it)"


def _check_kcp_version(doc: JsonObject, findings: Findings) -> None:
    version = doc.get("kcp_version")
    if version is None:
        findings.warn("kcp_version_missing", "kcp_version is not set; assuming the current spec")
    elif str(version) not in vocab.KNOWN_KCP_VERSIONS:
        findings.warn(
            "kcp_version_unknown",
            f"kcp_version {str(version)!r} is not a version kcp-opa knows (0.1-0.20); reading it as the current spec",
            ("kcp_version",),
        )


def _check_unit_ids(units: Units, findings: Findings) -> set[str]:
    first_seen: dict[str, int] = {}
    for index, unit in units:
        unit_id = unit.get("id")
        if not isinstance(unit_id, str) or not unit_id:
            continue
        if unit_id in first_seen:
            findings.error(
                "duplicate_unit_id",
                f"unit id {unit_id!r} is already used by units[{first_seen[unit_id]}]",
                ("units", index, "id"),
            )
            continue
        first_seen[unit_id] = index
        why = _not_an_id(unit_id)
        if why is not None:
            findings.error("unit_id_characters", f"unit id {unit_id!r}: {why}", ("units", index, "id"))
        elif not vocab.UNIT_ID_PATTERN.match(unit_id):
            findings.note(
                "unit_id_pattern",
                f"unit id {unit_id!r} is outside the spec pattern ^[a-z0-9.\\-]+$ (accepted)",
                ("units", index, "id"),
            )
    return set(first_seen)


def _check_unit_path(unit: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    path = unit.get("path")
    if not isinstance(path, str) or not path:
        return
    unified = path.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        findings.error(
            "absolute_path",
            f"path {path!r} is absolute; unit paths are relative to the manifest",
            (*here, "path"),
        )
        return
    depth = 0
    for part in unified.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                findings.error(
                    "path_escapes_root",
                    f"path {path!r} escapes the manifest root with '..'",
                    (*here, "path"),
                )
                return
        elif part not in ("", "."):
            depth += 1
    if posixpath.normpath(unified) in (".", ""):
        findings.error("path_escapes_root", f"path {path!r} names the root itself, not a file", (*here, "path"))


def _check_unit_vocab(unit: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    for key, choices in (("kind", vocab.KINDS), ("access", vocab.ACCESS_LEVELS)):
        findings.unknown(f"unknown_{key}", key, unit.get(key), choices, (*here, key))
    validated = unit.get("validated")
    if isinstance(validated, str) and _DATE_SHAPE.match(validated):
        _check_calendar_date(validated, (*here, "validated"), findings)


def _check_calendar_date(value: str, path: tuple[PathPart, ...], findings: Findings) -> None:
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        findings.error("bad_date", f"{value!r} is not a calendar date (YYYY-MM-DD)", path)


_UNKNOWN_CODES = {
    "regulations": "unknown_regulation",
    "restrictions": "unknown_restriction",
    "data_categories": "unknown_data_category",
}
_UNKNOWN_EFFECT = {
    "regulations": " and is ignored by the policies",
    "data_categories": "; unless the delegation matrix lists it, every action on the unit is DENY matrix_not_covered",
}


def _check_compliance_vocab(block: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    vocabularies: tuple[tuple[str, Sequence[str]], ...] = (
        ("regulations", vocab.REGULATIONS),
        ("data_categories", vocab.DATA_CATEGORIES),
    )
    for key, known in vocabularies:
        for index, value in enumerate(items(block.get(key))):
            if isinstance(value, str) and value not in known:
                meant = did_you_mean(value, known)
                # A near miss of a known category is a typo, not a custom one: compile refuses it.
                code = "data_category_misspelt" if key == "data_categories" and meant else _UNKNOWN_CODES[key]
                message = f"{key} value {value!r} is not known to kcp-opa{meant}{_UNKNOWN_EFFECT[key]}"
                findings.warn(code, message, (*here, key, index), value=value)
    residency = block.get("data_residency")
    regions = residency.get("regions") if isinstance(residency, dict) else residency
    region_path = (*here, "data_residency", "regions") if isinstance(residency, dict) else (*here, "data_residency")
    for index, region in enumerate(items(regions)):
        if isinstance(region, str) and region not in vocab.REGIONS and not vocab.ISO_ALPHA2.match(region):
            findings.warn(
                "unknown_region",
                f"data_residency region {region!r} is neither a known region nor an ISO 3166-1 "
                f"alpha-2 code{did_you_mean(region, vocab.REGIONS)}",
                (*region_path, index),
            )


def _check_sensitivity_conflict(
    unit: JsonObject, compliance: JsonObject, here: tuple[PathPart, ...], findings: Findings
) -> None:
    outer, inner = unit.get("sensitivity"), compliance.get("sensitivity")
    if isinstance(outer, str) and isinstance(inner, str) and outer != inner:
        stricter = max(outer, inner, key=vocab.sensitivity_rank)
        findings.warn(
            "sensitivity_conflict",
            f"unit sensitivity {outer!r} and compliance.sensitivity {inner!r} disagree; "
            f"the stricter {stricter!r} applies",
            (*here, "sensitivity"),
        )


_DATE_SHAPE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_TIGHTEN_FLAGS = ("require_capability_attenuation", "audit_chain")


def _check_tighten_only(root: JsonObject, unit: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    root_depth, unit_depth = root.get("max_depth"), unit.get("max_depth")
    if isinstance(unit_depth, int) and isinstance(root_depth, int) and unit_depth > root_depth:
        findings.error(
            "delegation_relaxed",
            f"max_depth {unit_depth} relaxes the root's max_depth {root_depth}; a unit may only tighten delegation",
            (*here, "max_depth"),
        )
    for flag in _TIGHTEN_FLAGS:
        if root.get(flag) is True and unit.get(flag) is False:
            findings.error(
                "delegation_relaxed",
                f"{flag} false relaxes the root's {flag} true; a unit may only tighten delegation",
                (*here, flag),
            )
    root_hitl = mapping(root.get("human_in_the_loop"))
    unit_hitl = mapping(unit.get("human_in_the_loop"))
    if root_hitl.get("required") is True and unit_hitl.get("required") is False:
        findings.error(
            "delegation_relaxed",
            "human_in_the_loop.required false relaxes the root's true; a unit may only tighten delegation",
            (*here, "human_in_the_loop", "required"),
        )


def _check_custom_mechanism(
    block: JsonObject,
    inherited: JsonObject | None,
    here: tuple[PathPart, ...],
    findings: Findings,
) -> None:
    hitl = mapping(block.get("human_in_the_loop"))
    if not hitl or hitl.get("approval_mechanism") != "custom":
        return
    inherited_hitl = mapping(mapping(inherited).get("human_in_the_loop"))
    if not hitl.get("docs_url") and not inherited_hitl.get("docs_url"):
        findings.error(
            "custom_mechanism_without_docs",
            "approval_mechanism 'custom' needs a docs_url that explains the mechanism",
            (*here, "human_in_the_loop", "approval_mechanism"),
        )


def _check_freshness(block: JsonObject | None, here: tuple[PathPart, ...], findings: Findings) -> None:
    if block is not None and "on_stale" not in block:
        findings.warn(
            "on_stale_default",
            "on_stale is not set; stale units only raise a warning ('warn')",
            here,
        )


def _check_relationships(doc: JsonObject, ids: set[str], findings: Findings) -> None:
    for index, rel in enumerate(items(doc.get("relationships"))):
        if not isinstance(rel, dict):
            continue
        where = ("relationships", index, "type")
        findings.unknown(
            "unknown_relationship_type", "relationship type", rel.get("type"), vocab.RELATIONSHIP_TYPES, where
        )
        for end in ("from", "to"):
            ref = rel.get(end)
            if isinstance(ref, str) and ids and ref not in ids:
                findings.warn(
                    "dangling_relationship",
                    f"relationship {end} {ref!r}: no unit with that id{did_you_mean(ref, ids)}",
                    ("relationships", index, end),
                )


def _check_federation(doc: JsonObject, findings: Findings) -> None:
    seen: dict[str, int] = {}
    for index, ref in enumerate(items(doc.get("manifests"))):
        if not isinstance(ref, dict) or not isinstance(ref.get("id"), str):
            continue
        fed_id = ref["id"]
        if fed_id in seen:
            findings.error(
                "duplicate_federation_id",
                f"federation id {fed_id!r} is already used by manifests[{seen[fed_id]}]",
                ("manifests", index, "id"),
            )
        seen.setdefault(fed_id, index)


def _block(value: object) -> JsonObject | None:
    """A block that is declared (even empty) or None: an empty freshness_policy still warns."""
    return value if isinstance(value, dict) else None


MANIFEST_KIND: DocumentKind[Manifest] = DocumentKind(
    noun="manifest",
    schema=schemas.MANIFEST,
    check=_check_semantics,
    counts=_counts,
    build=lambda source: Manifest(source.file, source.sha256, source.data),
)
