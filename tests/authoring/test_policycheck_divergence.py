"""`kcp-opa check` warns on each engine-divergent construct, with the rewrite (issue 13)."""

from __future__ import annotations

import json

from kcp_opa.authoring.policycheck import _argument_index, _divergent, check_modules

_POLICY = """package kcp.demo

import rego.v1

purpose_low := lower(input.action.knowledge.purpose)

risk := upper(input.action.runtime.risk_level)

names := sort([x | some x in input.action.attributes.names])

fields := sort([f | some f in input.action.knowledge.fields_read]) # kcp-opa: sorted identifiers

quoted := json.marshal(input.action.target)

msg := sprintf("%v", [input.action.scenario])

escaped := "a\\\\"b"

constants := sort(["b", "a"])

largest := max(input.action.amounts)

smallest := min([input.action.retries, 1]) # kcp-opa: ordered alike (a count against 1)

joined := concat(", ", {x | some x in input.action.tags})

joined_sorted := concat(", ", sort({x | some x in input.action.tags})) # kcp-opa: sorted identifiers
"""


def _codes(source: str) -> list[tuple[int, str]]:
    return [
        (number, finding.code)
        for number, line in enumerate(source.splitlines(), start=1)
        for finding in _divergent("demo.rego", number, line.split("#", 1)[0], line, "")
    ]


def test_each_divergent_construct_is_flagged_with_its_rewrite() -> None:
    assert _codes(_POLICY) == [
        (5, "divergent_builtin"),
        (7, "divergent_builtin"),
        (9, "divergent_sort"),
        (13, "divergent_builtin"),
        (15, "divergent_builtin"),
        (17, "escaped_literal"),
        (21, "divergent_order"),
        (25, "divergent_order"),
    ]
    messages = {f.message for n, line in enumerate(_POLICY.splitlines(), 1) for f in _divergent("d", n, line, line, "")}
    assert any("input.context.folded" in m for m in messages)
    assert any("sorted identifiers" in m for m in messages)
    assert any("concat" in m for m in messages)
    assert any("every y in xs" in m and "ordered alike" in m for m in messages)
    assert any("concat(sep, sort(s))" in m for m in messages)


_SET_JOINS = """package kcp.demo

import rego.v1

tags := {x | some x in input.action.tags}

codes contains c if some c in input.action.codes

pairs := {k: v | some k, v in input.action.pairs}

a := concat(", ", tags)

b := concat("#", data.kcp.demo.codes)

c := concat(`,`, {x | some x in input.action.tags})

d := concat(", ", sort(tags)) # kcp-opa: sorted identifiers

e := concat(", ", input.action.names)

f := concat(", ", pairs)
"""


def test_a_join_of_a_set_rule_is_flagged_however_the_separator_is_written() -> None:
    findings = check_modules({"demo.rego": _SET_JOINS})
    assert sorted(f.line for f in findings if f.code == "divergent_order") == [11, 13, 15]


def test_check_reports_them() -> None:
    findings = check_modules({"demo.rego": _POLICY})
    codes = {f.code for f in findings if f.file == "demo.rego"}
    assert {"divergent_builtin", "divergent_sort", "divergent_order", "escaped_literal"} <= codes


def test_tests_may_use_them() -> None:
    findings = check_modules({"demo_test.rego": _POLICY.replace("package kcp.demo", "package kcp.demo_test")})
    divergent = {"divergent_builtin", "divergent_sort", "divergent_order", "escaped_literal"}
    assert not {f.code for f in findings} & divergent


_ARGUMENT_INDEX = """package kcp.demo

import rego.v1

head_value(k) := [c | some c in input.x[k]]

in_body(k) := r if {
	r := [c | some c in input.x[k]]
}

bound_first(k) := r if {
	key := k
	r := [c | some c in input.x[key]]
}

compared(depth) := [d | some d in [0, 1, 2]; d < depth]

out := head_value(1)
"""


