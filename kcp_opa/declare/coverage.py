"""Every declared restriction is enforced or refused (docs/manifest-rules.md, "What reads what").

A restriction no rule reads (``no-redistribution``), one the gate cannot apply
(``no-cross-border`` on a unit with no ``data_residency`` anywhere: nothing to cross) or a
visibility condition that matches what it does not list (``environment: [""]``, the bundle's
"no condition lists it" key) looked enforced to its author and decided nothing. The last two
are validation errors here. A restriction that is unknown or that no rule reads is a warning
(KCP tells validators to ignore values they do not know) that ``compile`` refuses unless the
deployment acknowledges it (kcp_opa.declare.unenforced). Regulations and the legal basis are
advisory: carried and shown, never decided on, and ``validate`` notes so once per manifest.
What reads each value: ``vocabulary.READ_BY``. The per-task field lists are checked against
their ceiling here too (kcp_opa.declare.taskfields).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from kcp_opa.core.jsonread import JsonObject, items, mapping
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.diagnostics import Findings, PathPart, Units, did_you_mean
from kcp_opa.declare.taskfields import check_task_fields

_CROSS_BORDER = "no-cross-border"


def check_coverage(doc: JsonObject, units: Units, findings: Findings) -> None:
    """Errors for declarations nothing enforces; one advisory warning for regulations."""
    root = mapping(doc.get("compliance"))
    blocks: list[tuple[tuple[PathPart, ...], JsonObject]] = [(("compliance",), root)] if root else []
    blocks += [(("units", i, "compliance"), c) for i, u in units if (c := mapping(u.get("compliance")))]
    for here, block in blocks:
        _check_restrictions(block, here, findings)
        _check_waivable_restrictions(block, here, findings)
    _check_cross_border(root, units, findings)
    check_task_fields(doc, units, findings)
    _advise(blocks, findings)
    for here, visibility in [(("visibility",), doc.get("visibility"))] + [
        (("units", i, "visibility"), u.get("visibility")) for i, u in units
    ]:
        _check_conditions(visibility, here, findings)


def _check_restrictions(block: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    for index, value in enumerate(items(block.get("restrictions"))):
        if not isinstance(value, str):
            continue
        at = (*here, "restrictions", index)
        rule = vocab.RESTRICTION_RULES.get(value)
        if rule is None:
            findings.warn(
                "unknown_restriction",
                f"restriction {value!r} is not one kcp-opa enforces, so no rule would read it"
                f"{did_you_mean(value, vocab.RESTRICTION_RULES)}; enforced: {', '.join(_enforced())}",
                at,
                value=value,
            )
        elif rule == vocab.REFUSED:
            findings.warn(
                "restriction_unenforced",
                f"restriction {value!r} is known to KCP but no rule of the gate reads it: a bundle would "
                "decide as if it were not declared. Remove it (and enforce it where the data is handled), "
                f"or use one the gate enforces: {', '.join(_enforced())}",
                at,
                value=value,
            )


def _check_waivable_restrictions(block: JsonObject, here: tuple[PathPart, ...], findings: Findings) -> None:
    """``waivable_restrictions`` opts restriction rules in for exceptions on Art. 9 data (docs/exceptions.md)."""
    rules = sorted(r for r, rule in vocab.RESTRICTION_RULES.items() if rule.startswith("kcp.restrictions."))
    for index, value in enumerate(items(block.get("waivable_restrictions"))):
        if isinstance(value, str) and value not in rules:
            findings.error(
                "unknown_waivable_restriction",
                f"waivable_restrictions value {value!r} is no restriction rule an exception could waive"
                f"{did_you_mean(value, rules)}: it would opt nothing in; restriction rules: {', '.join(rules)}",
                (*here, "waivable_restrictions", index),
            )


def _check_cross_border(root: JsonObject, units: Units, findings: Findings) -> None:
    """no-cross-border compares the target with data_residency: with no region there is nothing to compare."""
    reported: set[tuple[PathPart, ...]] = set()
    for index, unit in units:
        own = mapping(unit.get("compliance"))
        source = own if "restrictions" in own else root
        restrictions = source.get("restrictions")
        if not isinstance(restrictions, list) or _CROSS_BORDER not in restrictions:
            continue
        residency = own.get("data_residency", root.get("data_residency"))
        regions = residency.get("regions") if isinstance(residency, Mapping) else residency
        if isinstance(regions, list) and any(isinstance(r, str) and r for r in regions):
            continue
        base: tuple[PathPart, ...] = ("units", index, "compliance") if source is own else ("compliance",)
        at = (*base, "restrictions", restrictions.index(_CROSS_BORDER))
        if at in reported:
            continue
        reported.add(at)
        findings.error(
            "cross_border_without_residency",
            f"no-cross-border applies to unit {unit.get('id')!r}, which has no data_residency regions (its own or "
            "the root's): the restriction compares the target with them, so it would check nothing. Declare "
            "compliance.data_residency",
            at,
        )


def _advise(blocks: Sequence[tuple[tuple[PathPart, ...], JsonObject]], findings: Findings) -> None:
    for here, block in blocks:
        regulations = [r for r in items(block.get("regulations")) if r in vocab.REGULATIONS]
        if regulations or block.get("legal_basis") in vocab.LEGAL_BASES:
            named = ", ".join(sorted(set(map(str, regulations))) or [str(block.get("legal_basis"))])
            findings.note(
                "advisory_declaration",
                f"{named}: regulations and legal_basis are recorded (bundle, explain, ROPA) but no rule decides on "
                "them (advisory); what they require is enforced through restrictions, data categories and the "
                "matrix. Said once per manifest",
                here,
            )
            return


_VISIBILITY_KEYS = (
    ((), ("default", "conditions")),
    (("conditions", "*"), ("when", "then")),
    (("conditions", "*", "then"), ("sensitivity", "requires_auth")),
)


def _check_conditions(block: object, here: tuple[PathPart, ...], findings: Findings) -> None:
    if not isinstance(block, Mapping):
        return
    for where, node in _visibility_nodes(block):
        allowed = next(keys for shape, keys in _VISIBILITY_KEYS if _shape(where) == shape)
        for key in node:
            if str(key) not in allowed and not str(key).startswith("x-"):
                findings.error(
                    "visibility_key_unknown",
                    f"{key!r} is not one of {', '.join(allowed)}: kcp-opa would ignore it, so the block would mean "
                    "something other than written (a misspelt `conditions` drops every condition)",
                    (*here, *where, str(key)),
                )
    for index, condition in enumerate(items(block.get("conditions"))):
        when = condition.get("when") if isinstance(condition, Mapping) else None
        if not isinstance(when, Mapping):
            continue
        for key, value in when.items():
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, str) and v for v in values):
                findings.error(
                    "visibility_condition_empty",
                    f"when.{key} must list one or more non-empty strings: an empty value stands for every "
                    "value no condition lists, and an empty list or a non-string matches nothing",
                    (*here, "conditions", index, "when", str(key)),
                )


def _visibility_nodes(block: JsonObject) -> Iterator[tuple[tuple[PathPart, ...], JsonObject]]:
    yield (), block
    for index, condition in enumerate(items(block.get("conditions"))):
        if isinstance(condition, Mapping):
            yield ("conditions", index), condition
            then = condition.get("then")
            if isinstance(then, Mapping):
                yield ("conditions", index, "then"), then


def _shape(where: tuple[PathPart, ...]) -> tuple[str, ...]:
    return tuple("*" if isinstance(part, int) else str(part) for part in where)


def _enforced() -> list[str]:
    return [name for name, rule in vocab.RESTRICTION_RULES.items() if rule != vocab.REFUSED]
