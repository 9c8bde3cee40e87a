"""Nothing declared is silently unenforced (docs/manifest-rules.md, "Unknown keys and values").

KCP tells parsers to ignore keys and values they do not know, so ``validate`` only warns about
them and keeps KCP conformance. The gate is the application that enforces, so ``compile``
refuses every finding listed in ``UNENFORCED_CODES`` (an unknown key in a policy-bearing block:
``restrictons``, ``declard_fields``, ``not-for``; a restriction no rule reads; an unknown
``access`` or authority value...) unless the deployment's delegation matrix acknowledges it by
name in its ``unenforced`` list. The known keys are the schema's ``properties``
(kcp_opa/schemas/kcp-manifest.schema.json), so one catalog serves validation and this walk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kcp_opa import schemas
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.core.jsonread import JsonObject, items, mapping
from kcp_opa.declare.diagnostics import (
    UNENFORCED_CODES,
    Diagnostic,
    Findings,
    PathPart,
    Severity,
    did_you_mean,
    format_path,
)

#: Root and unit blocks whose keys bear on a decision, walked against the schema. ``visibility``
#: is checked by kcp_opa.declare.coverage (an error already); the others (auth, hints, manifests,
#: discovery, license...) decide nothing, so KCP's "ignore what you do not know" stands there.
POLICY_BLOCKS = ("compliance", "delegation", "trust", "freshness_policy", "rate_limits", "payment", "temporal")
EXTENSION_PREFIX = "x-"  # KCP §13: a namespaced extension, declared as such by its author


def check_unknown_keys(doc: JsonObject, findings: Findings) -> None:
    """One ``unknown_key`` warning per key the schema does not list, at the root, in each unit
    and inside each policy-bearing block (``x-`` extension keys excepted)."""
    schema = schemas.schema(schemas.MANIFEST)
    defs = mapping(schema["$defs"])
    _check_level(doc, schema, defs, (), "the manifest root", findings)
    for index, unit in enumerate(items(doc.get("units"))):
        if isinstance(unit, Mapping):
            _check_level(unit, mapping(defs["unit"]), defs, ("units", index), "a unit", findings)


def _check_level(
    node: JsonObject, schema: JsonObject, defs: JsonObject, here: tuple[PathPart, ...], where: str, findings: Findings
) -> None:
    known = mapping(schema["properties"])
    _unknown(node, known, here, where, findings)
    for block in POLICY_BLOCKS:
        if block in node and block in known:
            _walk(node[block], _resolve(known[block], defs), defs, (*here, block), findings)


def _walk(node: object, schema: JsonObject, defs: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    if isinstance(node, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(node):
            _walk(item, _resolve(schema["items"], defs), defs, (*here, index), findings)
        return
    if not isinstance(node, Mapping):
        return
    branch = next((b for b in items(schema.get("oneOf")) if "properties" in _resolve(b, defs)), None)
    if branch is not None:
        schema = _resolve(branch, defs)
    known = schema.get("properties")
    if not isinstance(known, Mapping):
        return
    _unknown(node, known, here, format_path(here), findings)
    for key, value in node.items():
        if key in known:
            _walk(value, _resolve(known[key], defs), defs, (*here, str(key)), findings)


def _unknown(node: JsonObject, known: JsonObject, here: tuple[PathPart, ...], where: str, findings: Findings) -> None:
    for key in node:
        name = str(key)
        if name in known or name.startswith(EXTENSION_PREFIX):
            continue
        findings.warn(
            "unknown_key",
            f"unknown key {name!r} in {where}{did_you_mean(name, known)}: kcp-opa does not read it, so the "
            f"gate does not enforce what it says",
            (*here, name),
        )


def _resolve(schema: object, defs: JsonObject) -> JsonObject:
    if not isinstance(schema, Mapping):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve(defs[ref.removeprefix("#/$defs/")], defs)
    return schema


# -- the deployment's acknowledgements (the delegation matrix's ``unenforced`` list) ----------


def finding_name(diagnostic: Diagnostic) -> str:
    """How a deployment names a finding to acknowledge it: ``knowledge.yaml:units[0].compliance.x``,
    with ``=VALUE`` for a declared value (``...restrictions[1]=no_ai_training``): an acknowledgement
    covers that value at that place, never what is written there later."""
    value = "" if diagnostic.value is None else f"={diagnostic.value}"
    return f"{Path(diagnostic.file).name}:{format_path(diagnostic.path)}{value}"


@dataclass(frozen=True)
class Acknowledged:
    """One unenforced declaration the deployment accepted, as the bundle records it."""

    at: str
    reason: str
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"at": self.at, "reason": self.reason, "code": self.code, "message": self.message}


def settle(
    diagnostics: Iterable[Diagnostic], acknowledgements: Mapping[str, str]
) -> tuple[list[Acknowledged], list[Diagnostic]]:
    """Split the unenforced findings into those acknowledged (``at`` -> reason) and those refused."""
    accepted: list[Acknowledged] = []
    refused: list[Diagnostic] = []
    for diagnostic in diagnostics:
        if diagnostic.code not in UNENFORCED_CODES or diagnostic.severity is Severity.NOTE:
            continue
        name = finding_name(diagnostic)
        if name in acknowledgements:
            accepted.append(Acknowledged(name, acknowledgements[name], diagnostic.code, diagnostic.message))
        else:
            refused.append(diagnostic)
    return accepted, refused


def as_refusal(diagnostic: Diagnostic) -> Diagnostic:
    """The finding as ``compile`` and ``validate --strict`` state it: an error saying how to lift it."""
    message = (
        f"{diagnostic.message}. Fix it, or acknowledge it in the delegation matrix: "
        f"unenforced: [{{at: {finding_name(diagnostic)!r}, reason: ...}}]"
    )
    return replace(diagnostic, severity=Severity.ERROR, message=message)


def as_acknowledged(diagnostic: Diagnostic, reason: str) -> Diagnostic:
    message = f"{diagnostic.message} (acknowledged unenforced by the delegation matrix: {reason})"
    return replace(diagnostic, severity=Severity.NOTE, message=message)


def unused(acknowledgements: Mapping[str, str], accepted: Sequence[Acknowledged], matrix_file: str) -> list[Diagnostic]:
    """An acknowledgement that matches no finding (fixed, or misspelt): said, so the list stays true."""
    used = {a.at for a in accepted}
    return [
        Diagnostic(
            Severity.WARNING,
            "unenforced_unused",
            f"unenforced entry {at!r} matches no finding: remove it (or correct the file name and path)",
            ("unenforced",),
            None,
            matrix_file,
        )
        for at in acknowledgements
        if at not in used
    ]


class UnenforcedError(ValidationFailedError):
    """``compile`` refused declarations the gate would not enforce; each line names one."""

    heading = "declares what the gate would not enforce"

    def __init__(self, refused: Sequence[Diagnostic]) -> None:
        super().__init__(refused[0].file, [str(as_refusal(d)) for d in refused])
