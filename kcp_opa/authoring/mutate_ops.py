"""Rego mutation operators: small, single-point changes a test suite should notice.

Text-level and line-oriented (the shipped policies are ``opa fmt``-shaped: rules start at
column 0, body expressions are indented one tab), strings and comments are never mutated
by the operator replacements. A mutant that does not compile is *invalid*: it is reported
but not scored. A line carrying ``# mutate: equivalent <reason>`` (or the line above it)
excuses the mutants of that line that survive: the change cannot alter any decision, for the
reason given. A mutant of that line the tests kill still counts as killed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kcp_opa.models.decision import RoutingState

STATES = tuple(state.value for state in RoutingState)  # strongest first
CONTROLS = (
    "standard_audit_logging",
    "user_confirmation",
    "step_up_authentication",
    "identity_verification",
    "authority_verification",
    "beneficiary_verification",
    "independent_human_approval",
    "compliance_review",
    "safe_stop",
)
COMPARISONS = {
    "==": ("!=",),
    "!=": ("==",),
    "<": (">=", "<="),
    ">": ("<=", ">="),
    "<=": (">", "<"),
    ">=": ("<", ">"),
}
EXCUSE = re.compile(r"#\s*mutate:\s*equivalent\b\s*(.*)$")
_COMPARISON = re.compile(r"==|!=|<=|>=|<|>")
_SET_OP = re.compile(r"(?<=[\w)\]}]) ([|&-]) (?=[\w({\[])")
_CODE_FIELD = re.compile(r'"code":\s*"(\w+)"')
_DEFAULT_BOOL = re.compile(r"^(default \S+ := )(true|false)\s*$")
_SINGLE_RULE = re.compile(r"^([A-Za-z_][\w.]*)(\([^)]*\))? (?:contains \S+ )?if (?!\{)(.+)$")
_CONTAINS_HEAD = re.compile(r"^[A-Za-z_][\w.]* contains ")


@dataclass(frozen=True)
class Mutant:
    """One change: lines ``start``..``end`` (1-based, inclusive) of ``file`` become ``replacement``."""

    file: str
    start: int
    end: int
    operator: str
    original: str
    replacement: str

    @property
    def key(self) -> str:
        return f"{self.file}:{self.start}:{self.operator}:{self.replacement.strip()[:80]}"

    def apply(self, source: str) -> str:
        lines = source.split("\n")
        new = [] if self.replacement == "" else self.replacement.split("\n")
        return "\n".join(lines[: self.start - 1] + new + lines[self.end :])


def code_spans(line: str) -> list[tuple[int, int, bool]]:
    """(start, end, is_code) spans of ``line``: strings are not code, a comment ends the line."""
    spans: list[tuple[int, int, bool]] = []
    i, start, n = 0, 0, len(line)
    while i < n:
        char = line[i]
        if char == "#":
            break
        if char in '"`':
            spans.append((start, i, True))
            j = i + 1
            while j < n and line[j] != char:
                j += 2 if char == '"' and line[j] == "\\" else 1
            spans.append((i, min(j + 1, n), False))
            i = start = min(j + 1, n)
            continue
        i += 1
    spans.append((start, i, True))
    return [span for span in spans if span[1] > span[0]]


def _code(line: str) -> str:
    """``line`` with strings blanked and the comment dropped (for matching only)."""
    out = []
    for start, end, is_code in code_spans(line):
        out.append(line[start:end] if is_code else '"' + " " * (end - start - 2) + '"')
    return "".join(out)


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if depth < 0:
            return False
    return depth == 0


def _innermost_open(text: str, position: int) -> str:
    stack: list[str] = []
    for char in text[:position]:
        if char in "([{":
            stack.append(char)
        elif char in ")]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _one(file: str, number: int, line: str, operator: str, new: str) -> Mutant:
    return Mutant(file, number, number, operator, line, new)


def _line_mutants(file: str, number: int, line: str, in_default: bool) -> Iterator[Mutant]:
    code = _code(line)
    for match in _COMPARISON.finditer(code):
        token = match.group(0)
        if token in ("<", ">") and code[match.start() - 1 : match.start()] in ("<", ">", "=", "!", ":"):
            continue
        for swap in COMPARISONS[token]:
            kind = "boundary" if swap.rstrip("=") == token.rstrip("=") else "comparison"
            yield _one(file, number, line, kind, line[: match.start()] + swap + line[match.end() :])
    for match in _SET_OP.finditer(code):
        if _innermost_open(code, match.start()) in ("[", "{") and match.group(1) == "|":
            continue  # the bar of a comprehension
        if match.group(1) == "-" and re.match(r"\d", code[match.end() :]):
            continue  # arithmetic
        for swap in {"|": "&", "&": "|", "-": "&"}[match.group(1)]:
            new = line[: match.start(1)] + swap + line[match.end(1) :]
            yield _one(file, number, line, "set-operation", new)
    for start, end, is_code in code_spans(line):
        if is_code:
            continue
        literal = line[start + 1 : end - 1]
        if literal in STATES:
            swap = STATES[STATES.index(literal) + 1] if literal != "ALLOW" else "USER_CONFIRMATION"
            yield _one(file, number, line, "routing-state", line[: start + 1] + swap + line[end - 1 :])
        elif literal in CONTROLS:
            swap = CONTROLS[(CONTROLS.index(literal) + 1) % len(CONTROLS)]
            yield _one(file, number, line, "control", line[: start + 1] + swap + line[end - 1 :])
    for match in _CODE_FIELD.finditer(line):
        new = line[: match.end(1)] + "_mutated" + line[match.end(1) :]
        yield _one(file, number, line, "reason-code", new)
    default = _DEFAULT_BOOL.match(line)
    if default:
        flipped = "false" if default.group(2) == "true" else "true"
        yield _one(file, number, line, "default", default.group(1) + flipped)
    if in_default:
        for match in re.finditer(r"\b(true|false)\b", code):
            flipped = "false" if match.group(1) == "true" else "true"
            yield _one(file, number, line, "default", line[: match.start()] + flipped + line[match.end() :])


def _is_expression(code: str) -> bool:
    stripped = code.strip()
    return (
        bool(stripped)
        and _balanced(stripped)
        and not re.search(r":=|(?<![=!<>:])=(?!=)", stripped)
        and not stripped.startswith(("some ", "every ", "not ", "#", "}", "else"))
        and not stripped.endswith(("{", "[", "(", ","))
    )


def generate(file: str, source: str) -> list[Mutant]:
    """Every mutant of one policy module, in line order."""
    lines = source.split("\n")
    heads: dict[str, int] = {}
    for line in lines:
        if line.startswith("default "):  # a rule with a default: dropping a body falls back to it
            name = _rule_name(line[len("default ") :])
            heads[name] = heads.get(name, 0) + 1
        match = _SINGLE_RULE.match(line) or re.match(r"^([A-Za-z_][\w.]*)(\([^)]*\))? (?:contains \S+ )?if \{", line)
        if match:
            heads[match.group(1)] = heads.get(match.group(1), 0) + 1
    mutants: list[Mutant] = []
    block_start: int | None = None
    block_is_default = block_is_contains = False
    for index, line in enumerate(lines):
        number = index + 1
        code = _code(line)
        if not code.strip() or line.startswith(("package ", "import ")):
            continue
        at_column_0 = not line[:1].isspace()
        if at_column_0 and block_start is None and code.rstrip().endswith("{") and not line.startswith("}"):
            block_start = number
            block_is_default = line.startswith("default ")
            block_is_contains = bool(_CONTAINS_HEAD.match(line))
        elif at_column_0 and line.startswith("}") and block_start is not None:
            if block_is_contains or _rule_name(lines[block_start - 1]) in _multi(heads):
                text = "\n".join(lines[block_start - 1 : number])
                mutants.append(Mutant(file, block_start, number, "drop-rule", text, ""))
            block_start = None
            block_is_default = block_is_contains = False
            continue
        mutants.extend(_line_mutants(file, number, line, block_is_default))
        single = _SINGLE_RULE.match(line) if at_column_0 and block_start is None else None
        if single:
            condition = single.group(3)
            if _is_expression(_code(condition)):
                cut = line.rindex(condition)
                mutants.append(_one(file, number, line, "negation", line[:cut] + "not " + condition))
            elif condition.startswith("not "):
                cut = line.rindex(condition)
                mutants.append(_one(file, number, line, "negation", line[:cut] + condition[4:]))
            if _CONTAINS_HEAD.match(line) or single.group(1) in _multi(heads):
                mutants.append(_one(file, number, line, "drop-rule", ""))
        if block_start is not None and number > block_start and line.startswith("\t") and not line.startswith("\t\t"):
            body = line[1:]
            if body.startswith("not ") and _balanced(_code(body)):
                mutants.append(_one(file, number, line, "negation", "\t" + body[4:]))
            elif _is_expression(_code(body)) and not block_is_default:
                mutants.append(_one(file, number, line, "negation", "\tnot " + body))
            if _balanced(_code(body)) and not block_is_default and not body.startswith("}"):
                mutants.append(_one(file, number, line, "drop-expression", ""))
    return mutants


def _rule_name(line: str) -> str:
    match = re.match(r"^([A-Za-z_][\w.]*)", line)
    return match.group(1) if match else ""


def _multi(heads: dict[str, int]) -> set[str]:
    return {name for name, count in heads.items() if count > 1}


def excuse(source_lines: Sequence[str], mutant: Mutant) -> str | None:
    """The reason an equivalent mutant is excused (None if it is not)."""
    for number in (mutant.start, mutant.start - 1):
        if 1 <= number <= len(source_lines):
            match = EXCUSE.search(source_lines[number - 1])
            if match and (number == mutant.start or source_lines[number - 1].lstrip().startswith("#")):
                return match.group(1).strip() or None
    return None
