"""`kcp-opa check`: every finding an evaluator writes has the one shape, and names no evaluator.

A finding carries what varies (code, rule, state, controls, message, details); the evaluator
that made it is named by the gate from the package METADATA (``custom.evaluator_id``,
``custom.evaluator_version``) through the generated union (``kcp/gate/evaluators.rego``). A
literal that names an evaluator could only disagree with the METADATA, so it is an error, as is
an evaluator package without that METADATA or a finding literal with keys of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import yaml


@dataclass(frozen=True)
class CheckFinding:
    file: str
    line: int
    severity: str
    code: str
    message: str

    def to_dict(self) -> dict[str, str | int]:
        return asdict(self)


#: The keys every finding literal has, exactly.
FINDING_KEYS = ("code", "rule", "state", "controls", "message", "details")
_EVALUATOR_KEYS = ("evaluator_id", "evaluator_version")
_PACKAGE = re.compile(r"^package\s+kcp\.evaluators\.\w+\s*$", re.MULTILINE)
_FINDINGS = re.compile(r"^findings contains \w+ if \{\s*$")
_LITERAL = re.compile(r"^(\t+)\w+ := \{\s*$")
_KEY = re.compile(r'^\t+"(\w+)":')


def finding_problems(modules: Mapping[str, str]) -> list[CheckFinding]:
    """Problems with the finding literals of every evaluator module in ``modules``."""
    out: list[CheckFinding] = []
    for name, source in sorted(modules.items()):
        if name.endswith("_test.rego") or not _PACKAGE.search(source):
            continue
        named = _package_evaluator(source)
        if named is None:
            out.append(
                CheckFinding(
                    name, 1, "error", "evaluator_metadata_missing",
                    "an evaluator package needs METADATA custom.evaluator_id and custom.evaluator_version",
                )
            )  # fmt: skip
            named = ("?", "?")
        out += _literals(name, source, named)
    return out


def _package_evaluator(source: str) -> tuple[str, str] | None:
    """(evaluator_id, evaluator_version) from the METADATA block just above ``package``."""
    package = _PACKAGE.search(source)
    lines = source[: package.start()].splitlines() if package else []
    if "# METADATA" not in lines:
        return None
    body = [line[2:] if line.startswith("# ") else line[1:] for line in lines[lines.index("# METADATA") + 1 :]]
    try:
        meta = yaml.safe_load("\n".join(body)) or {}
    except yaml.YAMLError:
        return None
    custom = meta.get("custom") if isinstance(meta, dict) else None
    if not isinstance(custom, dict) or not isinstance(custom.get("evaluator_id"), str):
        return None
    return custom["evaluator_id"], str(custom.get("evaluator_version"))


def _literals(name: str, source: str, named: tuple[str, str]) -> list[CheckFinding]:
    out: list[CheckFinding] = []
    lines = source.splitlines()
    index = 0
    while index < len(lines):
        if not _FINDINGS.match(lines[index]):
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i] == "}"), len(lines))
        block = lines[index:end]
        starts = [i for i, line in enumerate(block) if _LITERAL.match(line)]
        if not starts:
            out.append(
                CheckFinding(
                    name, index + 1, "warning", "finding_not_literal",
                    "a findings rule should bind its finding as an object literal (`finding := {...}`) so its "
                    "shape can be checked",
                )
            )  # fmt: skip
        for start in starts:
            indent = block[start][: len(block[start]) - len(block[start].lstrip("\t"))]
            keys: list[tuple[int, str]] = []
            for offset, line in enumerate(block[start + 1 :], start=start + 1):
                if line == f"{indent}}}":
                    break
                key = _KEY.match(line)
                if key and line.startswith(f'{indent}\t"'):
                    keys.append((index + offset + 1, key.group(1)))
            out += _judge(name, index + start + 1, keys, named)
        index = end + 1
    return out


def _judge(name: str, line: int, keys: list[tuple[int, str]], named: tuple[str, str]) -> list[CheckFinding]:
    out: list[CheckFinding] = []
    for at, key in keys:
        if key in _EVALUATOR_KEYS:
            declared = named[_EVALUATOR_KEYS.index(key)]
            out.append(
                CheckFinding(
                    name, at, "error", "finding_names_evaluator",
                    f"a finding does not name its evaluator: the gate gives every reason the {key} of the package "
                    f"METADATA ({declared}) through kcp/gate/evaluators.rego; remove the key",
                )
            )  # fmt: skip
    given = [k for _, k in keys if k not in _EVALUATOR_KEYS]
    if sorted(given) != sorted(FINDING_KEYS):
        missing = sorted(set(FINDING_KEYS) - set(given))
        extra = sorted(set(given) - set(FINDING_KEYS))
        out.append(
            CheckFinding(
                name, line, "error", "finding_shape",
                f"a finding has exactly the keys {', '.join(FINDING_KEYS)} (missing: {', '.join(missing) or 'none'}; "
                f"unknown: {', '.join(extra) or 'none'}); what varies goes under details",
            )
        )  # fmt: skip
    return out
