"""Read a YAML file as plain data, safely, with YAML 1.2 scalars and positions kept for errors.

PyYAML resolves scalars by YAML 1.1, where ``NO`` (Norway, a data-residency value) is ``False``
and ``2026-01-31`` is a date object. KCP is YAML 1.2, so this module composes with libyaml and
resolves scalars by the 1.2 core schema itself. It also refuses what a safe reader of
compliance declarations must refuse: object-constructing tags, duplicate keys (PyYAML keeps the
last silently), alias bombs, absurd nesting and oversized files.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kcp_opa.core.bulk import collector_paused
from kcp_opa.core.errors import SourceError, SourceUnreadableError
from kcp_opa.core.files import read_regular
from kcp_opa.declare.diagnostics import PathPart

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 64
#: Alias expansion may grow a document this many times over its written size before it is
#: treated as a "billion laughs" bomb; small documents get a fixed allowance.
MAX_EXPANSION_RATIO = 10
MIN_EXPANSION_ALLOWANCE = 100_000
#: Longest integer literal accepted (the JSON reader's limit, core/strictjson.py).
MAX_INT_DIGITS = 64

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"

_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class _Core12Resolver(yaml.resolver.BaseResolver):
    """YAML 1.2 core schema: only true/false are booleans, no dates, no sexagesimal."""


_Core12Resolver.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Core12Resolver.add_implicit_resolver(_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_Core12Resolver.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
_Core12Resolver.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))

if yaml.__with_libyaml__:
    from yaml.cyaml import CParser  # type: ignore[attr-defined]

    class _Composer(CParser, _Core12Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Core12Resolver.__init__(self)

else:  # pragma: no cover - wheels ship libyaml; the pure-Python path is a slow fallback

    class _Composer(  # type: ignore[no-redef]
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        _Core12Resolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Core12Resolver.__init__(self)


@dataclass(frozen=True)
class YamlSource:
    """A parsed YAML file: its data, its sha256, and its node tree for error positions."""

    file: str
    data: Any
    sha256: str
    size: int
    root: Node

    def line_of(self, path: Sequence[PathPart]) -> int | None:
        """1-based line of the deepest node on ``path`` that exists in the source."""
        node: Node = self.root
        line = node.start_mark.line
        for part in path:
            child = _child(node, part)
            if child is None:
                break
            node, line = child
        return line + 1


def _child(node: Node, part: PathPart) -> tuple[Node, int] | None:
    """The child node and the 0-based line that names it: a key's own line when its value is a
    block starting below it (``task_types:`` then the rows), else the value's line."""
    if isinstance(node, MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == part:
                found: Node = value
                collection = isinstance(found, MappingNode | SequenceNode)
                return found, key.start_mark.line if collection else found.start_mark.line
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        child: Node = node.value[part]
        return child, child.start_mark.line
    return None


def load_yaml(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> YamlSource:
    """Load one YAML document from ``path``; every failure is a one-line :class:`SourceError`."""
    file = str(path)
    raw = _read_bounded(Path(path), file, max_bytes)
    return parse_yaml(raw, file=file)


@collector_paused()
def parse_yaml(raw: bytes, *, file: str = "<input>", sha256: str | None = None) -> YamlSource:
    """``sha256``: the caller's digest of ``raw``, when it has one already."""
    if b"\x00" in raw:
        line = raw[: raw.index(b"\x00")].count(b"\n") + 1
        raise SourceError(file, "binary data (NUL bytes): not a YAML text file", line)
    raw_text = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw_text.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw_text[: exc.start].count(b"\n") + 1
        raise SourceError(file, f"not UTF-8: invalid byte at offset {exc.start}", line) from None
    root = _compose(text, file)
    if "&" in text:
        # An alias needs an anchor, and an anchor is written with "&": only then can nodes be
        # shared, so only then is a whole walk to bound their expansion needed before building.
        _check_shape(root, file)
    data = _construct(root, file, depth=0)
    return YamlSource(file, data, sha256 or hashlib.sha256(raw).hexdigest(), len(raw), root)


def read_bounded(path: Path, file: str, max_bytes: int) -> bytes:
    """The file's bytes, refused past ``max_bytes`` (I/O errors as :class:`SourceUnreadableError`)."""
    return _read_bounded(path, file, max_bytes)


def _read_bounded(path: Path, file: str, max_bytes: int) -> bytes:
    try:
        raw = read_regular(path, max_bytes)  # a directory, FIFO or device: refused before any read
    except FileNotFoundError:
        raise SourceUnreadableError(file, "no such file") from None
    except PermissionError:
        raise SourceUnreadableError(file, "permission denied") from None
    except OSError as exc:
        what = exc.strerror or str(exc)
        raise SourceUnreadableError(file, what if what.startswith("is ") else f"cannot read: {what}") from None
    if len(raw) > max_bytes:
        raise SourceError(
            file,
            f"larger than the {max_bytes // (1024 * 1024)} MiB limit (raise it with --max-bytes)",
        )
    return raw


def _compose(text: str, file: str) -> Node:
    composer = _Composer(text)
    try:
        node: Node | None = composer.get_single_node()
    except yaml.composer.ComposerError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise SourceError(file, f"not YAML: {exc.problem or exc}{_where(exc, text)}", line) from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise SourceError(file, f"not YAML: {exc.problem or exc.context}{_where(exc, text)}", line) from None
    except yaml.YAMLError as exc:
        raise SourceError(file, f"not YAML: {str(exc).splitlines()[0]}") from None
    finally:
        dispose = getattr(composer, "dispose", None)
        if dispose is not None:
            dispose()
    if node is None:
        raise SourceError(file, "empty document")
    assert isinstance(node, Node)
    return node


def _where(exc: yaml.MarkedYAMLError, text: str) -> str:
    """The column and an excerpt of the line the parser stopped on (or, past the end of the
    file, of the line where the unclosed construct began), so the mistake can be found."""
    lines = text.splitlines()
    marks = [m for m in (exc.problem_mark, exc.context_mark) if m is not None]
    for mark in marks:
        if mark.line < len(lines) and lines[mark.line].strip():
            excerpt = lines[mark.line].strip()
            excerpt = excerpt if len(excerpt) <= 60 else excerpt[:57] + "..."
            if mark is marks[0]:
                return f" (column {mark.column + 1}: `{excerpt}`)"
            return f" (it started at line {mark.line + 1}, column {mark.column + 1}: `{excerpt}`)"
    return f" (column {marks[0].column + 1})" if marks else ""


def _check_shape(root: Node, file: str) -> None:
    """Reject alias bombs, recursive aliases and deep nesting before building any data."""
    expanded: dict[int, int] = {}
    physical: set[int] = set()
    active: set[int] = set()

    def size(node: Node, depth: int) -> int:
        ident = id(node)
        if depth > MAX_DEPTH:
            raise SourceError(file, f"nested deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
        if ident in expanded:
            return expanded[ident]
        if ident in active:
            raise SourceError(file, "recursive alias (a node contains itself)", node.start_mark.line + 1)
        physical.add(ident)
        total = 1
        if isinstance(node, MappingNode | SequenceNode):
            active.add(ident)
            children = [c for pair in node.value for c in pair] if isinstance(node, MappingNode) else node.value
            for child in children:
                total += size(child, depth + 1)
            active.discard(ident)
        expanded[ident] = total
        return total

    total = size(root, 0)
    allowance = max(MIN_EXPANSION_ALLOWANCE, MAX_EXPANSION_RATIO * len(physical))
    if total > allowance:
        raise SourceError(
            file,
            f"aliases expand {len(physical)} written nodes into {total}: refused as a YAML bomb",
            root.start_mark.line + 1,
        )


def _construct(node: Node, file: str, depth: int) -> object:
    line = node.start_mark.line + 1
    if depth > MAX_DEPTH:  # _check_shape's bound, for documents it was not run on
        raise SourceError(file, f"nested deeper than {MAX_DEPTH} levels", line)
    if isinstance(node, ScalarNode):
        return _scalar(node, file, line)
    if isinstance(node, SequenceNode):
        if node.tag != _SEQ:
            raise SourceError(file, _refused_tag(node.tag), line)
        return [_construct(child, file, depth + 1) for child in node.value]
    if isinstance(node, MappingNode):
        if node.tag != _MAP:
            raise SourceError(file, _refused_tag(node.tag), line)
        out: dict[str, object] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                raise SourceError(file, "only plain string keys are supported (no merge keys)", key_line)
            key = _scalar(key_node, file, key_line)
            if key_node.value == "<<" and key_node.style not in ("'", '"'):
                raise SourceError(file, "merge keys (<<) are not YAML 1.2; write the keys out", key_line)
            if not isinstance(key, str):
                raise SourceError(file, f"mapping key {key_node.value!r} must be a string", key_line)
            if key in seen:
                raise SourceError(file, f"duplicate key {key!r} (first at line {seen[key]})", key_line)
            seen[key] = key_line
            out[key] = _construct(value_node, file, depth + 1)
        return out
    raise SourceError(file, "unsupported YAML node", line)  # pragma: no cover


def _scalar(node: ScalarNode, file: str, line: int) -> str | int | float | bool | None:
    tag, value = node.tag, str(node.value)
    if tag == _STR:
        return value
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return value.lower() == "true"
    if tag == _INT:
        digits = len(value.lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise SourceError(file, f"an integer of {digits} digits is over the {MAX_INT_DIGITS}-digit limit", line)
        if value.startswith(("0o", "0x")):
            return int(value[2:], 8 if value[1] == "o" else 16)
        return int(value)
    if tag == _FLOAT:
        if value.lower().endswith(("inf", "nan")) or len(value) > MAX_INT_DIGITS + 16:
            raise SourceError(file, f"non-finite number {value[:40]!r} is not allowed", line)
        number = float(value)
        if not math.isfinite(number):  # 1e999 overflows to inf
            raise SourceError(file, f"{value!r} overflows to a non-finite number", line)
        return number
    raise SourceError(file, _refused_tag(tag), line)


def _refused_tag(tag: str) -> str:
    short = tag.replace("tag:yaml.org,2002:", "!!")
    return f"tag {short} refused: only plain YAML data (maps, lists, strings, numbers, booleans, null) is accepted"
