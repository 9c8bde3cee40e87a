"""Findings about a source file: errors reject it, warnings only inform.

Every finding names the file, the YAML path (``units[2].delegation.max_depth``) and, when the
source still has it, the line, because the person fixing a manifest needs all three.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Generic, TypeVar

from kcp_opa.core.jsonread import JsonDict, JsonObject

PathPart = str | int
YamlPath = tuple[PathPart, ...]
#: A manifest's units that are mappings, each with its index in ``units`` (the path a finding names).
Units = Sequence[tuple[int, JsonObject]]
T = TypeVar("T")
#: Diagnostics kept per file; the rest are counted, up to MAX_COUNTED (then "N+ more").
MAX_FINDINGS = 200
MAX_COUNTED = 10_000


#: Findings that name a declaration the gate would not enforce: a warning for ``validate`` (KCP
#: says ignore), an error for ``compile`` and ``validate --strict`` unless acknowledged
#: (kcp_opa.declare.unenforced). Here so that a bounded report never drops one silently.
UNENFORCED_CODES = frozenset(
    {
        "unknown_key",
        "unknown_restriction",
        "data_category_misspelt",
        "restriction_unenforced",
        "unknown_regulation",
        "unknown_access",
        "authority_value_unknown",
        "visibility_condition_incomplete",
    }
)


class Severity(StrEnum):
    """An error rejects the file; a warning informs (``validate --strict`` fails on it); a note
    is said for the record only (an accepted choice, an advisory block, an acknowledged gap)."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


def format_path(path: Sequence[PathPart]) -> str:
    """Render a path as ``units[2].delegation.max_depth`` (the root is ``$``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "$"


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    code: str
    message: str
    path: YamlPath = ()
    line: int | None = None
    file: str = ""
    #: The declared value a finding is about (an unknown restriction, an authority value), so an
    #: acknowledgement names the value as well as its place: editing it makes a new finding.
    value: str | None = None

    @property
    def location(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {format_path(self.path)}"

    def __str__(self) -> str:
        return f"{self.location}: {self.severity.value}: {self.message} [{self.code}]"

    def to_dict(self) -> JsonDict:
        return {
            "severity": self.severity.value,
            "code": self.code,
            "message": self.message,
            "path": format_path(self.path),
            "line": self.line,
            "file": self.file,
        }


@dataclass
class Findings:
    """Collects diagnostics while a source is checked; positions are filled in later.

    Bounded: the first ``limit`` diagnostics are kept, later ones only counted (``dropped``), so
    a manifest with 100,000 broken units costs what 100 do to report (docs/fail-closed.md).
    """

    items: list[Diagnostic] = field(default_factory=list)
    limit: int = MAX_FINDINGS
    dropped: int = 0
    has_errors: bool = False
    dropped_unenforced: set[str] = field(default_factory=set)

    @property
    def full(self) -> bool:
        """True once ``limit`` diagnostics are kept: callers may skip costly wording."""
        return len(self.items) >= self.limit

    def _add(self, item: Diagnostic) -> None:
        if len(self.items) < self.limit:
            self.items.append(item)
        else:
            self.dropped += 1
            if item.code in UNENFORCED_CODES and item.severity is Severity.WARNING:
                self.dropped_unenforced.add(item.code)

    def error(self, code: str, message: str, path: Iterable[PathPart] = ()) -> None:
        self.has_errors = True
        self._add(Diagnostic(Severity.ERROR, code, message, tuple(path)))

    def warn(self, code: str, message: str, path: Iterable[PathPart] = (), *, value: str | None = None) -> None:
        self._add(Diagnostic(Severity.WARNING, code, message, tuple(path), value=value))

    def note(self, code: str, message: str, path: Iterable[PathPart] = ()) -> None:
        self._add(Diagnostic(Severity.NOTE, code, message, tuple(path)))

    def unknown(
        self, code: str, noun: str, value: object, choices: Sequence[str], path: YamlPath, effect: str = ""
    ) -> None:
        """Warn when the string ``value`` is outside the open vocabulary ``choices`` (KCP: a
        validator warns, never rejects); a value of another type is the schema's to refuse."""
        if isinstance(value, str) and value not in choices:
            joined = ", ".join(choices)
            self.warn(code, f"{noun} {value!r} is not one of {joined}{effect}{did_you_mean(value, choices)}", path)

    def close(self) -> None:
        """Append the count of what was not kept, as an error (a truncated report is never valid);
        and, when a dropped finding named an unenforced declaration, one warning with its code, so
        that compile still refuses what it cannot show."""
        if self.dropped_unenforced:
            codes = sorted(self.dropped_unenforced)
            self.items.append(
                Diagnostic(
                    Severity.WARNING,
                    codes[0],
                    f"more declarations the gate would not enforce ({', '.join(codes)}) are past the first "
                    f"{self.limit} findings and not shown: fix the ones shown and validate again",
                    (),
                )
            )
            self.dropped_unenforced = set()
        if self.dropped:
            more = f"{self.dropped:,}" + ("+" if self.dropped >= MAX_COUNTED else "")
            self.items.append(
                Diagnostic(
                    Severity.ERROR if self.has_errors else Severity.WARNING,
                    "findings_truncated",
                    f"{more} more findings not shown (the first {self.limit} are)",
                    (),
                )
            )
            self.dropped = 0

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity is Severity.WARNING]


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix for near misses such as ``no_ai_training``."""
    options = list(choices)
    normalised = _normalised(value)
    for choice in options:
        if _normalised(choice) == normalised:
            return f" (did you mean {choice!r}?)"
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _normalised(text: str) -> str:
    return text.lower().replace("_", "-").replace(" ", "-")


@dataclass(frozen=True)
class Report(Generic[T]):
    """What ``validate`` says about one file; ``document`` is set only when its own checks passed.

    A check across files (exceptions against the matrix) may add an error after the document was
    built, so valid also asks that no error was found: a report never says valid beside an error.
    """

    file: str
    diagnostics: tuple[Diagnostic, ...]
    counts: Mapping[str, int]
    document: T | None

    @property
    def valid(self) -> bool:
        return self.document is not None and not self.errors

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.WARNING]

    @property
    def notes(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.NOTE]

    def to_dict(self) -> JsonDict:
        return {
            "file": self.file,
            "valid": self.valid,
            "errors": [d.to_dict() for d in self.errors],
            "warnings": [d.to_dict() for d in self.warnings],
            "notes": [d.to_dict() for d in self.notes],
            **self.counts,
        }


def unreadable_report(file: str, reason: str, line: int | None, counts: Mapping[str, int]) -> Report[T]:
    diag = Diagnostic(Severity.ERROR, "unreadable", reason, (), line, file)
    return Report(file, (diag,), counts, None)


def locate(findings: Findings, file: str, line_of: Callable[[YamlPath], int | None]) -> tuple[Diagnostic, ...]:
    """Attach file and line to findings collected by path only."""
    return tuple(replace(d, line=line_of(d.path), file=file) for d in findings.items)
