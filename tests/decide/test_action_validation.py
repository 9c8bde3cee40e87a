"""Behaviour tests for kcp_opa/decide/action.py that kill its mutmut survivors (docs/testing.md).

What an action may hold before any engine reads it: each refusal is pinned by its path and its
exact reason, each acceptance at its boundary. Pure Python, fast per mutant.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from conftest import REPO

from kcp_opa.core import strings
from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.core.textfold import TextFoldError
from kcp_opa.decide import action as module
from kcp_opa.decide.action import (
    action_hash,
    check_action,
    check_strings,
    fold_refusals,
    fold_text,
    folded_strings,
    parse_action,
    trace_id_of,
)

ACTION: dict[str, Any] = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


def _with(path: tuple[Any, ...], value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    action = copy.deepcopy(base or ACTION)
    node: Any = action
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[path[-1]] = value
    return action


def _refused(value: Any) -> tuple[str, str]:
    with pytest.raises(ActionRejectedError) as caught:
        check_action(value)
    error = caught.value
    assert str(error) == (f"action{error.path}: {error.reason}" if error.path else f"action: {error.reason}")
    return error.path, error.reason


def test_limits() -> None:
    assert module.MAX_ACTION_BYTES == 1024 * 1024 and module.MAX_DEPTH == 32
    assert (module.INT64_MIN, module.INT64_MAX) == (-(2**63), 2**63 - 1)


def test_parse_action_accepts_text_and_bytes() -> None:
    text = json.dumps(ACTION)
    assert parse_action(text) == ACTION and parse_action(text.encode("utf-8")) == ACTION


def test_parse_action_size_limit() -> None:
    padded = json.dumps({**ACTION, "attributes": {"pad": "p" * (1024 * 1024)}})
    with pytest.raises(ActionRejectedError) as caught:
        parse_action(padded)
    assert (
        caught.value.path == ""
        and caught.value.reason == f"{len(padded)} bytes is over the 1024 KiB limit for one action"
    )
    # the limit counts UTF-8 bytes, not characters
    base = json.dumps(ACTION)
    room = module.MAX_ACTION_BYTES - len(base.encode()) - len(', "x": ""')
    fits = base[:-1] + ', "x": "' + "a" * room + '"}'
    assert len(fits.encode()) == module.MAX_ACTION_BYTES
    assert parse_action(fits)["x"] == "a" * room  # exactly at the limit: accepted
    wide = base[:-1] + ', "x": "' + "é" * (room // 2 + 1) + '"}'
    with pytest.raises(ActionRejectedError) as caught:
        parse_action(wide)
    assert "bytes is over the 1024 KiB limit" in caught.value.reason


def test_parse_action_json_errors() -> None:
    with pytest.raises(ActionRejectedError) as caught:
        parse_action("[" * 100_000 + "]" * 100_000)
    assert (caught.value.path, caught.value.reason) == ("", "nested deeper than 32 levels")
    with pytest.raises(ActionRejectedError) as caught:
        parse_action('{"a": 1, "a": 2}')
    assert caught.value.reason.startswith("refused: ")
    with pytest.raises(ActionRejectedError) as caught:
        parse_action("{not json")
    assert caught.value.reason.startswith("not valid JSON: ")
    with pytest.raises(ActionRejectedError) as caught:
        parse_action(b"\xff\xfe")
    assert caught.value.reason.startswith("refused: not UTF-8: ")
    with pytest.raises(ActionRejectedError) as caught:
        parse_action("[]")
    assert caught.value.reason == "must be a JSON object, not an array"


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ([], "an array"),
        ("s", "a string"),
        (1, "a number"),
        (1.5, "a number"),
        (True, "a boolean"),
        (None, "null"),
        (b"x", "bytes"),
        ((1,), "tuple"),
    ],
)
def test_not_an_object(value: Any, name: str) -> None:
    assert _refused(value) == ("", f"must be a JSON object, not {name}")


def test_value_walk() -> None:
    assert _refused(_with(("attributes", "x"), 1.0)) == (
        "/attributes/x",
        "1.0 is a float; money and counts are integers (minor units)",
    )
    assert _refused(_with(("evidence_references",), ["a", 2.5])) == (
        "/evidence_references/1",
        "2.5 is a float; money and counts are integers (minor units)",
    )
    assert _refused(_with(("attributes", "n"), 2**63)) == (
        "/attributes/n",
        f"{2**63} does not fit in a signed 64-bit integer",
    )
    assert _refused(_with(("attributes", "n"), -(2**63) - 1))[1].endswith("does not fit in a signed 64-bit integer")
    for fits in (2**63 - 1, -(2**63)):
        assert "64-bit" not in str(_try(_with(("attributes", "n"), fits)))
    assert _refused(_with(("attributes", "x"), {1: "a"})) == ("/attributes/x", "object key 1 is not a string")
    assert _refused(_with(("attributes", "x"), b"raw")) == ("/attributes/x", "bytes is not a JSON value")
    assert _refused(_with(("attributes", "x"), (1, 2.0))) == (
        "/attributes/x/1",
        "2.0 is a float; money and counts are integers (minor units)",
    )


def _try(action: dict[str, Any]) -> str:
    try:
        check_action(action)
    except ActionRejectedError as exc:
        return str(exc)
    return ""


def _nest(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"n": value}
    return value


def test_depth_limit_boundary() -> None:
    # the action is depth 0, attributes 1, so 31 more levels reach depth 32: allowed by the walk
    assert "nested deeper" not in _try(_with(("attributes", "x"), _nest(30)))
    path, reason = _refused(_with(("attributes", "x"), _nest(31)))
    assert reason == "nested deeper than 32 levels" and path == "/attributes/x" + "/n" * 31


def test_secret_keys_are_refused_with_the_key_shown_in_ascii() -> None:
    assert _refused(_with(("attributes", "api_key"), "ref")) == (
        "/attributes/api_key",
        "secret-bearing key (apikey) never accepted in an action; pass a reference",
    )
    path, reason = _refused(_with(("attributes", "pass\u200bword"), "x"))
    assert path == "/attributes/pass\\u200bword" and reason.startswith("secret-bearing key (")


def test_forbidden_characters() -> None:
    assert _refused(_with(("target", "reference"), "a\x00b")) == (
        "/target/reference",
        'character U+0000 "\\x00" is not allowed in a string of an action (control characters other than TAB, LF and '
        "CR, and lone surrogates, are refused)",
    )
    assert _refused(_with(("attributes", "k\x7f"), 1)) == (
        "/attributes/k\\x7f",
        'character U+007F "\\x7f" is not allowed in an object key of an action (control characters other than TAB, LF'
        " and CR, and lone surrogates, are refused)",
    )
    for char in ("\x08", "\x0b", "\x0c", "\x0e", "\x1f", "\x80", "\x9f", "\ud800", "\udfff"):
        assert "is not allowed in a string" in _refused(_with(("target", "reference"), f"a{char}"))[1], repr(char)
    for char in ("\t", "\n", "\r", " ", "\xa0", "é"):
        assert "is not allowed" not in _try(_with(("attributes", "note"), f"a{char}b")), repr(char)


def test_quote_wrapped_strings() -> None:
    message = 'a string may not both start and end with U+0022 """: regopy reads it as the string inside the quotes'
    assert _refused(_with(("target", "reference"), '"x"')) == ("/target/reference", message)
    assert _refused(_with(("attributes", '""'), 1)) == ('/attributes/""', message)
    for fine in ('"', '"x', 'x"', 'a"b'):
        assert "U+0022" not in _try(_with(("attributes", "note"), fine)), fine


