"""The frozen action: parse, refuse what must never be evaluated, hash.

An action is checked before anything reads it: floats (money is integer minor units) and
secret-bearing keys anywhere are refused outright, then the KYA v2.0 shape is checked against
``schemas/action-intent.schema.json``. The KYA-CJ-1 hash binds every later decision, control,
receipt and execution to these exact bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator

from kcp_opa.core import strictjson, strings
from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.secretkeys import secret_name
from kcp_opa.core.textfold import TextFoldError, fold_text

MAX_ACTION_BYTES = 1024 * 1024
MAX_DEPTH = 32
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def parse_action(text: str | bytes) -> dict[str, Any]:
    """Parse JSON text into a checked action; the one way files and stdin enter the gate."""
    size = len(text.encode("utf-8") if isinstance(text, str) else text)
    if size > MAX_ACTION_BYTES:
        raise ActionRejectedError("", f"{size} bytes is over the {MAX_ACTION_BYTES >> 10} KiB limit for one action")
    try:
        value = strictjson.loads(text)
    except strictjson.StrictJSONError as exc:
        if exc.msg == strictjson.TOO_DEEP:
            raise ActionRejectedError("", f"nested deeper than {MAX_DEPTH} levels") from None
        raise ActionRejectedError("", f"refused: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ActionRejectedError("", f"not valid JSON: {exc}") from None
    check_action(value)
    return value  # type: ignore[no-any-return]


def check_action(value: Any) -> bytes:
    """Raise :class:`ActionRejectedError` unless ``value`` is a well-formed action intent.

    Returns the action's canonical JSON (what its KYA-CJ-1 hash is taken over): the 1 MiB cap
    is measured on those bytes, so a dict handed to ``Gate.decide`` is bounded like a file.
    """
    if not isinstance(value, Mapping):
        raise ActionRejectedError("", f"must be a JSON object, not {_json_type(value)}")
    _check_values(value)
    check_strings(value)
    canonical = canonical_json(value)
    if len(canonical) > MAX_ACTION_BYTES:
        raise ActionRejectedError(
            "", f"{len(canonical)} bytes serialized is over the {MAX_ACTION_BYTES >> 10} KiB limit for one action"
        )
    _check_attribute_count(value.get("attributes"))
    try:
        _fast_validator()(value)
    except fastjsonschema.JsonSchemaValueException as fast:
        # The compiled check decides; jsonschema only words the error (it lists them all).
        errors = sorted(_validator().iter_errors(value), key=lambda e: (list(e.absolute_path), e.message))
        if not errors:
            raise ActionRejectedError("".join(f"/{p}" for p in fast.path[1:]), fast.message) from None
        first = errors[0]
        path = "".join(f"/{part}" for part in first.absolute_path)
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ActionRejectedError(path, f"{_schema_message(first)}{more}") from None
    return canonical


#: Values (containers and scalars) under ``attributes``, all levels: what regopy's input
#: conversion pays for, linearly (docs/input-contract.md "Sizes"). The schema caps each level.
MAX_ATTRIBUTE_VALUES = 1024


def _check_attribute_count(attributes: Any) -> None:
    if not isinstance(attributes, Mapping):
        return
    count, stack = 0, list(attributes.values())
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_ATTRIBUTE_VALUES:
            raise ActionRejectedError(
                "/attributes", f"holds more than {MAX_ATTRIBUTE_VALUES:,} values (all levels); pass a reference instead"
            )
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _check_values(root: Mapping[str, Any]) -> None:
    """Walk iteratively (no recursion limit to hit): depth, floats, integer range, forbidden keys."""
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ActionRejectedError(path, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ActionRejectedError(path, f"object key {key!r} is not a string")
                _refuse_secret_key(key, path)
                stack.append((item, f"{path}/{key}", depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{path}/{index}", depth + 1) for index, item in enumerate(value))
        elif isinstance(value, float):
            raise ActionRejectedError(path, f"{value!r} is a float; money and counts are integers (minor units)")
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        elif isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ActionRejectedError(path, f"{value} does not fit in a signed 64-bit integer")
        else:
            raise ActionRejectedError(path, f"{type(value).__name__} is not a JSON value")


#: Where the action holds identifiers (kcp_opa/core/strings.py, shared with the gate's facts).
IDENTIFIER_PATHS = strings.ACTION_IDENTIFIER_PATHS


def check_strings(root: Mapping[str, Any]) -> None:
    """The string contract (docs/input-contract.md): raise :class:`ActionRejectedError` naming path and character.

    Every string and key: none of ``strings.FORBIDDEN_TEXT``. Strings at :data:`IDENTIFIER_PATHS`:
    ``strings.IDENTIFIER`` only (the shared rules, kcp_opa/core/strings.py). Kept apart from the
    shape checks: this is the engine-fidelity rule.
    """
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _check_text(value, path)
            problem = strings.identifier_problem(value) if strings.is_action_identifier_path(path) else None
            if problem is not None:
                raise ActionRejectedError(
                    path, f"{problem} is not allowed in an identifier ({strings.IDENTIFIER_RULE})"
                )
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str):
                    _check_text(key, f"{path}/{key.encode('unicode_escape').decode('ascii')}", key=True)
                stack.append((item, f"{path}/{key}"))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{path}/{index}") for index, item in enumerate(value))


def _check_text(text: str, path: str, *, key: bool = False) -> None:
    if strings.quote_wrapped(text):
        raise ActionRejectedError(path, strings.QUOTE_WRAPPED_RULE)
    bad = strings.forbidden_char(text)
    if bad is not None:
        where = "an object key" if key else "a string"
        raise ActionRejectedError(
            path, f"character {strings.char_name(bad)} is not allowed in {where} of an action (control characters "
            "other than TAB, LF and CR, and lone surrogates, are refused)",
        )  # fmt: skip


#: Free-text strings the policies compare as people read them, folded into ``input.context.folded``.
FOLDED_PATHS = (("knowledge", "purpose"),)


def folded_strings(action: Mapping[str, Any]) -> dict[str, str]:
    """``{"purpose": fold}`` for each :data:`FOLDED_PATHS` string the action holds that folds.

    One that cannot be read as one spelling (kcp_opa.core.textfold) has no fold: a rule that
    compares it then denies (``purpose_not_folded``), and :func:`fold_refusals` says why.
    """
    return {name: fold for name, (fold, _) in _folds(action).items() if fold is not None}


def fold_refusals(action: Mapping[str, Any]) -> dict[str, str]:
    """``{"purpose": why}`` for each :data:`FOLDED_PATHS` string that cannot be folded."""
    return {name: why for name, (_, why) in _folds(action).items() if why is not None}


def _folds(action: Mapping[str, Any]) -> dict[str, tuple[str | None, str | None]]:
    found: dict[str, tuple[str | None, str | None]] = {}
    for *parents, name in FOLDED_PATHS:
        node: Any = action
        for part in parents:
            node = node.get(part) if isinstance(node, Mapping) else None
        value = node.get(name) if isinstance(node, Mapping) else None
        if isinstance(value, str):
            try:
                found[name] = (_contract_safe(fold_text(value)), None)
            except TextFoldError as exc:
                found[name] = (None, str(exc))
    return found


def _contract_safe(text: str) -> str:
    # A fold can only shrink what the contract let in, but it must never end up quote-wrapped.
    return text.strip('"') if strings.quote_wrapped(text) else text


def _refuse_secret_key(key: str, path: str) -> None:
    """Secret-bearing keys (core/secretkeys.py: case, separators, NFKC, zero-width) are refused."""
    name = secret_name(key)
    if name is not None:
        shown = key.encode("ascii", "backslashreplace").decode("ascii")
        raise ActionRejectedError(
            f"{path}/{shown}", f"secret-bearing key ({name}) never accepted in an action; pass a reference"
        )


def _schema_message(error: Any) -> str:
    """jsonschema's wording, except where it would echo a whole list back (up to the 1 MiB action)."""
    if error.validator == "required":
        return str(error.message).replace("is a required property", "is required")
    if error.validator == "maxItems":
        return f"has {len(error.instance)} items; at most {error.validator_value} are allowed"
    if error.validator in ("minLength", "maxLength") and isinstance(error.instance, str):
        bound = "at least {} are required" if error.validator == "minLength" else "at most {} are allowed"
        shown = repr(error.instance) if len(error.instance) <= 60 else repr(error.instance[:57]) + "..."
        return f"{shown} has {len(error.instance)} characters; {bound.format(error.validator_value)}"
    return str(error.message)


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


@cache
def action_schema() -> dict[str, Any]:
    """The action-intent JSON Schema shipped with the package."""
    text = resources.files("kcp_opa.schemas").joinpath("action-intent.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(action_schema())


@cache
def _fast_validator() -> Any:
    # fastjsonschema compiles the schema to Python: ~25 us per KYA action where jsonschema's
    # validator takes ~300 us here, and decide() has a ~150 us budget (docs/performance.md).
    return fastjsonschema.compile(action_schema())


def action_hash(action: Mapping[str, Any]) -> str:
    """The KYA-CJ-1 hash of the whole action: ``sha256:<hex>``."""
    return canonical_hash(action)


def trace_id_of(action: Mapping[str, Any]) -> str | None:
    """The W3C trace id in ``trace.traceparent``; None when absent or not a valid traceparent."""
    trace = action.get("trace")
    parent = trace.get("traceparent") if isinstance(trace, Mapping) else None
    match = _TRACEPARENT.match(parent) if isinstance(parent, str) else None
    if match is None or match.group(1) == "0" * 32 or match.group(2) == "0" * 16:
        return None
    return match.group(1)
