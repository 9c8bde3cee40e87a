"""Fields per task type: ``compliance.declared_fields_by_task_type`` (docs/manifest-rules.md).

A unit's ``declared_fields`` is the ceiling of what any action on it may read; the by-task map
narrows it for the task types it names (an OCR step may read ``scan``, an ``answer`` only
``status``). A by-task field outside the ceiling would widen the unit's declaration where a
reviewer reading ``declared_fields`` does not look, so it is a validation error, and so is a
by-task map with no ``declared_fields`` at all (every other task type would read anything). A
task type the delegation matrix does not list names an action the gate denies anyway: a typo
(``anwser``) that leaves the real task type on the wider list, so it is an error once the
matrix is known (``validate`` given both, ``compile``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.core.jsonread import JsonObject, items, mapping
from kcp_opa.declare.diagnostics import Diagnostic, Findings, PathPart, Severity, Units, did_you_mean

KEY = "declared_fields_by_task_type"
CEILING = "declared_fields"
Where = tuple[PathPart, ...]


def check_task_fields(doc: JsonObject, units: Units, findings: Findings) -> None:
    """Errors where a unit's effective by-task lists leave its effective ``declared_fields``."""
    root = _compliance(doc)
    said: set[tuple[str, Where]] = set()  # a root list inherited by many units is reported once

    def error(code: str, message: str, at: Where) -> None:
        if (code, at) not in said:
            said.add((code, at))
            findings.error(code, message, at)

    for index, unit in units:
        own = _compliance(unit)
        by_task, by_at = _pick(own, root, KEY, ("units", index, "compliance"))
        ceiling, ceiling_at = _pick(own, root, CEILING, ("units", index, "compliance"))
        if not isinstance(by_task, Mapping):
            continue
        if not isinstance(ceiling, list):
            error(
                "task_fields_without_declared_fields",
                f"{KEY} without {CEILING}: every task type it does not list could read any field; declare "
                f"{CEILING} (the ceiling every list narrows)",
                by_at,
            )
            continue
        allowed = {f for f in ceiling if isinstance(f, str)}
        inherited = by_at[:1] == ("compliance",) and ceiling_at[:1] == ("units",)
        for task, j, field in _entries(by_task):
            if field in allowed:
                continue
            if inherited:  # the root's list meets this unit's narrower ceiling: say it where narrowed
                error(
                    "task_fields_outside_declared_fields",
                    f"unit {unit.get('id')!r} inherits {KEY}.{task} from the root, which lists {field!r} outside "
                    f"this unit's {CEILING}; declare the unit's own {KEY} or add the field to {CEILING}",
                    ceiling_at,
                )
            else:
                error(
                    "task_fields_outside_declared_fields",
                    f"{field!r} for task type {task!r} is outside {CEILING} ({', '.join(sorted(allowed)) or 'none'}):"
                    f" {CEILING} is the ceiling a task type's list narrows, never widens; add it to {CEILING} first",
                    (*by_at, task, j),
                )


def unlisted_task_types(file: str, doc: JsonObject, listed: Collection[str], names: str) -> list[Diagnostic]:
    """One error per by-task key of manifest DOC that LISTED (the task types of the matrices
    NAMES) lacks: the typo keeps the real task type on the wider list."""
    blocks: list[tuple[Where, JsonObject]] = [(("compliance",), _compliance(doc))]
    for i, unit in enumerate(items(doc.get("units"))):
        blocks.append((("units", i, "compliance"), _compliance(mapping(unit))))
    out = []
    for here, block in blocks:
        by_task = block.get(KEY)
        for task in by_task if isinstance(by_task, Mapping) else {}:
            if task not in listed:
                out.append(
                    Diagnostic(
                        Severity.ERROR,
                        "task_fields_unknown_task_type",
                        f"{KEY} names task type {task!r}{did_you_mean(str(task), listed)}, which {names} does not "
                        "list: its list would never apply and the task type meant keeps the wider declared_fields",
                        (*here, KEY, str(task)),
                        file=file,
                    )
                )
    return out


def refuse_unlisted_task_types(file: str, doc: JsonObject, listed: Collection[str], names: str) -> None:
    """``compile``: a by-task key the matrix does not list is refused, never compiled."""
    errors = unlisted_task_types(file, doc, listed, names)
    if errors:
        raise ValidationFailedError(file, [str(d) for d in errors])


def _compliance(node: JsonObject) -> JsonObject:
    return mapping(node.get("compliance"))


def _pick(own: JsonObject, root: JsonObject, key: str, here: Where) -> tuple[object, Where]:
    """The unit's value of ``key`` (it replaces the root's), else the root's, and where it is written."""
    if key in own:
        return own[key], (*here, key)
    return root.get(key), ("compliance", key)


def _entries(by_task: JsonObject) -> Iterator[tuple[str, int, str]]:
    for task, fields in by_task.items():
        if isinstance(fields, list):
            for j, field in enumerate(fields):
                if isinstance(field, str):
                    yield str(task), j, field