def test_identifier_paths() -> None:
    tail = " is not allowed in an identifier (letters, digits and _ . : / @ + ~ = # * - only)"
    assert _refused(_with(("tenant_id",), "ten ant")) == ("/tenant_id", 'character U+0020 "\\x20"' + tail)
    assert _refused(_with(("tenant_id",), "")) == ("/tenant_id", "an empty string" + tail)
    assert _refused(_with(("authorization_context", "agent_scope"), ["ok", "b\u00e9"])) == (
        "/authorization_context/agent_scope/1",
        'character U+00E9 "\\xe9"' + tail,
    )
    assert _refused(_with(("target", "country"), 'S"')) == ("/target/country", 'character U+0022 "\\x22"' + tail)
    assert _refused(_with(("target", "country"), "S\\")) == ("/target/country", 'character U+005C "\\x5c"' + tail)
    assert _refused(_with(("target", "country"), "S\u20ac")) == ("/target/country", 'character U+20AC "\\u20ac"' + tail)
    assert _refused(_with(("target", "country"), "S\U0001f600")) == (
        "/target/country",
        'character U+1F600 "\\U0001f600"' + tail,
    )
    ok = "Az09_.:/@+~=#*-"
    for path in (("action_id",), ("target", "type"), ("target", "country"), ("runtime", "deployment_region")):
        assert "identifier" not in _try(_with(path, ok)), path
    # free text elsewhere may hold spaces and non-ASCII
    assert "identifier" not in _try(_with(("target", "reference"), "supplier 4821 é"))
    assert "identifier" not in _try(_with(("authorization_context", "agent_scope_note"), "a b"))
    assert strings.is_action_identifier_path("/delegation_chain/12/capabilities/3")
    assert not strings.is_action_identifier_path("/delegation_chain/x/agent_id")
    assert not strings.is_action_identifier_path("/tenant_id/extra")
    assert not strings.is_action_identifier_path("x/tenant_id")


