"""The one strict JSON reader (kcp_opa.core.jsonread.Strict): a field present with the wrong type
is the reading stage's own error, one line naming the field's path, never read as absent; an
absent field takes its default, and so does a null one unless the reader refuses nulls."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kcp_opa.core.errors import BundleError, CompileError
from kcp_opa.core.jsonread import Strict, shown


def _read(raw: object, *, nulls: bool = True) -> Strict:
    return Strict(raw, BundleError, "doc", nulls=nulls)


WRONG: dict[str, tuple[object, Callable[[Strict], object], str]] = {
    "a part a list": ({"p": [1]}, lambda r: r.part("p"), "doc/p is not an object: [1]"),
    "a list an object": ({"l": {"a": 1}}, lambda r: r.items("l"), 'doc/l is not a list: {"a": 1}'),
    "a list of objects holding a string": ({"l": [{}, "x"]}, lambda r: r.objects("l"), "is not a list of objects"),
    "strings a string": ({"s": "refund"}, lambda r: r.strings("s"), 'doc/s is not a list of strings: "refund"'),
    "strings holding a number": ({"s": ["a", 7]}, lambda r: r.strings("s"), "is not a list of strings"),
    "text a number": ({"t": 5}, lambda r: r.text("t", "d"), "doc/t is not a string: 5"),
    "integer a string": ({"i": "60"}, lambda r: r.integer("i", 1), 'doc/i is not an integer: "60"'),
    "integer true": ({"i": True}, lambda r: r.integer("i", 1), "doc/i is not an integer: true"),
    "integer a float": ({"i": 60.5}, lambda r: r.integer("i", 1), "doc/i is not an integer: 60.5"),
    "text map holding a number": ({"m": {"a": 7}}, lambda r: r.text_map("m"), "doc/m is not an object of strings"),
    "integer map holding a string": ({"m": {"a": "1"}}, lambda r: r.integer_map("m"), "is not an object of integers"),
    "a rule's field": ({"rules": [{}, {"id": 3}]}, lambda r: r.parts("rules")[1].text("id"), "doc/rules/1/id is not"),
    "a required field absent": ({}, lambda r: r.text("id"), "doc/id is not a string: it is missing"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_field_of_the_wrong_type_is_the_stage_s_error_naming_its_path_never_read_as_absent(case: str) -> None:
    raw, read, message = WRONG[case]
    with pytest.raises(BundleError) as caught:
        read(_read(raw))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_error_is_the_one_the_reader_was_given() -> None:
    with pytest.raises(CompileError, match=r"^x is not a list: 1 \(cannot plan\)$"):
        Strict({"x": 1}, lambda message: CompileError(f"{message} (cannot plan)")).items("x")
    for raw in ([], "x", {1: "a"}, {1: "a", "b": 2}):
        with pytest.raises(CompileError, match=r"^the document is not an object"):
            Strict(raw, CompileError)


def test_absent_fields_take_their_defaults() -> None:
    read = _read({})
    assert (read.items("l"), read.objects("l"), read.strings("s"), read.parts("r")) == ([], [], [], [])
    assert (read.text("t", "d"), read.integer("i", 3), read.text_map("m"), read.integer_map("m")) == ("d", 3, {}, {})
    assert (read.part("p").raw, read.part("p").where, read.get("g", "dflt")) == ({}, "doc/p", "dflt")
    assert read.strings("s", ("a",)) == ["a"]


def test_a_null_is_absent_unless_the_reader_refuses_nulls() -> None:
    nulled = {"l": None, "p": None, "t": None, "i": None}
    read = _read(nulled)
    assert (read.items("l"), read.part("p").raw, read.text("t", "d"), read.integer("i", 3)) == ([], {}, "d", 3)
    assert _read(None).raw == {}
    strict = _read(nulled, nulls=False)
    for field, call in (("l", strict.items), ("p", strict.part), ("t", strict.text), ("i", strict.integer)):
        with pytest.raises(BundleError, match=f"^doc/{field} is not .*: null$"):
            call(field)
    with pytest.raises(BundleError, match=r"^doc is not an object: null$"):
        _read(None, nulls=False)


def test_present_fields_read_as_they_are() -> None:
    raw = {"p": {"q": 1}, "l": [1, "a"], "o": [{"a": 1}], "s": ["x", "y"], "t": "v", "i": 0, "m": {"a": "b"}}
    read = _read(raw)
    assert (read.part("p").raw, read.items("l"), read.objects("o"), read.strings("s")) == (
        {"q": 1},
        [1, "a"],
        [{"a": 1}],
        ["x", "y"],
    )
    assert (read.text("t"), read.integer("i"), read.text_map("m"), read.parts("o")[0].where) == (
        "v",
        0,
        raw["m"],
        "doc/o/0",
    )


def test_a_quoted_value_is_cut_to_one_short_line() -> None:
    assert shown({"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'
    assert shown("x" * 200) == '"' + "x" * 76 + "..." and len(shown("x" * 200)) == 80
