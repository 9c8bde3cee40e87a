"""JSON Schemas shipped with kcp-opa, loaded once and compiled into validators."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, validators

#: JSON Schema counts 5000.0 as an integer; kcp-opa does not. Money is integer minor units and
#: depths and counts are whole numbers: a float there is a slip (5e5, 5000.00) that must not
#: compile as 5000.0. Booleans are not integers either.
StrictValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
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
    document = schema(name)
    strict: Draft202012Validator = StrictValidator(_inline(document, document.get("$defs", {})))
    return strict


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline(value, defs) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node