def test_check_strings_walks_lists_and_keys_only_when_strings() -> None:
    check_strings({"a": ["x", ("y",)], 5: "z"})  # a non-string key is _check_values's business
    with pytest.raises(ActionRejectedError) as caught:
        check_strings({"a": [("ok", "b\x01")]})
    assert caught.value.path == "/a/0/1"


def test_schema_errors_are_worded_and_counted() -> None:
    missing = {k: v for k, v in ACTION.items() if k not in ("tenant_id", "subject_id")}
    path, reason = _refused(missing)
    assert path == "" and reason == "'subject_id' is required (+1 more)"
    lone = {k: v for k, v in ACTION.items() if k != "tenant_id"}
    assert _refused(lone) == ("", "'tenant_id' is required")
    path, reason = _refused(_with(("amount", "value_minor"), "800000"))
    assert path == "/amount/value_minor" and reason == "'800000' is not of type 'integer'"


def test_fold_text() -> None:
    assert fold_text("TRAİNING") == "training"
    assert fold_text("Trai\u0307ning") == "training"
    assert fold_text("train\u200bing") == "training"
    assert fold_text("\uff34\uff52\uff41\uff49\uff4e") == "train"  # NFKD maps the full-width letters
    assert fold_text("ﬁ") == "fi"
    assert fold_text("Straße") == "strasse"
    assert fold_text("e\u0301") == "e" and fold_text("\u20dd") == ""  # Mn and Me dropped
    assert fold_text("ǅ") == "dz"
    assert fold_text("한") == "한"  # recomposed by the final NFC
    # look-alikes read as the Latin letters (TR39), before and after case folding
    assert fold_text("tr\u0430ining") == fold_text("\u03a4R\u0391\u0399\u039d\u0399\u039dG") == "training"
    assert fold_text("\u1d1b\u0280\u1d00\u026a\u0274\u026a\u0274\u0262") == "training"  # small capitals
    assert (
        fold_text("ai\u2013training") == fold_text("ai\u30fctraining") == fold_text("ai\u203ftraining") == "ai_training"
    )
    assert fold_text("\u7814\u7a76 training") == "\u7814\u7a76_training"  # Han with Latin is one reading
    assert fold_text("\u043e\u0431\u0443\u0447\u0435\u043d\u0438\u0435")  # one script: folded, not refused
    for unreadable, why in (
        ("tra\u01c0ning", "either I or l"),
        ("tr\u0430ining\u0436", "CYRILLIC, LATIN"),
        ("train\u3164ing", "U+1160"),  # U+3164 after NFKD
        ("trai\ue000ning", "U+E000"),
    ):
        with pytest.raises(TextFoldError, match=re.escape(why)):
            fold_text(unreadable)


def test_folded_strings() -> None:
    action = _with(("knowledge", "purpose"), "TRAİNING")
    assert folded_strings(action) == {"purpose": "training"}
    assert folded_strings(ACTION) == {}
    assert folded_strings({"knowledge": "flat"}) == {}
    assert folded_strings({"knowledge": {"purpose": 5}}) == {}
    assert folded_strings(_with(("knowledge", "purpose"), '"\u200bx"')) == {"purpose": "x"}
    refused = _with(("knowledge", "purpose"), "tra\u01c0ning")
    assert folded_strings(refused) == {} and "either I or l" in fold_refusals(refused)["purpose"]
    assert fold_refusals(action) == {}
    assert module._contract_safe('"') == '"' and module._contract_safe('"a') == '"a'
    assert module.FOLDED_PATHS == (("knowledge", "purpose"),)


