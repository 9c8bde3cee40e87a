"""Build regopy input terms fast, through rego-cpp's public C input API.

Measured on the KYA action (docs/performance.md): ``set_input_term(json)`` parses the JSON with
the full Rego parser (~360 us), ``regopy.Input(value)`` wraps each C call in Python checks
(~210 us); driving the same C calls directly is ~100 us. The result is a regular
``regopy.Input`` (it owns and frees the term). Only JSON values are accepted; the action has
already refused floats and integers beyond 64 bits.
"""

from __future__ import annotations

from typing import Any

_OK = 0


def rego_input(value: Any) -> Any:
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

    def push(item: Any) -> None:
        nonlocal status
        kind = type(item)
        if kind is str:
            status |= push_str(handle, item.encode("utf-8"))
        elif kind is dict:
            for key, member in item.items():
                status |= push_str(handle, key.encode("utf-8"))
                push(member)
                status |= close_item(handle)
            status |= close_object(handle, len(item))
        elif kind is list or kind is tuple:
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
