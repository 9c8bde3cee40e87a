"""Lenient reading of JSON the gate did not type itself: one set of narrowers for every package.

A value from JSON (a ledger entry, an archived input, a bundle's data, a declaration after its
schema check) is an ``object`` until one of these checks it. A wrong type reads as "not there"
(empty, ``None``), never as an exception: a reader that must refuse a malformed document uses
:class:`kcp_opa.core.documents.Fields` instead.
"""

from __future__ import annotations

from collections.abc import Mapping

#: A JSON object as read: keys are strings, values are unchecked.
JsonObject = Mapping[str, object]

#: A document's wire form: a JSON object built to be written (``to_dict``), what ``json.dumps``
#: and the signers take.
JsonDict = dict[str, object]


def mapping(value: object) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def items(value: object) -> list[object]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def objects(value: object) -> list[JsonObject]:
    """The JSON objects in the array ``value``, in order; anything else in it is passed over."""
    return [item for item in items(value) if isinstance(item, Mapping)]


def text(value: object) -> str | None:
    """``value`` if it is a string, else None."""
    return value if isinstance(value, str) else None


def strings(value: object) -> list[str]:
    """The strings in the array ``value``, in order; anything else in it is passed over."""
    return [item for item in items(value) if isinstance(item, str)]


def integer(value: object) -> int | None:
    """``value`` if it is a JSON integer (``true`` is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: object) -> int | float | None:
    """``value`` if it is a JSON number (``true`` is not one), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
