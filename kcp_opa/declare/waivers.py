"""Which findings an exception may waive: declared per findings rule in the policies' METADATA.

A findings rule lists the codes it lets an exception waive (``custom.waivable: [code, ...]``);
a code no rule lists is never waived. Terminal denials are never waivable, whatever a policy
says: :data:`TERMINAL_CODES` (a tenant boundary, a forbidden matrix cell, ``no-ai-training``,
forbidden evidence, and the gate's own fail-closed verdicts). ``kcp-opa check`` and
``kcp-opa generate`` refuse a module that marks one waivable, naming its line, and the generated
``kcp/gate/evaluators.rego`` carries both sets for ``kcp.gate.exceptions``, which checks them
again at every decision.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import yaml

#: Never waivable (DENY is terminal, gate contract §1): no exception may turn these into an allow.
TERMINAL_CODES = frozenset(
    {
        "tenant_boundary",
        "matrix_forbidden",
        "matrix_not_covered",
        "task_type_not_in_matrix",
        "ai_training_forbidden",
        "evidence_forbidden",
        "role_cannot_send",
        "capability_widened",
        "delegation_too_deep",
        "access_unauthenticated",
        "context_conflict",
        "context_missing",
        "unknown_unit",
        "compliance_review_required",
        "policy_undefined",
        "engine_error",
        "engine_divergence",
        "audit_unavailable",
    }
)


@dataclass(frozen=True)
class Waivable:
    """One code a findings rule declares waivable, and where (for the finding that refuses it)."""

    file: str
    line: int
    code: str


def metadata_blocks(source: str) -> Iterator[tuple[int, object, int]]:
    """Yield (line, parsed YAML or the ``yaml.YAMLError``, index of the line it annotates) per METADATA block.

    The one scanner of Rego METADATA: the caller decides what an unreadable block means (the
    compile step refuses it, naming the line; the waiver scan passes over it).
    """
    lines = source.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "# METADATA":
            index += 1
            continue
        start, body = index + 1, []
        index += 1
        while index < len(lines) and lines[index].lstrip().startswith("#"):
            text = lines[index].lstrip()[1:]
            body.append(text[1:] if text.startswith(" ") else text)
            index += 1
        try:
            parsed: object = yaml.safe_load("\n".join(body))
        except yaml.YAMLError as exc:
            parsed = exc
        yield start, parsed, index


def declared(modules: Mapping[str, str]) -> list[Waivable]:
    """Every ``custom.waivable`` code of every module (tests excluded), in file and line order."""
    found: list[Waivable] = []
    for path, source in sorted(modules.items()):
        if path.endswith("_test.rego"):
            continue
        for line, annotation, _ in metadata_blocks(source):
            if not isinstance(annotation, dict):
                continue  # the compile step names an unreadable METADATA block
            custom = annotation.get("custom")
            codes = custom.get("waivable") if isinstance(custom, dict) else None
            if isinstance(codes, list):
                found += [Waivable(path, line, str(code)) for code in codes]
            elif codes is not None:
                found.append(Waivable(path, line, f"(not a list: {codes!r})"))
    return found


def refusals(modules: Mapping[str, str]) -> list[tuple[Waivable, str]]:
    """Each declared code that may not be waivable, with why (terminal, or not a finding code)."""
    out = []
    for item in declared(modules):
        if item.code in TERMINAL_CODES:
            out.append((item, f"{item.code} is a terminal denial and can never be waived (custom.waivable)"))
        elif not item.code.replace("_", "a").isalnum() or not item.code[:1].isalpha():
            out.append((item, f"custom.waivable lists {item.code!r}, which is not a reason code"))
    return out
