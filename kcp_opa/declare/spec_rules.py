"""The KCP specification's SHOULD-warn rules that span a unit and the rest of the manifest.

The spec (v0.30, docs/manifest-rules.md) asks validators to warn, never reject, on open
vocabularies and on references that point nowhere: an unknown `audience`, `auth.methods[].type`
or `manifests[].relationship`; `external_depends_on` naming an undeclared manifest (a MUST);
`auth_scope` outside `access: restricted`; protected units without an `auth` block; hints that
point at no unit; a deprecated unit nothing supersedes. kcp-opa adds one of its own: a
confidential or restricted unit that leaves `access` to the public default.
"""

from __future__ import annotations

from kcp_opa.core.jsonread import JsonObject, items, mapping
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.diagnostics import Findings, PathPart, Units, did_you_mean


def check_spec_rules(doc: JsonObject, units: Units, ids: set[str], findings: Findings) -> None:
    """Every rule below, for the whole manifest (units are (index, unit) for mapping units only)."""
    _check_root_vocab(doc, findings)
    manifest_ids = {m["id"] for m in items(doc.get("manifests")) if isinstance(m, dict) and "id" in m}
    superseded = {u.get("supersedes") for _, u in units} | _relationship_targets(doc, "supersedes")
    for index, unit in units:
        here: tuple[PathPart, ...] = ("units", index)
        _check_audience(unit, here, findings)
        _check_access(doc, unit, here, findings)
        _check_external_depends_on(unit, manifest_ids, here, findings)
        _check_hints(unit, ids, here, findings)
        if unit.get("deprecated") is True and unit.get("id") not in superseded:
            findings.warn(
                "deprecated_without_successor",
                "deprecated unit that no unit supersedes: agents have no alternative to prefer "
                "(add `supersedes` to its replacement)",
                (*here, "deprecated"),
            )
        freshness = unit.get("freshness_policy")
        if isinstance(freshness, dict) and "max_age_days" not in freshness:
            _no_max_age(findings, (*here, "freshness_policy"))
    root_freshness = doc.get("freshness_policy")
    if isinstance(root_freshness, dict) and "max_age_days" not in root_freshness:
        _no_max_age(findings, ("freshness_policy",))
    protected = [u.get("id") for _, u in units if u.get("access") in ("authenticated", "restricted")]
    if protected and not _auth_methods(doc):
        findings.warn(
            "protected_without_auth",
            f"unit(s) {', '.join(map(str, protected[:5]))} need credentials (access authenticated or restricted) "
            "but the manifest declares no `auth` methods telling agents how to get them",
            ("units",),
        )


def _check_root_vocab(doc: JsonObject, findings: Findings) -> None:
    auth = doc.get("auth")
    methods = auth.get("methods") if isinstance(auth, dict) else None
    for index, method in enumerate(items(methods)):
        kind = method.get("type") if isinstance(method, dict) else None
        where: tuple[PathPart, ...] = ("auth", "methods", index, "type")
        findings.unknown(
            "unknown_auth_method", "auth method type", kind, vocab.AUTH_METHOD_TYPES, where, "; agents ignore it"
        )
    for index, ref in enumerate(items(doc.get("manifests"))):
        relation = ref.get("relationship") if isinstance(ref, dict) else None
        where = ("manifests", index, "relationship")
        findings.unknown(
            "unknown_manifest_relationship", "relationship", relation, vocab.MANIFEST_RELATIONSHIPS, where, "; ignored"
        )


def _check_audience(unit: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    for index, audience in enumerate(items(unit.get("audience"))):
        where = (*here, "audience", index)
        findings.unknown("unknown_audience", "audience", audience, vocab.AUDIENCES, where, "; KCP readers ignore it")


def _check_access(doc: JsonObject, unit: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    access = unit.get("access")
    if "auth_scope" in unit and access != "restricted":
        findings.warn(
            "auth_scope_without_restricted",
            f"auth_scope only means something under access: restricted (access is {access or 'public, the default'})",
            (*here, "auth_scope"),
        )
    if "access" in unit:
        return
    own = [unit.get("sensitivity"), mapping(unit.get("compliance")).get("sensitivity")]
    levels: list[object] = [v for v in own if isinstance(v, str)] or [mapping(doc.get("compliance")).get("sensitivity")]
    strictest = max((v for v in levels if isinstance(v, str)), key=vocab.sensitivity_rank, default=None)
    if vocab.sensitivity_rank(strictest) >= vocab.sensitivity_rank("confidential"):
        findings.warn(
            "access_not_declared",
            f"{strictest} unit with no access declared, so KCP readers take it for public; declare "
            "access: restricted (with auth_scope) or authenticated",
            here,
        )


def _check_external_depends_on(
    unit: JsonObject, manifest_ids: set[str], here: tuple[PathPart, ...], findings: Findings
) -> None:
    for index, dep in enumerate(items(unit.get("external_depends_on"))):
        if not isinstance(dep, dict):
            continue
        where = (*here, "external_depends_on", index)
        target = dep.get("manifest")
        if isinstance(target, str) and target not in manifest_ids:
            findings.warn(
                "unknown_external_manifest",
                f"external_depends_on names manifest {target!r}, which `manifests` does not declare"
                f"{did_you_mean(target, manifest_ids)}",
                (*where, "manifest"),
            )
        on_failure = dep.get("on_failure")
        if isinstance(on_failure, str) and on_failure not in vocab.ON_FAILURE:
            findings.warn(
                "unknown_on_failure",
                f"on_failure {on_failure!r} is not one of {', '.join(vocab.ON_FAILURE)}; treated as skip",
                (*where, "on_failure"),
            )


def _check_hints(unit: JsonObject, ids: set[str], here: tuple[PathPart, ...], findings: Findings) -> None:
    hints = mapping(unit.get("hints"))
    if hints.get("summary_available") is True and not hints.get("summary_unit"):
        findings.warn(
            "summary_unit_missing",
            "summary_available is true but no summary_unit names the summary",
            (*here, "hints", "summary_available"),
        )
    for key in ("summary_unit", "summary_of", "chunk_of"):
        ref = hints.get(key)
        if isinstance(ref, str) and ref not in ids:
            findings.warn(
                f"dangling_{key}",
                f"hints.{key} {ref!r}: no unit with that id{did_you_mean(ref, ids)}",
                (*here, "hints", key),
            )


def _no_max_age(findings: Findings, path: tuple[PathPart, ...]) -> None:
    findings.warn(
        "no_max_age",
        "freshness_policy without max_age_days sets no age limit: no unit is ever stale by age",
        path,
    )


def _auth_methods(doc: JsonObject) -> list[object]:
    return items(mapping(doc.get("auth")).get("methods"))


def _relationship_targets(doc: JsonObject, kind: str) -> set[object]:
    """Units another unit replaces through a top-level relationship of this type ("to" is replaced)."""
    return {r.get("to") for r in items(doc.get("relationships")) if isinstance(r, dict) and r.get("type") == kind}
