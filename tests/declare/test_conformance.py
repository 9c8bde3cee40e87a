"""Conformance corpus: each YAML file states what validation must find, in its own comments.

    # expect: valid
    # expect-error: CODE @ YAML.PATH [line N]
    # expect-warning: CODE @ YAML.PATH

Errors must match exactly (no more, no fewer); listed warnings must be present.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import CONFORMANCE

from kcp_opa.declare.diagnostics import Report
from kcp_opa.declare.manifest import validate_manifest
from kcp_opa.declare.matrix import validate_matrix

_EXPECT = re.compile(r"^# expect-(error|warning): (\S+) @ (\S+)(?: line (\d+))?\s*$")


def _expectations(path: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]], dict[tuple[str, str], int]]:
    errors: set[tuple[str, str]] = set()
    warnings: set[tuple[str, str]] = set()
    lines: dict[tuple[str, str], int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _EXPECT.match(line)
        if match:
            kind, code, where, at_line = match.groups()
            (errors if kind == "error" else warnings).add((code, where))
            if at_line:
                lines[(code, where)] = int(at_line)
    return errors, warnings, lines


def _check(report: Report[Any], path: Path) -> None:
    expected_errors, expected_warnings, lines = _expectations(path)
    found_errors = {(d.code, d.to_dict()["path"]) for d in report.errors}
    found_warnings = {(d.code, d.to_dict()["path"]) for d in report.warnings}
    assert found_errors == expected_errors, [str(d) for d in report.errors]
    assert expected_warnings <= found_warnings, [str(d) for d in report.warnings]
    assert report.valid == (not expected_errors)
    for d in report.errors:
        assert d.file == str(path)
        assert d.line is not None and d.line >= 1
        key = (d.code, d.to_dict()["path"])
        if key in lines:
            assert d.line == lines[key]


MANIFESTS = sorted((CONFORMANCE / "manifests").glob("*.yaml"))
MATRICES = sorted((CONFORMANCE / "matrices").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_manifest_conformance(path: Path) -> None:
    _check(validate_manifest(path), path)


@pytest.mark.parametrize("path", MATRICES, ids=[p.stem for p in MATRICES])
def test_matrix_conformance(path: Path) -> None:
    _check(validate_matrix(path), path)


def test_corpus_covers_both_outcomes() -> None:
    assert any(p.stem.startswith("valid") for p in MANIFESTS)
    assert any(p.stem.startswith("invalid") for p in MANIFESTS)
    assert len(MATRICES) >= 5
