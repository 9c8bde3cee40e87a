"""Conformance corpus: each YAML file states what validation must find, in its own comments.

    # expect: valid
    # expect-error: CODE @ YAML.PATH [line N]
    # expect-warning: CODE @ YAML.PATH
    # expect-note: CODE @ YAML.PATH
    # expect-absent: CODE

Errors must match exactly (no more, no fewer); listed warnings and notes must be present; an
absent code must not be found at any severity.
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

_EXPECT = re.compile(r"^# expect-(error|warning|note): (\S+) @ (\S+)(?: line (\d+))?\s*$")
_ABSENT = re.compile(r"^# expect-absent: (\S+)\s*$")

Expected = dict[str, set[tuple[str, str]]]


def _expectations(path: Path) -> tuple[Expected, dict[tuple[str, str], int], set[str]]:
    expected: Expected = {"error": set(), "warning": set(), "note": set()}
    lines: dict[tuple[str, str], int] = {}
    absent: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _EXPECT.match(line)
        if match:
            kind, code, where, at_line = match.groups()
            expected[kind].add((code, where))
            if at_line:
                lines[(code, where)] = int(at_line)
        elif gone := _ABSENT.match(line):
            absent.add(gone.group(1))
    return expected, lines, absent


def _check(report: Report[Any], path: Path) -> None:
    expected, lines, absent = _expectations(path)
    expected_errors = expected["error"]
    found_errors = {(d.code, d.to_dict()["path"]) for d in report.errors}
    found_warnings = {(d.code, d.to_dict()["path"]) for d in report.warnings}
    found_notes = {(d.code, d.to_dict()["path"]) for d in report.notes}
    assert found_errors == expected_errors, [str(d) for d in report.errors]
    assert expected["warning"] <= found_warnings, [str(d) for d in report.warnings]
    assert expected["note"] <= found_notes, [str(d) for d in report.notes]
    assert not absent & {d.code for d in report.diagnostics}, [str(d) for d in report.diagnostics]
    for d in report.warnings:
        if (d.code, d.to_dict()["path"]) in lines:
            assert d.line == lines[(d.code, d.to_dict()["path"])], str(d)
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
