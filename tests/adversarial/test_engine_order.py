"""Engine order: an agent's choice of key order buys no second answer (engine-findings item 35).

regopy iterates an object in the order its keys were pushed, OPA in key order. An agent writes
the keys of every object it sends in any order it likes, so a rule iterating an input object (a
first key, a joined list) could answer one way on regopy and another on OPA, the auditors'
engine. The gate pushes keys sorted by code point, OPA's order.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcp_opa.decide.engine import query_entrypoint

_ITERATE = """package order

import rego.v1

value := {
	"values": [v | some v in input.o],
	"keys": [k | input.o[k]],
	"joined": concat(",", [k | input.o[k]]),
	"first": [k | input.o[k]][0],
}
"""


_KEY_CHARACTERS = "abzAZ_é日-0 \t\U0001f600\uffff"


@given(keys=st.lists(st.text(alphabet=_KEY_CHARACTERS, max_size=4), min_size=1, max_size=8, unique=True))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_an_object_iterates_alike_whatever_order_the_caller_wrote_its_keys(keys: list[str]) -> None:
    """An agent writes an object's keys in the order it likes; regopy iterates in that order, OPA
    in key order (engine-findings item 35). The input is pushed in OPA's order, so a rule that
    iterates an input object (a first key, a joined list) gives one answer on both engines."""
    from opa_bindings import OpaEngine
    from regopy import Interpreter

    interpreter = Interpreter()
    interpreter.add_module("order.rego", _ITERATE)
    built = interpreter.build(None, ["order/value"])
    assert built.ok(), str(built.node())
    opa = OpaEngine()
    try:
        opa.add_policy("order.rego", _ITERATE)
        for written in (keys, keys[::-1]):
            doc = {"o": {k: index for index, k in enumerate(written)}}
            on_opa = opa.eval_document("order.value", doc)
            assert query_entrypoint(interpreter, built, "order/value", doc).value == on_opa
            assert on_opa["keys"] == sorted(keys)
    finally:
        opa.close()
