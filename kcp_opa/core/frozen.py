"""Read-only JSON containers: a checked value nobody can change after its check.

A :class:`FrozenObject` is a ``dict`` and a :class:`FrozenArray` a ``list`` (so ``json``, the
schema validator and every ``isinstance`` read them as JSON), but every method that would change
one raises ``TypeError``. They are filled once, by the walk that checks them, through the base
classes' own methods. A copy (``copy.copy``, ``copy.deepcopy``, pickling) is plain, mutable
data: changing it changes nothing that was checked, and it is checked again wherever it is used.
"""

from __future__ import annotations

from typing import NoReturn

_READ_ONLY = "a checked value is read-only: copy it (copy.deepcopy) to change the copy"


def _refuse(*_: object, **__: object) -> NoReturn:
    raise TypeError(_READ_ONLY)


class FrozenObject(dict[str, object]):
    """A JSON object that cannot be changed (its values are frozen too)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, object]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, object]) -> dict[str, object]:
        return {key: thawed(item) for key, item in self.items()}

    def __reduce__(self) -> tuple[object, ...]:
        return (dict, (dict(self),))


class FrozenArray(list[object]):
    """A JSON array that cannot be changed (its members are frozen too)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[object]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, object]) -> list[object]:
        return [thawed(item) for item in self]

    def __reduce__(self) -> tuple[object, ...]:
        return (list, (list(self),))


def thawed(value: object) -> object:
    """A plain, mutable deep copy of a JSON value (frozen containers become dicts and lists)."""
    if isinstance(value, dict):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [thawed(item) for item in value]
    return value


def frozen_copy(value: object) -> object:
    """A deep read-only copy of a JSON value (objects and arrays frozen, scalars as they are).

    Iterative, so no nesting depth breaks it; a value that is no object or array is returned as
    it is. The copy is new: nobody else holds it, so nothing can change it later.
    """
    top = _shell(value)
    stack: list[tuple[object, object]] = [(value, top)] if top is not value else []
    while stack:
        source, into = stack.pop()
        if isinstance(into, FrozenObject) and isinstance(source, dict):
            for key, item in source.items():
                child = _shell(item)
                put(into, key, child)
                if child is not item:
                    stack.append((item, child))
        elif isinstance(into, FrozenArray) and isinstance(source, list | tuple):
            for item in source:
                child = _shell(item)
                add(into, child)
                if child is not item:
                    stack.append((item, child))
    return top


def _shell(value: object) -> object:
    if isinstance(value, dict):
        return FrozenObject()
    if isinstance(value, list | tuple):
        return FrozenArray()
    return value


def put(target: FrozenObject, key: str, value: object) -> None:
    """Fill ``target`` while it is being built (the one writer: the walk that checks it)."""
    dict.__setitem__(target, key, value)


def add(target: FrozenArray, value: object) -> None:
    """Append to ``target`` while it is being built (the one writer: the walk that checks it)."""
    list.append(target, value)
