"""The one JSON reader for everything the project reads: actions, evidence, decisions, receipts,
keyrings, archived inputs and ledger lines.

Python's ``json`` takes the last of two equal keys (a tenant written twice is one tenant for us
and the other for a reader that keeps the first), turns ``NaN``/``Infinity`` into floats, parses
a 5,000-digit integer into a ``ValueError`` outside ``JSONDecodeError`` and keeps lone UTF-16
surrogates that later fail to encode. Each of those is refused here with a
:class:`StrictJSONError`, a ``JSONDecodeError`` so every caller's existing handler words it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NoReturn

#: Longest integer literal accepted (digits, sign excluded): far beyond 64 bits (19 digits),
#: far below the 4,300 digits where Python's int() refuses with an unrelated ValueError.
MAX_INT_DIGITS = 64

TOO_DEEP = "nested too deeply"
_SURROGATE = re.compile("[\ud800-\udfff]")


class StrictJSONError(json.JSONDecodeError):
    """Valid JSON syntax Python would accept, refused: duplicate key, non-finite number..."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "", 0)
        self.args = (message,)

    def __str__(self) -> str:
        return self.msg


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"duplicate key {key!r} in one object")
        result[key] = value
    return result


def _constant(name: str) -> NoReturn:
    raise StrictJSONError(f"{name} is not a JSON number")


def _integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise StrictJSONError(f"an integer of {digits} digits is over the {MAX_INT_DIGITS}-digit limit")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_INT_DIGITS + 16:
        raise StrictJSONError(f"a number literal of {len(text)} characters is over the limit")
    value = float(text)
    if not math.isfinite(value):  # 1e309: Python reads infinity, which no later step can handle
        raise StrictJSONError(f"{text} is out of range for a number")
    return value


def loads(text: str | bytes) -> Any:
    """Parse ``text`` strictly; raises :class:`StrictJSONError` (a ``json.JSONDecodeError``)."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not UTF-8: {exc}") from None
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_integer, parse_float=_float
        )
    except RecursionError:
        raise StrictJSONError(TOO_DEEP) from None
    if _has_surrogate(value):
        raise StrictJSONError("a lone UTF-16 surrogate (\\ud800-\\udfff) is not a character")
    return value


def _has_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
