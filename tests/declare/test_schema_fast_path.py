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
