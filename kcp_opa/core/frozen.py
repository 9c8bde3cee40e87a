"""Read-only JSON containers: a checked value nobody can change after its check.

A :class:`FrozenObject` is a ``dict`` and a :class:`FrozenArray` a ``list`` (so ``json``, the
schema validator and every ``isinstance`` read them as JSON), but every method that would change
one raises ``TypeError``. They are filled once, by the walk that checks them, through the base
classes' own methods. A copy (``copy.copy``, ``copy.deepcopy``, pickling) is plain, mutable
data: changing it changes nothing that was checked, and it is checked again wherever it is used.
"""

from __future__ import annotations

from typing import Any, NoReturn

_READ_ONLY = "a checked value is read-only: copy it (copy.deepcopy) to change the copy"


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise TypeError(_READ_ONLY)


class FrozenObject(dict[str, Any]):
    """A JSON object that cannot be changed (its values are frozen too)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenArray(list[Any]):
    """A JSON array that cannot be changed (its members are frozen too)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def thawed(value: Any) -> Any:
    """A plain, mutable deep copy of a JSON value (frozen containers become dicts and lists)."""
    if isinstance(value, dict):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [thawed(item) for item in value]
    return value


def frozen_copy(value: Any) -> Any:
    """A deep read-only copy of a JSON value (objects and arrays frozen, scalars as they are).

    Iterative, so no nesting depth breaks it; a value that is no object or array is returned as
    it is. The copy is new: nobody else holds it, so nothing can change it later.
    """
    top = _shell(value)
    stack: list[tuple[Any, Any]] = [(value, top)] if top is not value else []
    while stack:
        source, into = stack.pop()
        if isinstance(into, FrozenObject):
            for key, item in source.items():
                child = _shell(item)
                put(into, key, child)
                if child is not item:
                    stack.append((item, child))
        else:
            for item in source:
                child = _shell(item)
                add(into, child)
                if child is not item:
                    stack.append((item, child))
    return top


def _shell(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenObject()
    if isinstance(value, list | tuple):
        return FrozenArray()
    return value


def put(target: FrozenObject, key: str, value: Any) -> None:
    """Fill ``target`` while it is being built (the one writer: the walk that checks it)."""
    dict.__setitem__(target, key, value)


def add(target: FrozenArray, value: Any) -> None:
    """Append to ``target`` while it is being built (the one writer: the walk that checks it)."""
    list.append(target, value)
