"""Syntax errors in Rego modules, as each engine's parser words them: file, line, column, message.

A module that does not parse fails every test and every check, on both engines. Found first, it
is reported as what it is, instead of as a regopy planning abort (regopy's child dies on the parse
error) or as an engine disagreement (OPA names the parse error, regopy only dies).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Parses each module alone in a fresh interpreter (a child process: an engine crash is no crash
#: of the CLI); prints {file: [[byte offset, message], ...]} for the modules that do not parse.
_CHILD = """
import json, sys
from regopy import Interpreter
out = {}
for name, source in json.load(sys.stdin).items():
    try:
        Interpreter().add_module(name, source)
    except Exception as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""
#: A module marked so runs on OPA only: regopy neither runs nor parses it.
OPA_ONLY = "# kcp-opa: engines=opa"
_REGOPY_ERROR = re.compile(r"\(error \d+:(?P<file>[^|]*)\|(?P<offset>\d+)\|\d+\s*\(errormsg (?P<size>\d+):")
_OPA_AT = re.compile(r"(?P<file>[^\s:]+\.rego):(?P<line>\d+): rego_parse_error: (?P<message>[^\n]*)")


@dataclass(frozen=True)
class SyntaxProblem:
    engine: str
    file: str
    line: int
    column: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" + (f":{self.column}" if self.column else "")
        return f"syntax error at {where}: {self.message}"


def syntax_problems(modules: Mapping[str, str], engines: Iterable[str] = ("regopy", "opa")) -> list[SyntaxProblem]:
    """The first syntax error of each module that does not parse, on each wanted engine."""
    wanted = set(engines)
    found: list[SyntaxProblem] = []
    if "opa" in wanted:
        found += _opa(modules)
    if "regopy" in wanted:
        found += _regopy(modules)
    return sorted(found, key=lambda p: (p.file, p.engine))


def _opa(modules: Mapping[str, str]) -> list[SyntaxProblem]:
    try:
        from opa_bindings import OpaEngine
    except ImportError:
        return []
    found = []
    for name, source in sorted(modules.items()):
        engine = OpaEngine()
        try:
            engine.add_policy(name, source)
        except Exception as exc:
            text = str(exc)
            match = _OPA_AT.search(text)
            if match is not None:
                line = int(match.group("line"))
                found.append(SyntaxProblem("opa", name, line, _opa_column(text, source, line), match["message"]))
        finally:
            engine.close()
    return found


def _opa_column(text: str, source: str, line: int) -> int | None:
    """OPA shows the line (trimmed) and a caret under the spot: map the caret back to a column."""
    details = text.split("\n")
    if len(details) < 3 or details[-1].strip() != "^":
        return None
    excerpt, caret = details[-2].lstrip("\t"), details[-1].lstrip("\t")
    lines = source.splitlines()
    if not 0 < line <= len(lines) or excerpt not in lines[line - 1]:
        return None
    return lines[line - 1].index(excerpt) + caret.index("^") + 1


def _regopy(modules: Mapping[str, str]) -> list[SyntaxProblem]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps({name: source for name, source in modules.items() if not source.startswith(OPA_ONLY)}),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        # regopy prints its own error report on stdout first: the verdict is the last line.
        last = proc.stdout.strip().rsplit("\n", 1)[-1] if proc.stdout.strip() else "{}"
        failed: dict[str, str] = json.loads(last) if proc.returncode == 0 else {}
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        return []  # no verdict on syntax: the test run itself reports what happens
    found = []
    for name, text in sorted(failed.items()):
        match = _REGOPY_ERROR.search(text)
        if match is None:
            continue  # not a parse error: a later pass, which the test run reports
        start = match.end()
        message = text[start : start + int(match["size"])]
        raw = modules[name].encode("utf-8")[: int(match["offset"])]
        line = raw.count(b"\n") + 1
        column = len(raw.rsplit(b"\n", 1)[-1].decode("utf-8", errors="replace")) + 1
        found.append(SyntaxProblem("regopy", name, line, column, message))
    return found
