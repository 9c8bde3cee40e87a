"""regopy terms in and out, through rego-cpp's public C API, byte for byte.

In: measured on the KYA action (docs/performance.md), ``set_input_term(json)`` parses the JSON
with the full Rego parser (~360 us) and keeps ``\\u`` escapes as text (engine-findings item 2);
``regopy.Input(value)`` wraps each C call in Python checks (~210 us). Driving the same C calls
directly is ~100 us and hands rego-cpp each string's UTF-8 bytes unescaped. The C API takes a
NUL-terminated string, so a NUL would cut the string there (engine-findings item 23): the action
contract (:func:`kcp_opa.decide.action.check_strings`) refuses NUL before anything gets here,
and :func:`rego_input` refuses it too rather than truncate. rego-cpp also reads an input string
wrapped in double quotes (``'"x"'``) as the string inside them (``x``, ``count`` 1): refused the
same way. rego-cpp iterates an object in the order its keys were pushed, OPA in key order
(engine-findings item 35): keys are pushed sorted by code point, which is OPA's order (UTF-8
byte order), so ``[v | some v in input.o]`` and the like read alike whatever order the caller
wrote.

Out: regopy serialises its output without escaping strings (a ``"``, ``\\`` or control
character yields invalid or, worse, different JSON; engine-findings item 23), so results are
never read through ``regopy.Output`` (which ``json.loads`` that text): :func:`read_value` walks
the output's node tree and reads each scalar's bytes. rego-cpp holds a computed string (the
result of ``concat``, ``upper``, ...) as its quoted token without escapes and an input or
literal string bare; the reader drops the quotes of the first kind, exactly once. Sets come back in OPA's order
(:func:`opa_sort_key`), so a document with a set reads the same from both engines.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from kcp_opa.core.frozen import FrozenArray, FrozenObject
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.decide.checked import CheckedRoot

if TYPE_CHECKING:
    from regopy import Input

_OK = 0
# rego-cpp node kinds (regopy.rego_shared.NodeKind), read through the C API directly.
_TERM, _SCALAR, _ARRAY, _SET, _OBJECT, _ITEM = 1002, 1003, 1004, 1005, 1006, 1007
_INT, _FLOAT, _STRING, _TRUE, _FALSE, _NULL = 1008, 1009, 1010, 1011, 1012, 1013
_UNDEFINED, _TERMS, _RESULTS = 1014, 1015, 1017


def rego_input(value: object) -> Input:
    """A ``regopy.Input`` holding ``value`` (dicts, lists, str, int, bool, None)."""
    from regopy import Input
    from regopy import rego_shared as native

    lib = native.rego
    push_str, push_int, push_bool, push_null = (
        lib.regoInputString,
        lib.regoInputInt,
        lib.regoInputBoolean,
        lib.regoInputNull,
    )
    close_item, close_object, close_array = lib.regoInputObjectItem, lib.regoInputObject, lib.regoInputArray
    handle = native.rego_new_input()
    status = _OK

    def text(item: str) -> bytes:
        raw = item.encode("utf-8")  # a lone surrogate raises here: never a silently changed string
        if b"\x00" in raw:
            raise ValueError("a string holding NUL cannot reach rego-cpp intact (its C API stops at NUL)")
        if len(raw) > 1 and raw[0] == raw[-1] == 0x22:
            raise ValueError("a string wrapped in double quotes reads as the string inside them in rego-cpp")
        return raw

    def push(item: Any) -> None:
        nonlocal status
        kind = type(item)
        if kind is str:
            status |= push_str(handle, text(item))
        elif kind is dict or kind is FrozenObject or kind is CheckedRoot:
            for key in sorted(item):  # OPA's key order, which regopy iterates in (see the docstring)
                status |= push_str(handle, text(key))
                push(item[key])
                status |= close_item(handle)
            status |= close_object(handle, len(item))
        elif kind is list or kind is tuple or kind is FrozenArray:
            for member in item:
                push(member)
            status |= close_array(handle, len(item))
        elif kind is bool:
            status |= push_bool(handle, item)
        elif kind is int:
            status |= push_int(handle, item)
        elif item is None:
            status |= push_null(handle)
        else:
            raise TypeError(f"{kind.__name__} cannot be a Rego input value")

    term = Input.__new__(Input)
    term._impl = handle  # Input.__del__ frees it, also when push() fails half-way
    push(value)
    if status != _OK:
        raise ValueError(f"rego-cpp refused the input (status {status})")
    return term


class _Native:
    """The handful of rego-cpp node calls, bound once."""

    def __init__(self) -> None:
        from regopy import rego_shared as native

        lib = native.rego
        self.kind = lib.regoNodeType
        self.size = lib.regoNodeSize
        self.get = lib.regoNodeGet
        self.value_size = lib.regoNodeValueSize
        self.value = lib.regoNodeValue


_native: _Native | None = None


def _bytes_of(lib: _Native, node: int) -> bytes:
    size = lib.value_size(node)
    buffer = ctypes.create_string_buffer(size)
    if lib.value(node, buffer, size) != _OK:
        raise ValueError("rego-cpp could not give a node's value")
    raw = buffer.raw[:size]
    return raw[:-1] if raw.endswith(b"\x00") else raw  # the C terminator only; never cut at a NUL inside


def _lib() -> _Native:
    global _native
    if _native is None:
        _native = _Native()
    return _native


def read_results(node: int) -> list[list[object]]:
    """The expressions of each result of an output node (``Results`` > ``Result`` > ``Terms``)."""
    return [expressions for expressions, _ in read_query_results(node)]


def read_query_results(node: int) -> list[tuple[list[object], JsonDict]]:
    """Each result's expressions and bindings; ``[]`` when the output is undefined."""
    lib = _lib()
    kind = lib.kind(node)
    if kind == _UNDEFINED:
        return []
    if kind != _RESULTS:
        raise ValueError(f"rego-cpp output of kind {kind} where results were expected")
    found = []
    for index in range(lib.size(node)):
        result = lib.get(node, index)
        terms = lib.get(result, 0) if lib.size(result) else None
        if terms is None or lib.kind(terms) != _TERMS:
            raise ValueError("a rego-cpp result without its terms")
        expressions = [read_value(lib.get(terms, position)) for position in range(lib.size(terms))]
        bindings: JsonDict = {}
        if lib.size(result) > 1:
            for position in range(lib.size(bound := lib.get(result, 1))):
                binding = lib.get(bound, position)
                name = _bytes_of(lib, lib.get(binding, 0)).decode("utf-8")
                bindings[name] = read_value(lib.get(binding, 1))
        found.append((expressions, bindings))
    return found


