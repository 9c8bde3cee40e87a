"""Turn JSON Schema errors into findings a manifest author can act on."""

from __future__ import annotations

from collections.abc import Callable

import fastjsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from kcp_opa.core.jsonread import items
from kcp_opa.declare.diagnostics import MAX_COUNTED, Findings, did_you_mean


def check_schema(
    validator: Draft202012Validator, data: object, findings: Findings, fast: Callable[[object], object] | None = None
) -> None:
    """The first ``findings.limit`` schema errors, worded; the rest counted up to MAX_COUNTED
    (jsonschema yields them lazily, so an invalid 4 MiB manifest stops early).

    ``fast`` (kcp_opa.schemas.fast_validator) answers first: what it passes has no schema
    errors; what it refuses is judged and worded by ``validator``, and should ``validator`` find
    nothing wrong with it, the refusal stands.
    """
    refused: fastjsonschema.JsonSchemaValueException | None = None
    if fast is not None:
        try:
            fast(data)
            return
        except fastjsonschema.JsonSchemaValueException as compiled:
            refused = compiled
    kept: list[ValidationError] = []
    counted = 0
    for error in validator.iter_errors(data):
        if len(kept) < findings.limit:
            kept.append(error)
            continue
        counted += 1
        if counted >= MAX_COUNTED:
            break
    for error in sorted(kept, key=lambda e: [str(p) for p in e.absolute_path]):
        findings.error("schema", _message(error), tuple(error.absolute_path))
    findings.dropped += counted
    if not kept and refused is not None and refused.name:
        # The two disagree (an integral float, unnamed, is the strict validator's alone to judge):
        # the refusal stands, in the compiled check's words. Fail closed.
        findings.error("schema", refused.message, tuple(refused.path[1:]))


def _message(error: ValidationError) -> str:
    value = error.instance
    if error.validator == "enum":
        allowed = [str(v) for v in items(error.validator_value)]  # an enum is a list
        hint = did_you_mean(str(value), allowed) if isinstance(value, str) else ""
        return f"{value!r} is not one of {', '.join(allowed)}{hint}"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    if error.validator == "type":
        expected = error.validator_value
        names = [str(n) for n in expected] if isinstance(expected, list) else [str(expected)]
        hint = ""
        if "integer" in names and isinstance(value, float) and value.is_integer():
            hint = " (a float: write an integer; money is in minor units, e.g. 4500.00 EUR is 450000)"
        return f"expected {' or '.join(names)}, got {_kind(value)} {_short(value)}{hint}"
    if error.validator == "minItems" and error.validator_value == 1:
        return "must not be empty"
    if error.validator in ("minLength", "pattern") and value == "":
        return "must not be empty"
    if error.validator == "pattern":
        return f"{_short(value)} does not match {error.validator_value}"
    if error.validator == "oneOf" and list(error.absolute_path)[-1:] == ["data_residency"]:
        return "data_residency must be a list of regions or {regions: [...], hard_requirement: bool}"
    if error.validator == "const":
        return f"must be {error.validator_value!r}, got {_short(value)}"
    return error.message


def _kind(value: object) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
