"""The compiled schema check (fastjsonschema) that declarations pass first never accepts what the
strict validator refuses.

Validation trusts the fast check's acceptance and asks the strict validator
(kcp_opa.schemas.validator: integers are ints, not 5000.0 or true) only about documents the fast
check refuses. So the one thing that must never happen is the fast check passing a document
the strict validator has errors for: that document would compile. Every shipped declaration
and a few thousand mutations of each (values swapped for lookalikes of another type, keys
dropped and added) are put to both.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest
from conftest import REPO
from exceptionkit import exception, key

from kcp_opa import schemas
from kcp_opa.declare.yamlsource import load_yaml

#: Lookalikes of every JSON type: bools where integers go (true == 1 in Python), integral
#: floats, numbers as strings, empty and unknown values, a very long string.
LOOKALIKES: list[Any] = [
    True, False, 1, 0, -1, 1.0, 5000.0, 2.5, "1", "", "x", "EU", None, [], [1], ["x"], {}, {"x": 1},
    "a" * 5000, 10**20, [True], ["x", "x"], [1, True], "EUR", "autonomous", "confidential",
]  # fmt: skip


def _documents() -> list[tuple[str, Any]]:
    by_kind = {
        schemas.MANIFEST: sorted(REPO.glob("fixtures/deployments/*/knowledge.yaml"))
        + sorted(REPO.glob("tests/deployments/*/knowledge.yaml"))
        + sorted(p for p in REPO.glob("tests/conformance/manifests/*.yaml") if "bomb" not in p.name),
        schemas.MATRIX: sorted(REPO.glob("fixtures/deployments/*/matrix.yaml"))
        + sorted(REPO.glob("tests/deployments/*/matrix.yaml"))
        + sorted(REPO.glob("tests/conformance/matrices/*.yaml")),
        schemas.TRUST: sorted(REPO.glob("fixtures/trust/registry.yaml"))
        + sorted(REPO.glob("tests/deployments/*/trust.yaml")),
    }
    out: list[tuple[str, Any]] = []
    for name, paths in by_kind.items():
        for path in paths:
            try:
                data = load_yaml(path).data
            except Exception:  # the conformance set has files that are not readable YAML on purpose
                continue
            out.append((name, data))
    out.append((schemas.EXCEPTIONS, _exceptions_document()))
    return out


def _exceptions_document() -> dict[str, Any]:
    now = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    item = exception(key(), issued=now, expires=now + dt.timedelta(days=1))
    return {"kind": "kcp-opa/exceptions", "format_version": 1, "name": "support-desk", "exceptions": [item]}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _mutate(document: Any, rng: random.Random) -> Any:
    mutated = copy.deepcopy(document)
    for _ in range(rng.choice((1, 1, 2, 3))):
        path = rng.choice(_paths(mutated)[1:] or [()])
        if not path:
            return mutated
        parent = mutated
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        roll = rng.random()
        if roll < 0.7:
            parent[last] = copy.deepcopy(rng.choice(LOOKALIKES))
        elif roll < 0.85 and isinstance(parent, dict):
            del parent[last]
        elif isinstance(parent, dict):
            parent[rng.choice(("x_extra", "type", "id", "", "units"))] = copy.deepcopy(rng.choice(LOOKALIKES))
        else:
            parent.append(copy.deepcopy(rng.choice(LOOKALIKES)))
    return mutated


def _fast_accepts(name: str, document: Any) -> bool:
    try:
        schemas.fast_validator(name)(document)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _strict_errors(name: str, document: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message[:120]}" for e in schemas.validator(name).iter_errors(document)]


DOCUMENTS = _documents()


def test_every_shipped_declaration_gets_the_same_verdict() -> None:
    assert {name for name, _ in DOCUMENTS} == {schemas.MANIFEST, schemas.MATRIX, schemas.TRUST, schemas.EXCEPTIONS}
    for name, document in DOCUMENTS:
        if _fast_accepts(name, document):
            assert not _strict_errors(name, document), name


@pytest.mark.parametrize("index", range(len(DOCUMENTS)))
def test_the_fast_check_never_passes_a_mutation_the_strict_validator_refuses(index: int) -> None:
    name, document = DOCUMENTS[index]
    rng = random.Random(index)
    verdicts = {"accepted": 0, "refused": 0}
    for _ in range(300):
        mutated = _mutate(document, rng)
        if _fast_accepts(name, mutated):
            verdicts["accepted"] += 1
            errors = _strict_errors(name, mutated)
            assert not errors, f"{name}: the fast check passed what the strict validator refuses: {errors[:2]}"
        else:
            verdicts["refused"] += 1
    assert verdicts["refused"], verdicts  # the mutations do reach the schema


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        (schemas.MATRIX, ("parameters",), True),
        (schemas.TRUST, ("format_version",), True),
        (schemas.EXCEPTIONS, ("format_version",), True),
    ],
)
def test_lookalikes_of_integers_and_constants_are_refused_by_both(name: str, path: tuple[str, ...], value: Any) -> None:
    """true == 1 in Python: a compiled check that compared with == would pass it."""
    document = copy.deepcopy(next(d for n, d in DOCUMENTS if n == name))
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    assert _strict_errors(name, document)
    assert not _fast_accepts(name, document)


def test_validation_words_errors_with_the_strict_validator(tmp_path: Path) -> None:
    """A refused document's findings come from the strict validator, with the YAML line."""
    from kcp_opa.declare.manifest import validate_manifest

    text = (REPO / "fixtures" / "deployments" / "finance" / "knowledge.yaml").read_text()
    path = tmp_path / "knowledge.yaml"
    path.write_text(text.replace("project: treasury", "project: [treasury]", 1))
    report = validate_manifest(path)
    assert not report.valid
    assert any(d.code == "schema" and d.line for d in report.errors), [str(d) for d in report.errors]


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("^[a-z]+$", "abc", True),
        ("^[a-z]+$", "abc\n", False),  # Python's $ matched here; ECMA-262's does not
        (r"^https://\S+$", "https://x\n", False),
        ("^[$]x$", "$x", True),  # a $ inside a class is the character
        (r"^a\$$", "a$", True),  # so is an escaped one
        (r"\S", " x ", True),  # unanchored patterns still search
    ],
)
def test_patterns_end_where_ecma_262_ends_them(pattern: str, value: str, matches: bool) -> None:
    assert bool(schemas.ecma_pattern(pattern).search(value)) is matches


