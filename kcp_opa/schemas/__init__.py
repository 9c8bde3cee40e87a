"""JSON Schemas shipped with kcp-opa, loaded once and compiled into validators."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError


@cache
def ecma_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` as JSON Schema (ECMA-262) reads it. Python's ``$`` also matches before a final
    newline, so ``"a\\n"`` passed ``^[a-z]+$`` in jsonschema: a declaration id ending in a line
    break got through, and regopy orders it unlike OPA. ``$`` outside a class becomes ``\\Z``."""
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        index += 1
    return re.compile("".join(out))


def _pattern(_validator: object, pattern: str, instance: object, _schema: object) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not ecma_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: JSON Schema counts 5000.0 as an integer; kcp-opa does not. Money is integer minor units and
#: depths and counts are whole numbers: a float there is a slip (5e5, 5000.00) that must not
#: compile as 5000.0. Booleans are not integers either. Patterns read as ECMA-262 reads them.
StrictValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, instance: isinstance(instance, int) and not isinstance(instance, bool)
    ),
)

MANIFEST = "kcp-manifest.schema.json"
MATRIX = "delegation-matrix.schema.json"
TRUST = "trust-registry.schema.json"
EXCEPTIONS = "exceptions.schema.json"


@cache
def schema(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator over the schema with local ``$ref``s inlined: reference resolution was half
    of jsonschema's time on large manifests, and these schemas are not recursive."""
    strict: Draft202012Validator = StrictValidator(_inlined(name))
    return strict


@cache
def fast_validator(name: str) -> Callable[[object], None]:
    """The same schema compiled to Python by fastjsonschema (~12x faster on a large manifest).

    Only its acceptance is used: a document it passes is valid, and one it refuses goes to
    :func:`validator`, whose verdict and wording stand (tests/declare/test_schema_fast_path.py
    checks that it never passes what the strict validator refuses).
    """
    compiled: Callable[[object], object] = fastjsonschema.compile(_inlined(name))

    def check(data: object) -> None:
        # fastjsonschema takes 5000.0 for an integer; StrictValidator does not. A document with
        # an integral float anywhere is left to the strict validator.
        if _integral_float(data):
            raise fastjsonschema.JsonSchemaValueException("an integral float: for the strict validator")
        compiled(data)

    return check


def _integral_float(node: object) -> bool:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and item.is_integer():
            return True
    return False


@cache
def _inlined(name: str) -> dict[str, object]:
    document = schema(name)
    inlined: dict[str, object] = _inline(document, document.get("$defs", {}))
    return inlined


def _inline(node: object, defs: Mapping[str, object]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline(value, defs) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node
