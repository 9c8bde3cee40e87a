"""Reading JSON the gate did not type itself: lenient narrowers and one strict reader.

A value from JSON (a ledger entry, an archived input, a bundle's data, a declaration after its
schema check) is an ``object`` until one of these checks it. The narrowers read a wrong type as
"not there" (empty, ``None``), never as an exception. A reader that must refuse a malformed part
uses :class:`Strict` (raising its own stage's error), or, for a signed document with a fixed
set of fields, :class:`kcp_opa.core.documents.Fields`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

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


def shown(value: object, limit: int = 80) -> str:
    """``value`` as JSON cut to ``limit`` characters: what an error message quotes of bad input."""
    try:
        text = json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types (as YAML may give), a cycle
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Strict:
    """A JSON object read strictly, field by field, for a reader that must refuse a malformed one.

    A field present with the wrong type is ``error(message)``, the reading stage's own error
    (a CompileError, a BundleError, a refused receipt...), never read as absent: read as absent,
    a malformed list of budgets or required controls would count or require nothing. An absent
    field (and a null one, unless ``nulls`` is False) takes the default given, when one is. The
    message names the field by its path from ``where``: ``budgets/0/id is not a string: 7``.
    """

    def __init__(self, raw: object, error: Callable[[str], Exception], where: str = "", *, nulls: bool = True) -> None:
        self.error, self.where, self.nulls = error, where, nulls
        raw = {} if raw is None and nulls else raw
        if not isinstance(raw, Mapping) or not all(isinstance(key, str) for key in raw):
            raise error(f"{where or 'the document'} is not an object: {shown(raw)}")
        self.raw: JsonObject = raw

    def path(self, name: str) -> str:
        return f"{self.where}/{name}" if self.where else name

    def wrong(self, name: str, value: object, expected: str) -> Exception:
        found = shown(value) if name in self.raw else "it is missing"
        return self.error(f"{self.path(name)} is not {expected}: {found}")

    def get(self, name: str, default: object = None) -> object:
        """The field's value as it is, or ``default`` when absent (or null, with ``nulls``)."""
        value = self.raw.get(name)
        return default if name not in self.raw or (value is None and self.nulls) else value

    def part(self, name: str) -> Strict:
        """The object ``name`` (empty when absent), read as strictly."""
        return Strict(self.get(name, {}), self.error, self.path(name), nulls=self.nulls)

    def parts(self, name: str) -> list[Strict]:
        """The objects in the list ``name`` (none when absent), each read as strictly."""
        return [
            Strict(item, self.error, f"{self.path(name)}/{at}", nulls=self.nulls)
            for at, item in enumerate(self.objects(name))
        ]

    def items(self, name: str) -> list[object]:
        """The list ``name``; empty when absent."""
        value = self.get(name, [])
        if not isinstance(value, list):
            raise self.wrong(name, value, "a list")
        return value

    def objects(self, name: str) -> list[JsonObject]:
        """The list of objects ``name``; empty when absent."""
        value = self.items(name)
        if not all(isinstance(item, Mapping) for item in value):
            raise self.wrong(name, value, "a list of objects")
        return [item for item in value if isinstance(item, Mapping)]

    def strings(self, name: str, default: Sequence[str] | None = ()) -> list[str]:
        """The list of strings ``name``; ``default`` when absent (None: absent is refused too)."""
        value = self.get(name, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise self.wrong(name, value, "a list of strings")
        return [item for item in value if isinstance(item, str)]

    def text(self, name: str, default: str | None = None) -> str:
        """The string ``name``; ``default`` when absent (None: absent is refused too)."""
        value = self.get(name, default)
        if not isinstance(value, str):
            raise self.wrong(name, value, "a string")
        return value

    def integer(self, name: str, default: int | None = None) -> int:
        """The integer ``name`` (``true`` is not one); ``default`` when absent (None: refused)."""
        value = self.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.wrong(name, value, "an integer")
        return value

    def text_map(self, name: str) -> dict[str, str]:
        """The object ``name`` whose every value is a string; empty when absent."""
        part = self.part(name).raw
        if not all(isinstance(value, str) for value in part.values()):
            raise self.wrong(name, part, "an object of strings")
        return {key: value for key, value in part.items() if isinstance(value, str)}

    def integer_map(self, name: str) -> dict[str, int]:
        """The object ``name`` whose every value is an integer; empty when absent."""
        part = self.part(name).raw
        if not all(isinstance(value, int) and not isinstance(value, bool) for value in part.values()):
            raise self.wrong(name, part, "an object of integers")
        return {key: value for key, value in part.items() if isinstance(value, int)}