_ACCEPTED = [
    "abc", "EUR", "a.b-c_1", "2026-01-31", "2026-01-31T10:00:00Z", "2026-01-31T10:00:00+01:00",
    "https://example.com/x", "A" * 43 + "=",
]  # fmt: skip


def test_every_pattern_of_every_schema_refuses_a_final_line_break() -> None:
    """Each anchored pattern of the shipped schemas, given a value it accepts plus a final line
    break (which Python's `re` also accepts there), refuses it."""
    import re

    covered = set()
    for name in (schemas.MANIFEST, schemas.MATRIX, schemas.TRUST, schemas.EXCEPTIONS):
        stack: list[Any] = [schemas.schema(name)]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                pattern = node.get("pattern")
                if isinstance(pattern, str) and pattern.endswith("$"):
                    strict = schemas.StrictValidator({"type": "string", "pattern": pattern})
                    for value in (v for v in _ACCEPTED if re.search(pattern, v)):
                        assert re.search(pattern, value + "\n")  # the hazard: Python's $
                        assert not list(strict.iter_errors(value)), (pattern, value)
                        assert list(strict.iter_errors(value + "\n")), (pattern, value)
                        covered.add(pattern)
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    assert len(covered) >= 8, covered


def test_a_refusal_the_strict_validator_cannot_word_still_refuses() -> None:
    """Should the two validators ever disagree the other way, the compiled check's refusal stands."""
    from jsonschema import Draft202012Validator

    from kcp_opa.declare.diagnostics import Findings
    from kcp_opa.declare.schema_findings import check_schema

    def fast(_data: Any) -> None:
        message = "data.units[0].id must match pattern ^x$"
        raise fastjsonschema.JsonSchemaValueException(message, name="data.units[0].id")

    findings = Findings()
    check_schema(Draft202012Validator({}), {"units": [{"id": "y"}]}, findings, fast)
    assert [e.message for e in findings.errors] == ["data.units[0].id must match pattern ^x$"]

    def integral(_data: Any) -> None:  # unnamed: the strict validator's alone to judge
        raise fastjsonschema.JsonSchemaValueException("an integral float: for the strict validator")

    findings = Findings()
    check_schema(Draft202012Validator({}), {"n": 5.0}, findings, integral)
    assert not findings.errors
