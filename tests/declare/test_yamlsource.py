"""The YAML reader: YAML 1.2 scalars, and a one-line refusal for every bad-input class."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kcp_opa.core.errors import SourceError, SourceUnreadableError
from kcp_opa.declare.yamlsource import MAX_DEPTH, load_yaml, parse_yaml


def test_yaml_12_scalars_norway_dates_and_booleans() -> None:
    doc = parse_yaml(
        b"regions: [NO, no, yes, on, off, y]\nflags: [true, False, TRUE]\nwhen: 2026-11-01\n"
        b"octal: 0o17\nhex: 0x1F\nold_octal: 017\nsexagesimal: 1:20\nnothing: ~\nempty:\nf: 1.5\n"
    ).data
    assert doc["regions"] == ["NO", "no", "yes", "on", "off", "y"]
    assert doc["flags"] == [True, False, True]
    assert doc["when"] == "2026-11-01"
    assert doc["octal"] == 15 and doc["hex"] == 31 and doc["old_octal"] == 17
    assert doc["sexagesimal"] == "1:20"
    assert doc["nothing"] is None and doc["empty"] is None
    assert doc["f"] == 1.5


def test_line_of_points_at_the_node() -> None:
    src = parse_yaml(b"a: 1\nunits:\n  - id: x\n    delegation:\n      max_depth: 5\n")
    assert src.line_of(("units", 0, "delegation", "max_depth")) == 5
    assert src.line_of(("units", 0, "missing")) == 3  # deepest existing node
    assert src.line_of(()) == 1


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"a: 1\n\x00\x01\x02", "binary data"),
        (b"a: \xff\xfe caf\xe9\n", "not UTF-8"),
        (b"a: [1, 2\n", "not YAML"),
        (b"", "empty document"),
        (b"a: 1\n---\nb: 2\n", "not YAML"),
        (b"a: 1\na: 2\n", "duplicate key 'a'"),
        (b"a: !!python/object/apply:os.system ['id']\n", "refused"),
        (b"a: !custom 1\n", "refused"),
        (b"a: !!binary aGVsbG8=\n", "refused"),
        (b"a: !!set {x}\n", "refused"),
        (b"base: &b {x: 1}\nother:\n  <<: *b\n", "merge keys"),
        (b"? [1, 2]\n: v\n", "plain string keys"),
        (b"1: one\n", "must be a string"),
        (b"x: .nan\n", "non-finite"),
        (b"x: -.inf\n", "non-finite"),
        (b"a: &a [*a]\n", "recursive alias"),
        (b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5), "nested deeper"),
        (b"x: 'R&D'\ny: " + b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5), "nested deeper"),
        (b"a:\n" + b"".join(b"  " * i + b"- \n" for i in range(1, MAX_DEPTH + 5)), "nested deeper"),
    ],
)
def test_bad_input_is_one_line_source_error(raw: bytes, fragment: str) -> None:
    with pytest.raises(SourceError) as info:
        parse_yaml(raw, file="m.yaml")
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert message.startswith("m.yaml")


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    with pytest.raises(SourceError, match="YAML bomb"):
        parse_yaml("\n".join(lines).encode())


def test_an_ampersand_that_is_no_anchor_is_plain_text() -> None:
    assert parse_yaml(b"team: R&D\nnote: 'a & b'\n").data == {"team": "R&D", "note": "a & b"}


def test_modest_alias_use_is_fine() -> None:
    doc = parse_yaml(b"common: &c [EEA]\nx: *c\ny: *c\n").data
    assert doc == {"common": ["EEA"], "x": ["EEA"], "y": ["EEA"]}


def test_size_limit_is_checked_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.write(b"project: big\npadding: '")
        handle.write(b"x" * (50 * 1024 * 1024))
        handle.write(b"'\n")
    with pytest.raises(SourceError, match="larger than the 32 MiB limit"):
        load_yaml(big)


def test_unreadable_files_are_io_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceUnreadableError, match="no such file"):
        load_yaml(tmp_path / "missing.yaml")
    with pytest.raises(SourceUnreadableError, match="directory"):
        load_yaml(tmp_path)


def test_bom_is_accepted() -> None:
    assert parse_yaml(b"\xef\xbb\xbfa: 1\n").data == {"a": 1}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_escape_as_other_exceptions(raw: bytes) -> None:
    try:
        parse_yaml(raw)
    except SourceError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#\n ,?0.~")), max_size=120))
def test_yaml_shaped_noise_never_escapes(text: str) -> None:
    try:
        parse_yaml(text.encode())
    except SourceError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("kind: x\nunits:\n  - id: a\n    path: [unclosed\n", "it started at line 4, column 11: `path: [unclosed`"),
        ("a: 1\n b: 2\n", "(column 3: `b: 2`)"),
    ],
)
def test_a_yaml_error_gives_the_column_and_an_excerpt(tmp_path: Path, text: str, shown: str) -> None:
    bad = tmp_path / "knowledge.yaml"
    bad.write_text(text)
    proc = run_cli("validate", str(bad), "--format", "text")
    assert proc.returncode == 1
    assert shown in proc.stdout, proc.stdout
