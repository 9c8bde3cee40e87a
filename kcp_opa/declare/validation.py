"""The one validation pipeline that manifests and matrices share: read YAML, check the schema,
run the kind's own checks, attach lines, and build the typed document only when valid.

A validation is a function of the file's bytes alone, so a report is reused while its caller
still holds it: ``compile`` right after ``validate`` in one process (an authoring tool, a host,
the benchmark) parses and checks a 100,000-unit manifest once, not twice. The reports are held
weakly, keyed by kind, file name and sha256 of the bytes read: nothing is kept alive for them,
and a file edited in between is validated afresh.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from kcp_opa import schemas
from kcp_opa.core.bulk import collector_paused
from kcp_opa.core.errors import SourceError, SourceUnreadableError, ValidationFailedError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.declare.diagnostics import Findings, Report, locate, unreadable_report
from kcp_opa.declare.schema_findings import check_schema
from kcp_opa.declare.yamlsource import YamlSource, parse_yaml, read_bounded

T = TypeVar("T")


@dataclass(frozen=True)
class DocumentKind(Generic[T]):
    noun: str
    schema: str
    check: Callable[[JsonObject, Findings], None]
    counts: Callable[[JsonObject], dict[str, int]]
    build: Callable[[YamlSource], T]
    #: (file, sha256 of its bytes) -> the report on those bytes, while someone holds it.
    held: weakref.WeakValueDictionary[tuple[str, str], Report[T]] = field(
        default_factory=weakref.WeakValueDictionary, compare=False, repr=False
    )


@collector_paused()
def validate_file(kind: DocumentKind[T], path: str | Path, max_bytes: int) -> Report[T]:
    """I/O failures raise :class:`SourceUnreadableError`; content that is not readable YAML
    comes back as an invalid report with one error, like any other finding."""
    file = str(path)
    try:
        raw = read_bounded(Path(path), file, max_bytes)
        digest = hashlib.sha256(raw).hexdigest()
        key = (file, digest)
        held = kind.held.get(key)
        if held is not None:
            return held
        source = parse_yaml(raw, file=file, sha256=digest)
    except SourceUnreadableError:
        raise
    except SourceError as exc:
        return unreadable_report(file, exc.reason, exc.line, kind.counts({}))
    report = validate_yaml(kind, source)
    kind.held[key] = report
    return report


def validate_yaml(kind: DocumentKind[T], source: YamlSource) -> Report[T]:
    findings = Findings()
    data = source.data
    if isinstance(data, dict):
        check_schema(schemas.validator(kind.schema), data, findings, schemas.fast_validator(kind.schema))
        if not findings.full:  # semantic checks word every finding; past the cap only counts matter
            kind.check(data, findings)
    else:
        findings.error("not_a_mapping", f"a {kind.noun} is a mapping of keys, got {type(data).__name__}")
        data = {}
    findings.close()
    document = None if findings.errors else kind.build(source)
    return Report(source.file, locate(findings, source.file, source.line_of), kind.counts(data), document)


def load_file(kind: DocumentKind[T], path: str | Path, max_bytes: int) -> T:
    """The typed document, or :class:`ValidationFailedError` listing every error."""
    report = validate_file(kind, path, max_bytes)
    if report.document is None:
        raise ValidationFailedError(report.file, [str(d) for d in report.errors])
    return report.document
