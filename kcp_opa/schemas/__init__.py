"""JSON Schemas shipped with kcp-opa, loaded once and compiled into validators."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

MANIFEST = "kcp-manifest.schema.json"
MATRIX = "delegation-matrix.schema.json"


@cache
def schema(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(schema(name))
