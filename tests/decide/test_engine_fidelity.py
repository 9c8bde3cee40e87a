"""Engine fidelity, classes 1 and 2 of issue 13: strings reach regopy and come back byte for byte.

Class 1: regopy's output text does not escape strings, so a quote, backslash or control
character in a result made invalid (or different) JSON. Class 2: rego-cpp's C input API stops
at NUL, so ``tenant_a\\u0000tenant_b`` was judged as ``tenant_a``. The engine now reads results
from the node tree and the action contract refuses NUL, other controls and lone surrogates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))
from hostile import hostile_text

from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.decide.action import check_action
from kcp_opa.decide.engine import query_entrypoint

REPO = Path(__file__).resolve().parents[2]
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())

_ECHO = """package fidelity

import rego.v1

value := v if {
	# Strings computed in a rule head come out quoted (docs/engine-findings.md item 11): body only.
	msg := concat("", ["m ", input.s])
	v := {"echo": input, "n": count(input.s), "same": input.s == input.t, "msg": msg}
}
"""


@pytest.fixture(scope="module")
def echo() -> tuple[Any, Any]:
    from regopy import Interpreter

    interpreter = Interpreter()
    interpreter.add_module("fidelity.rego", _ECHO)
    built = interpreter.build(None, ["fidelity/value"])
    assert built.ok(), str(built.node())
    return interpreter, built


def _opa(doc: dict[str, Any]) -> Any:
    from opa_bindings import OpaEngine

    engine = OpaEngine()
    try:
        engine.add_policy("fidelity.rego", _ECHO)
        return engine.eval_document("fidelity.value", doc)
    finally:
        engine.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=hostile_text.hyp(), t=hostile_text.hyp(), key=hostile_text.hyp())
def test_strings_round_trip_byte_for_byte(echo: tuple[Any, Any], s: str, t: str, key: str) -> None:
    doc = {"s": s, "t": t, "nested": {key: [s, {"k": t}]}}
    result = query_entrypoint(*echo, "fidelity/value", doc)
    assert result.error is None, result.error
    assert result.value == {"echo": doc, "n": len(s), "same": s == t, "msg": "m " + s}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=hostile_text.hyp())
def test_both_engines_read_the_same_strings(echo: tuple[Any, Any], s: str) -> None:
    doc = {"s": s, "t": s}
    assert query_entrypoint(*echo, "fidelity/value", doc).value == _opa(doc)


@pytest.mark.parametrize("s", ['q"x', "back\\slash", "tenant\\nb", "line\nbreak", "tab\there", 'x","injected":"y'])
def test_class1_escapes_survive_output(echo: tuple[Any, Any], s: str) -> None:
    """Before: JSONDecodeError -> engine_error DENY, or a real newline for a backslash-n."""
    result = query_entrypoint(*echo, "fidelity/value", {"s": s, "t": ""})
    assert result.error is None
    assert result.value is not None and result.value["echo"]["s"] == s and result.value["msg"] == "m " + s


def _with(path: str, value: Any) -> dict[str, Any]:
    action = json.loads(json.dumps(KYA))
    action["knowledge"] = {"project": "treasury", "unit": "supplier-payments"}
    node = action
    *parents, last = path.strip("/").split("/")
    for part in parents:
        node = node.setdefault(part, {}) if not part.isdigit() else node[int(part)]
    node[last] = value
    return action


@pytest.mark.parametrize(
    ("path", "value", "char"),
    [
        ("/target/tenant_id", "tenant_a\x00tenant_b", "U+0000"),
        ("/requested_action", "execute_payment\x00close_account", "U+0000"),
        ("/scenario", "free text \x1b[31m", "U+001B"),
        ("/scenario", "del\x7f", "U+007F"),
        ("/scenario", "c1\x85", "U+0085"),
        ("/scenario", "lone \ud800", "U+D800"),
        ("/attributes/key\x01", True, "U+0001"),
        ("/knowledge/purpose", '"training"', "U+0022"),
        ("/tenant_id", "tenant a", "U+0020"),
        ("/tenant_id", 'tenant"a', "U+0022"),
        ("/knowledge/fields_read", ["phone "], "U+0020"),
        ("/knowledge/unit", "unit\u200b", "U+200B"),
        ("/action_type", "paymentİ", "U+0130"),
        ("/delegation_chain", [{"agent_id": "a\u202eb", "capabilities": []}], "U+202E"),
        # a stated scope reaches the service's refusal message and log: no forged lines there
        ("/authorization_context/principal_scopes", ["read", "evil\nWARNING forged"], "U+000A"),
        ("/authorization_context/principal_scopes", ["é x"], "U+00E9"),
    ],
)
def test_contract_refuses_with_path_and_character(path: str, value: Any, char: str) -> None:
    """Class 2 and the identifier contract: refused before evaluation, path and character named."""
    with pytest.raises(ActionRejectedError) as refused:
        check_action(_with(path, value))
    assert char in refused.value.reason
    assert refused.value.path.startswith("/" + path.strip("/").split("/")[0])


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("/scenario", 'free "text" with \\ and tabs\tand\nlines\r\n, İ ß Σ \u200b \u202e é'),
        ("/knowledge/purpose", "TRAİNING"),
        ("/attributes/note", 'quotes " and } braces {'),
        ("/tenant_id", "tenant_a:eu/1@x+y~z=w#v-u.t"),
    ],
)
def test_contract_keeps_free_text_and_identifiers(path: str, value: Any) -> None:
    check_action(_with(path, value))


def test_rego_input_refuses_nul_itself() -> None:
    """Defence in depth: the input builder never hands rego-cpp a string it would truncate."""
    from kcp_opa.decide.regoinput import rego_input

    with pytest.raises(ValueError, match="NUL"):
        rego_input({"s": "a\x00b"})


def test_kcp_opa_eval_replays_strings_byte_for_byte() -> None:
    """The auditors' regopy replay (`kcp-opa eval`) reads the same node tree as the gate."""
    from kcp_opa.compile.bundle import LoadedBundle
    from kcp_opa.decide.query import evaluate_query

    bundle = LoadedBundle("<test>", {}, {}, {"echo.rego": _ECHO}, "")
    text = 'quote " backslash \\ newline \n tab \t İ'
    answer = evaluate_query(bundle, "x := input.s", {"s": text})
    assert isinstance(answer, dict)
    assert answer["result"][0]["bindings"] == {"x": text}
    assert evaluate_query(bundle, "input.nope", {"s": text}) == {}
