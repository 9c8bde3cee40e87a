"""The table of what reads each declaration (policies/kcp/lib/declarations.rego) is true.

It must list every value of every vocabulary the validator knows, agree with the validator's copy
(kcp_opa.declare.vocabulary.READ_BY) on both engines, and name only rules that exist and read the
value: a restriction's rule must call ``facts.restricted("<name>")`` where it is defined, and no
policy may read a restriction the table does not list as enforced.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kcp_opa.declare import vocabulary as vocab

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "policies" / "kcp" / "lib" / "declarations.rego"
POLICY_FILES = sorted(p for p in (REPO / "policies").rglob("*.rego") if not p.name.endswith("_test.rego"))


def _regopy_table() -> Any:
    from regopy import Interpreter
    from regopy import rego_shared as native

    from kcp_opa.decide.regoinput import read_query_results

    interpreter = Interpreter()
    interpreter.add_module("declarations.rego", TABLE.read_text("utf-8"))
    output = native.rego_query(interpreter._impl, "x := data.kcp.lib.declarations")
    try:
        return read_query_results(native.rego_output_node(output))[0][1]["x"]
    finally:
        native.rego_free_output(output)


def _opa_table() -> Any:
    from opa_bindings import OpaEngine

    engine = OpaEngine()
    engine.add_policy("declarations.rego", TABLE.read_text("utf-8"))
    try:
        return engine.eval_document("kcp.lib.declarations", {})
    finally:
        engine.close()


@pytest.fixture(scope="module")
def tables() -> tuple[Any, Any]:
    return _regopy_table(), _opa_table()


def test_the_table_is_the_validators_on_both_engines(tables: tuple[Any, Any]) -> None:
    regopy, opa = tables
    assert regopy["table"] == opa["table"] == vocab.READ_BY
    refused = {name: sorted(values) for name, values in opa["refused"].items()}
    assert {name: sorted(values) for name, values in regopy["refused"].items()} == refused
    assert refused == {"restrictions": ["anonymisation-required", "encryption-at-rest-required", "no-caching",
                                        "no-redistribution"]}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("restrictions", vocab.RESTRICTIONS),
        ("regulations", vocab.REGULATIONS),
        ("legal_basis", vocab.LEGAL_BASES),
        ("sensitivity", vocab.SENSITIVITY_ORDER),
        ("data_categories", vocab.DATA_CATEGORIES),
        ("regions", vocab.REGIONS),
        ("access", vocab.ACCESS_LEVELS),
        ("on_stale", vocab.ON_STALE),
        ("approval_mechanism", vocab.APPROVAL_MECHANISMS),
        ("autonomy", vocab.AUTONOMY_LEVELS),
    ],
)
def test_every_vocabulary_value_is_in_the_table(name: str, values: tuple[str, ...]) -> None:
    assert sorted(vocab.READ_BY[name]) == sorted(values)


def test_conditions_are_the_ones_the_validator_accepts() -> None:
    from kcp_opa.declare.governance import CONDITION_KEYS

    assert sorted(vocab.READ_BY["conditions"]) == sorted(CONDITION_KEYS)


def _sources() -> dict[Path, str]:
    return {path: path.read_text("utf-8") for path in POLICY_FILES}


def _rule_exists(rule: str, sources: dict[Path, str]) -> bool:
    if any(f'"rule": "{rule}"' in text for text in sources.values()):
        return True
    if any(re.search(rf"^package {re.escape(rule)}$", text, re.M) for text in sources.values()):
        return True
    package, _, head = rule.rpartition(".")
    return any(
        re.search(rf"^package {re.escape(package)}$", text, re.M) and re.search(rf"^_?{re.escape(head)}\b", text, re.M)
        for text in sources.values()
    )


def test_every_named_rule_exists() -> None:
    sources = _sources()
    named = {rule for values in vocab.READ_BY.values() for rule in values.values()} - {vocab.REFUSED, vocab.ADVISORY}
    missing = sorted(rule for rule in named if not _rule_exists(rule, sources))
    assert not missing, missing


def test_each_enforced_restriction_is_read_where_its_rule_is() -> None:
    sources = _sources()
    for restriction, rule in vocab.RESTRICTION_RULES.items():
        if rule == vocab.REFUSED:
            continue
        package, _, _ = rule.rpartition(".")
        homes = [
            text for text in sources.values()
            if f'"rule": "{rule}"' in text or re.search(rf"^package {re.escape(package)}$", text, re.M)
        ]  # fmt: skip
        assert any(f'facts.restricted("{restriction}")' in text for text in homes), (restriction, rule)


def test_no_policy_reads_a_restriction_the_table_refuses_or_omits() -> None:
    read = {m for text in _sources().values() for m in re.findall(r'facts\.restricted\("([^"]+)"\)', text)}
    enforced = {name for name, rule in vocab.RESTRICTION_RULES.items() if rule != vocab.REFUSED}
    assert read == enforced
