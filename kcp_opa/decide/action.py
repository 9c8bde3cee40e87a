"""The frozen action: parse, refuse what must never be evaluated, hash.

An action is checked before anything reads it: floats (money is integer minor units) and
secret-bearing keys anywhere are refused outright, then the KYA v2.0 shape is checked against
``schemas/action-intent.schema.json``. The KYA-CJ-1 hash binds every later decision, control,
receipt and execution to these exact bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator, ValidationError

from kcp_opa.core import strictjson, strings
from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.frozen import FrozenArray, FrozenObject, add, put
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.secretkeys import secret_name
from kcp_opa.core.textfold import TextFoldError, fold_text
from kcp_opa.decide.checked import CheckedAction, CheckedRoot, proof_of

MAX_ACTION_BYTES = 1024 * 1024
MAX_DEPTH = 32
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def parse_action(text: str | bytes) -> JsonDict:
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
    check_action(value)  # refuses all but a JSON object, which strictjson reads as a dict
    return value if isinstance(value, dict) else dict(value)


def check_action(value: object) -> CheckedAction:
    """Raise :class:`ActionRejectedError` unless ``value`` is a well-formed action intent.

    Returns the :class:`CheckedAction`: a read-only copy of the action taken in the one walk
    that checks it, its canonical JSON (what its KYA-CJ-1 hash is taken over; the 1 MiB cap is
    measured on those bytes, so a dict handed to ``Gate.decide`` is bounded like a file) and its
    hash. A :class:`CheckedAction` is returned as it is: it cannot have changed since its check.
    Anything else (a dict, a read-only mapping, a copy of a checked action) is checked.
    """
    proof = proof_of(value)
    if proof is not None:
        return proof
    if not isinstance(value, Mapping):
        raise ActionRejectedError("", f"must be a JSON object, not {_json_type(value)}")
    frozen, too_many_attributes = _checked_copy(value)
    canonical = canonical_json(frozen)
    if len(canonical) > MAX_ACTION_BYTES:
        raise ActionRejectedError(
            "", f"{len(canonical)} bytes serialized is over the {MAX_ACTION_BYTES >> 10} KiB limit for one action"
        )
    if too_many_attributes:
        raise ActionRejectedError(
            "/attributes", f"holds more than {MAX_ATTRIBUTE_VALUES:,} values (all levels); pass a reference instead"
        )
    try:
        _fast_validator()(frozen)
    except fastjsonschema.JsonSchemaValueException as fast:
        # The compiled check decides; jsonschema only words the error (it lists them all).
        errors = sorted(_validator().iter_errors(frozen), key=lambda e: (list(e.absolute_path), e.message))
        if not errors:
            raise ActionRejectedError("".join(f"/{p}" for p in fast.path[1:]), fast.message) from None
        first = errors[0]
        path = "".join(f"/{part}" for part in first.absolute_path)
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ActionRejectedError(path, f"{_schema_message(first)}{more}") from None
    folds = _folds(frozen)
    return CheckedAction._from_check(
        frozen,
        canonical,
        trace_id=trace_id_of(frozen),
        folded={name: fold for name, (fold, _) in folds.items() if fold is not None},
        folded_refused={name: why for name, (_, why) in folds.items() if why is not None},
    )


#: Values (containers and scalars) under ``attributes``, all levels: what regopy's input
#: conversion pays for, linearly (docs/input-contract.md "Sizes"). The schema caps each level.
MAX_ATTRIBUTE_VALUES = 1024


def _checked_copy(root: JsonObject) -> tuple[CheckedRoot, bool]:
    """One iterative walk (no recursion limit to hit): the read-only copy, and whether
    ``attributes`` holds more than :data:`MAX_ATTRIBUTE_VALUES` values (all levels).

    Refused at once, in walk order: too deep, a key that is no string or is secret-bearing, a
    float, an integer out of range, what is no JSON value. The first breach of the string
    contract (:func:`check_strings`, the same order) is raised only when the walk finds none.
    """
    frozen = CheckedRoot()
    stack: list[tuple[object, Any, str, int, bool]] = [(root, frozen, "", 0, False)]
    text_error: ActionRejectedError | None = None
    counted = 0
    while stack:
        value, into, path, depth, under_attributes = stack.pop()
        counted += under_attributes
        if depth > MAX_DEPTH:
            raise ActionRejectedError(path, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            counts = under_attributes or (depth == 1 and path == "/attributes")  # what the schema caps
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ActionRejectedError(path, f"object key {key!r} is not a string")
                _refuse_secret_key(key, path)
                if text_error is None:
                    text_error = _key_error(key, path)
                child_path = f"{path}/{key}"
                if depth < MAX_DEPTH and _clean_scalar(item, child_path):
                    put(into, key, item)  # nothing to report about it, wherever the walk would reach it
                    counted += counts
                    continue
                child = _shell(item)
                put(into, key, child)
                stack.append((item, child, child_path, depth + 1, counts))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                child_path = f"{path}/{index}"
                if depth < MAX_DEPTH and _clean_scalar(item, child_path):
                    add(into, item)
                    counted += under_attributes
                    continue
                child = _shell(item)
                add(into, child)
                stack.append((item, child, child_path, depth + 1, under_attributes))
        elif isinstance(value, float):
            raise ActionRejectedError(path, f"{value!r} is a float; money and counts are integers (minor units)")
        elif isinstance(value, str):
            if text_error is None:
                text_error = _string_error(value, path)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ActionRejectedError(path, f"{value} does not fit in a signed 64-bit integer")
        else:
            raise ActionRejectedError(path, f"{type(value).__name__} is not a JSON value")
    if text_error is not None:
        raise text_error
    return frozen, counted > MAX_ATTRIBUTE_VALUES


def _clean_scalar(value: Any, path: str) -> bool:
    """A plain string, boolean, null or 64-bit integer with nothing to refuse at ``path``: the walk
    keeps it without visiting it (what is refused is visited, so errors come in walk order)."""
    kind = type(value)
    if kind is str:
        return _string_error(value, path) is None
    if kind is int:
        return bool(INT64_MIN <= value <= INT64_MAX)
    return kind is bool or value is None


def _key_error(key: str, path: str) -> ActionRejectedError | None:
    if not strings.quote_wrapped(key) and strings.forbidden_char(key) is None:
        return None
    return _text_error(key, f"{path}/{key.encode('unicode_escape').decode('ascii')}", key=True)


def _shell(value: object) -> object:
    """An empty frozen container the walk fills when it reaches ``value``, or the scalar itself."""
    if isinstance(value, Mapping):
        return FrozenObject()
    if isinstance(value, list | tuple):
        return FrozenArray()
    return value


#: Where the action holds identifiers (kcp_opa/core/strings.py, shared with the gate's facts).
IDENTIFIER_PATHS = strings.ACTION_IDENTIFIER_PATHS


def check_strings(root: JsonObject) -> None:
    """The string contract (docs/input-contract.md): raise :class:`ActionRejectedError` naming path and character.

    Every string and key: none of ``strings.FORBIDDEN_TEXT``. Strings at :data:`IDENTIFIER_PATHS`:
    ``strings.IDENTIFIER`` only (the shared rules, kcp_opa/core/strings.py). Kept apart from the
    shape checks: this is the engine-fidelity rule (:func:`check_action` applies it in its walk).
    """
    stack: list[tuple[object, str]] = [(root, "")]
    while stack:
        value, path = stack.pop()
        error = None
        if isinstance(value, str):
            error = _string_error(value, path)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if error is None and isinstance(key, str):
                    error = _text_error(key, f"{path}/{key.encode('unicode_escape').decode('ascii')}", key=True)
                stack.append((item, f"{path}/{key}"))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{path}/{index}") for index, item in enumerate(value))
        if error is not None:
            raise error


def _string_error(value: str, path: str) -> ActionRejectedError | None:
    """Why the string at ``path`` breaks the contract (its text, or an identifier's characters)."""
    error = _text_error(value, path)
    if error is None and strings.is_action_identifier_path(path):
        problem = strings.identifier_problem(value)
        if problem is not None:
            return ActionRejectedError(path, f"{problem} is not allowed in an identifier ({strings.IDENTIFIER_RULE})")
    return error


def _text_error(text: str, path: str, *, key: bool = False) -> ActionRejectedError | None:
    if strings.quote_wrapped(text):
        return ActionRejectedError(path, strings.QUOTE_WRAPPED_RULE)
    bad = strings.forbidden_char(text)
    if bad is not None:
        where = "an object key" if key else "a string"
        return ActionRejectedError(
            path, f"character {strings.char_name(bad)} is not allowed in {where} of an action (control characters "
            "other than TAB, LF and CR, and lone surrogates, are refused)",
        )  # fmt: skip
    return None


#: Free-text strings the policies compare as people read them, folded into ``input.context.folded``.
FOLDED_PATHS = (("knowledge", "purpose"),)


def folded_strings(action: JsonObject) -> dict[str, str]:
    """``{"purpose": fold}`` for each :data:`FOLDED_PATHS` string the action holds that folds.

    One that cannot be read as one spelling (kcp_opa.core.textfold) has no fold: a rule that
    compares it then denies (``purpose_not_folded``), and :func:`fold_refusals` says why.
    """
    return {name: fold for name, (fold, _) in _folds(action).items() if fold is not None}


def fold_refusals(action: JsonObject) -> dict[str, str]:
    """``{"purpose": why}`` for each :data:`FOLDED_PATHS` string that cannot be folded."""
    return {name: why for name, (_, why) in _folds(action).items() if why is not None}


def _folds(action: JsonObject) -> dict[str, tuple[str | None, str | None]]:
    found: dict[str, tuple[str | None, str | None]] = {}
    for *parents, name in FOLDED_PATHS:
        node: object = action
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


#: secret_name per distinct key: the same few keys reach every decision.
_secret_name = lru_cache(maxsize=4096)(secret_name)


def _refuse_secret_key(key: str, path: str) -> None:
    """Secret-bearing keys (core/secretkeys.py: case, separators, NFKC, zero-width) are refused."""
    name = _secret_name(key)
    if name is not None:
        shown = key.encode("ascii", "backslashreplace").decode("ascii")
        raise ActionRejectedError(
            f"{path}/{shown}", f"secret-bearing key ({name}) never accepted in an action; pass a reference"
        )


def _schema_message(error: ValidationError) -> str:
    """jsonschema's wording, except where it would echo a whole list back (up to the 1 MiB action)."""
    if error.validator == "required":
        return str(error.message).replace("is a required property", "is required")
    if error.validator == "maxItems" and isinstance(error.instance, list):
        return f"has {len(error.instance)} items; at most {error.validator_value} are allowed"
    if error.validator in ("minLength", "maxLength") and isinstance(error.instance, str):
        bound = "at least {} are required" if error.validator == "minLength" else "at most {} are allowed"
        shown = repr(error.instance) if len(error.instance) <= 60 else repr(error.instance[:57]) + "..."
        return f"{shown} has {len(error.instance)} characters; {bound.format(error.validator_value)}"
    return str(error.message)


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


@cache
def action_schema() -> JsonDict:
    """The action-intent JSON Schema shipped with the package."""
    text = resources.files("kcp_opa.schemas").joinpath("action-intent.schema.json").read_text("utf-8")
    schema: JsonDict = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(action_schema())


@cache
def _fast_validator() -> Callable[[object], object]:
    # fastjsonschema compiles the schema to Python: ~25 us per KYA action where jsonschema's
    # validator takes ~300 us here, and decide() has a ~150 us budget (docs/performance.md).
    return fastjsonschema.compile(action_schema())


def action_hash(action: JsonObject | CheckedAction) -> str:
    """The KYA-CJ-1 hash of the whole action: ``sha256:<hex>`` (a checked action's, as it was checked)."""
    proof = proof_of(action)
    return proof.hash if proof is not None else canonical_hash(action)


def trace_id_of(action: JsonObject) -> str | None:
    """The W3C trace id in ``trace.traceparent``; None when absent or not a valid traceparent."""
    trace = action.get("trace")
    parent = trace.get("traceparent") if isinstance(trace, Mapping) else None
    match = _TRACEPARENT.match(parent) if isinstance(parent, str) else None
    if match is None or match.group(1) == "0" * 32 or match.group(2) == "0" * 16:
        return None
    return match.group(1)