def test_action_hash_and_schema() -> None:
    assert action_hash(ACTION) == "sha256:29a918d0341fc6c5fa77914b24525c23becdeef3de7db8e6171f2ebeecc8bf2b"
    schema = module.action_schema()
    assert schema["type"] == "object" and "tenant_id" in schema["required"]


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        ({"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}, "a" * 32),
        ({"traceparent": "00-" + "0" * 32 + "-" + "b" * 16 + "-01"}, None),
        ({"traceparent": "00-" + "a" * 32 + "-" + "0" * 16 + "-01"}, None),
        ({"traceparent": "00-" + "A" * 32 + "-" + "b" * 16 + "-01"}, None),
        ({"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01x"}, None),
        ({"traceparent": "x00-" + "a" * 32 + "-" + "b" * 16 + "-01"}, None),
        ({"traceparent": 5}, None),
        ("flat", None),
        (None, None),
    ],
)
def test_trace_id(trace: Any, expected: str | None) -> None:
    action = {"trace": trace} if trace is not None else {}
    assert trace_id_of(action) == expected


def test_edges_mutmut_found() -> None:
    """Each assertion here killed one mutmut survivor (docs/testing.md, Python mutation testing)."""
    for text in ('{"a": 1, "a": 2}', "{not json"):
        with pytest.raises(ActionRejectedError) as caught:
            parse_action(text)
        assert caught.value.path == "" and str(caught.value).startswith("action: ")
    # depth counts list levels too: 31 lists below attributes reach depth 32, 32 do not
    nested: Any = 1
    for _ in range(30):
        nested = [nested]
    assert "nested deeper" not in _try(_with(("attributes", "x"), nested))
    path, reason = _refused(_with(("attributes", "x"), [nested]))
    assert reason == "nested deeper than 32 levels" and path == "/attributes/x" + "/0" * 31
    assert "not a JSON value" not in _try(_with(("attributes", "x"), None))
    tail = " is not allowed in an identifier (letters, digits and _ . : / @ + ~ = # * - only)"
    assert _refused(_with(("tenant_id",), "a!")) == ("/tenant_id", 'character U+0021 "!"' + tail)
    assert _refused(_with(("tenant_id",), "a\u0100")) == ("/tenant_id", 'character U+0100 "\\u0100"' + tail)
    assert _refused(_with(("tenant_id",), "a\U00010000")) == ("/tenant_id", 'character U+10000 "\\U00010000"' + tail)
    assert _refused(_with(("tenant_id",), "a\uffff")) == ("/tenant_id", 'character U+FFFF "\\uffff"' + tail)
    # a fold that leaves only the two quotes is emptied, never quote-wrapped
    assert folded_strings(_with(("knowledge", "purpose"), '"\u200b"')) == {"purpose": ""}


def test_the_one_walk_counts_only_what_is_under_attributes() -> None:
    """1,024 values under ``attributes`` (all levels) pass, 1,025 do not; the object itself and
    what lies outside it are not counted."""
    nested = {f"k{i}": [True] * 15 for i in range(64)}  # 64 arrays + 960 members = 1,024 values
    assert check_action(_with(("attributes",), nested)).hash.startswith("sha256:")
    over = {**nested, "extra": True}
    with pytest.raises(ActionRejectedError, match="more than 1,024 values"):
        check_action(_with(("attributes",), over))
    # The same number of values elsewhere is not the attributes cap's business.
    assert check_action(_with(("evidence_references",), [f"r{i}" for i in range(8)])).mapping["attributes"]


def test_the_one_walk_reports_what_the_separate_walks_reported_first() -> None:
    """A float, a secret-bearing key or a depth breach is named before any string-contract breach,
    wherever they are; of several string breaches the walk names the same one as check_strings."""
    both = _with(("attributes", "note"), "a\x00b", _with(("amount", "value_minor"), 1.5))
    with pytest.raises(ActionRejectedError, match="float") as refused:
        check_action(both)
    assert refused.value.path == "/amount/value_minor"
    keyed = _with(("attributes", "api_key"), "x", _with(("subject_id",), '"quoted"'))
    with pytest.raises(ActionRejectedError, match="secret-bearing"):
        check_action(keyed)
    strings_only = _with(("attributes", "note"), "a\x00b", _with(("subject_id",), '"quoted"'))
    with pytest.raises(ActionRejectedError) as walked:
        check_action(strings_only)
    with pytest.raises(ActionRejectedError) as alone:
        check_strings(strings_only)
    assert (walked.value.path, walked.value.reason) == (alone.value.path, alone.value.reason)