def test_a_comprehension_indexing_by_a_function_argument_is_flagged() -> None:
    """engine-findings item 30: regopy ignores the argument, so the function reads every key."""
    findings = [f for f in check_modules({"demo.rego": _ARGUMENT_INDEX}) if f.code == "argument_index_in_comprehension"]
    assert [(f.line, f.severity) for f in findings] == [(5, "warning"), (7, "warning")]
    assert "key := k" in findings[0].message


_ARGUMENT_INDEX_HIDDEN = """package kcp.demo

import rego.v1

over_lines(k) := [c |
	some c in input.x[k]
]

in_else(k) := r if {
	k == 0
	r := []
} else := r if {
	r := [c | some c in input.x[k]]
}

capital(K) := [c | some c in input.x[K]]

after_a_hash_in_a_string(k) := [c | some c in input.x[k]; c != "#"]

not_an_index(k) := [c | some c in input.y; c != "x[k]"]
"""


def test_the_argument_index_is_found_however_the_function_is_written() -> None:
    lines = _ARGUMENT_INDEX_HIDDEN.splitlines()
    flagged = [
        number
        for number, line in enumerate(lines, start=1)
        if _argument_index("demo.rego", number, line.split("#", 1)[0], lines)
    ]
    assert flagged == [5, 9, 16, 18]


def test_regopy_still_ignores_the_argument_so_the_check_is_needed() -> None:
    """The hazard itself, on both engines: if a regopy release fixes it, this test says so."""
    import json

    import regopy
    from opa_bindings import OpaEngine

    document = {"x": [["a", "b"], ["c"], ["d", "e"]]}
    interpreter = regopy.Interpreter()
    interpreter.add_module("demo.rego", _ARGUMENT_INDEX)
    interpreter.set_input_term(json.dumps(document))
    on_regopy = json.loads(str(interpreter.query("x := [data.kcp.demo.out, data.kcp.demo.bound_first(1)]")))
    opa = OpaEngine()
    try:
        opa.add_policy("demo.rego", _ARGUMENT_INDEX)
        opa.add_data({})
        assert opa.eval_document("kcp.demo.out", document) == ["c"]
        assert opa.eval_document("kcp.demo", document)["out"] == ["c"]
    finally:
        opa.close()
    assert on_regopy["bindings"]["x"] == [["a", "b", "c", "d", "e"], ["c"]]


_ORDER = """package kcp.demo

import rego.v1

largest := max([9, 10])

smallest := min([-1, -2])

ordered := sort([10, 9])

mixed := sort(["a", 1])

built := concat(",", {x | some x in ["b", "a", "c"]})

compared := [x | some x in [9, 10]; every y in [9, 10] { y <= x }]
"""


def test_regopy_still_orders_numbers_by_text_and_sets_as_built() -> None:
    """engine-findings items 34 and 35 on both engines: if a regopy release fixes them, this says so.

    Comparison operators stay numeric on both, so the rewrite the check offers agrees."""
    import regopy
    from opa_bindings import OpaEngine

    rules = ["largest", "smallest", "ordered", "mixed", "built", "compared"]
    interpreter = regopy.Interpreter()
    interpreter.add_module("demo.rego", _ORDER)
    query = "x := [" + ", ".join(f"data.kcp.demo.{r}" for r in rules) + "]"
    on_regopy = dict(zip(rules, json.loads(str(interpreter.query(query)))["bindings"]["x"], strict=True))
    opa = OpaEngine()
    try:
        opa.add_policy("demo.rego", _ORDER)
        opa.add_data({})
        on_opa = {r: opa.eval_document(f"kcp.demo.{r}", {}) for r in rules}
    finally:
        opa.close()
    assert on_opa == {
        "largest": 10, "smallest": -2, "ordered": [9, 10], "mixed": [1, "a"], "built": "a,b,c", "compared": [10],
    }  # fmt: skip
    assert on_regopy == {
        "largest": 9, "smallest": -1, "ordered": [10, 9], "mixed": ["a", 1], "built": "b,a,c", "compared": [10],
    }  # fmt: skip
