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

from kcp_opa.core import strictjson
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.secretkeys import secret_name

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


def check_action(value: Any) -> None:
    """Raise :class:`ActionRejectedError` unless ``value`` is a well-formed action intent."""
    if not isinstance(value, Mapping):
        raise ActionRejectedError("", f"must be a JSON object, not {_json_type(value)}")
    _check_values(value)
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
        raise ActionRejectedError(path, f"{_schema_message(first.message, first.validator)}{more}") from None


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


def _refuse_secret_key(key: str, path: str) -> None:
    """Secret-bearing keys (core/secretkeys.py: case, separators, NFKC, zero-width) are refused."""
    name = secret_name(key)
    if name is not None:
        shown = key.encode("ascii", "backslashreplace").decode("ascii")
        raise ActionRejectedError(
            f"{path}/{shown}", f"secret-bearing key ({name}) never accepted in an action; pass a reference"
        )


def _schema_message(message: str, validator: Any) -> str:
    if validator == "required":
        return message.replace("is a required property", "is required")
    return message


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