def read_value(node: int) -> object:
    """The JSON value of a rego-cpp output node (a term, scalar, array, set or object)."""
    lib = _lib()

    def read(item: int) -> object:
        kind = lib.kind(item)
        while kind in (_TERM, _SCALAR):
            item = lib.get(item, 0)
            kind = lib.kind(item)
        if kind == _STRING:
            raw = _bytes_of(lib, item)
            # A computed string (concat, upper, ...) is held as its quoted token, unescaped;
            # an input or literal string bare. Input never starts and ends with '"' (contract).
            if len(raw) > 1 and raw[0] == raw[-1] == 0x22:
                raw = raw[1:-1]
            return raw.decode("utf-8")
        if kind == _INT:
            return int(_bytes_of(lib, item))
        if kind == _TRUE:
            return True
        if kind == _FALSE:
            return False
        if kind == _NULL:
            return None
        if kind == _FLOAT:
            number = float(_bytes_of(lib, item))
            return int(number) if number.is_integer() else number
        if kind == _ARRAY:
            return [read(lib.get(item, index)) for index in range(lib.size(item))]
        if kind == _SET:
            return sorted((read(lib.get(item, index)) for index in range(lib.size(item))), key=opa_sort_key)
        if kind == _OBJECT:
            members: JsonDict = {}
            for index in range(lib.size(item)):
                pair = lib.get(item, index)
                if lib.kind(pair) != _ITEM:
                    raise ValueError(f"rego-cpp object member of kind {lib.kind(pair)}")
                key = read(lib.get(pair, 0))
                if not isinstance(key, str):
                    raise ValueError("an object key that is not a string has no JSON form")
                members[key] = read(lib.get(pair, 1))
            return members
        raise ValueError(f"rego-cpp node of kind {kind} is not a JSON value")

    return read(node)


def opa_sort_key(value: object) -> tuple[object, ...]:
    """OPA's total order on JSON values (``ast.Compare``): null < bool < number < string < array < object.

    Strings compare by their UTF-8 bytes, as Go does; arrays element by element, then by length;
    objects by their sorted keys and values. Sets in output are JSON arrays sorted this way.
    """
    if value is None:
        return (0,)
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, int | float):
        return (2, value)
    if isinstance(value, str):
        return (3, value.encode("utf-8"))
    if isinstance(value, list):
        return (6, [opa_sort_key(item) for item in value])
    if isinstance(value, dict):
        return (7, [(key.encode("utf-8"), opa_sort_key(value[key])) for key in sorted(value, key=str.encode)])
    raise TypeError(f"{type(value).__name__} is not a JSON value")
