"""Run Rego unit tests the way ``opa test`` does, on regopy and on the OPA reference engine.

Discovery: every ``test_*`` rule in a ``*_test.rego`` file is a test, every ``todo_*`` rule is
reported as skipped. regopy runs in child processes, because some policies abort rego-cpp
(docs/engine-findings.md): one child takes the test files one after another, planning the
policies and that file only (regopy plans every module it is given, so a neighbour's aborting
file must not be loaded) and reporting each file as it finishes. Each file has its own time
limit (CHILD_TIMEOUT_S), counted from the previous file's report: a loaded machine is slower,
not red. A file whose child dies is run again test by test; the test that aborts the engine is
an ERROR naming the line of the construct, and every other test still runs; a fresh child
takes the files left. A test file
whose first line is ``# kcp-opa: engines=opa`` runs on OPA only (regopy: SKIP, with the reason
the file gives on the next lines).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from kcp_opa.authoring.regochild import regopy_child, regopy_files
from kcp_opa.authoring.regosyntax import OPA_ONLY, syntax_problems
from kcp_opa.core.jsonread import JsonObject, integer, mapping, number, objects

if TYPE_CHECKING:
    from opa_bindings import OpaEngine

_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_RULE = re.compile(r"^((?:test|todo)_\w+)\b", re.MULTILINE)
ABORT_HINT = (
    "regopy aborted while planning this test. The known trigger is `x in coll` inside a rule "
    "evaluated under `with input as {...}` or `with input.<coll> as [...]` (docs/engine-findings.md "
    "hazard 4, engine-findings item 17): mock a different field, or write the rule as "
    "`some y in coll; y == x` / `coll[_] == x`"
)


class Outcome(enum.StrEnum):
    PASS = "PASS"  # noqa: S105 (an outcome, not a password)
    FAIL = "FAIL"
    ERROR = "ERROR"
    SKIP = "SKIP"


@dataclass(frozen=True)
class RegoTest:
    file: str
    package: str
    rule: str
    line: int
    opa_only: bool

    @property
    def name(self) -> str:
        return f"data.{self.package}.{self.rule}"

    @property
    def entrypoint(self) -> str:
        return f"{self.package.replace('.', '/')}/{self.rule}"

    @property
    def todo(self) -> bool:
        return self.rule.startswith("todo_")


@dataclass(frozen=True)
class EngineResult:
    outcome: Outcome
    detail: str = ""


@dataclass
class TestResult:
    test: RegoTest
    engines: dict[str, EngineResult] = field(default_factory=dict)
    explain: list[str] = field(default_factory=list)  # kcp-opa test --explain (regoexplain.py)

    @property
    def divergent(self) -> bool:
        ran = [r.outcome for r in self.engines.values() if r.outcome is not Outcome.SKIP]
        return len(set(ran)) > 1

    @property
    def outcome(self) -> Outcome:
        outcomes = [r.outcome for r in self.engines.values()]
        if Outcome.ERROR in outcomes:
            return Outcome.ERROR
        if self.divergent:
            return Outcome.FAIL
        for worst in (Outcome.FAIL, Outcome.PASS):
            if worst in outcomes:
                return worst
        return Outcome.SKIP


def discover(modules: Mapping[str, str], run: str | None = None) -> list[RegoTest]:
    pattern = re.compile(run) if run else None
    tests = []
    for name, source in sorted(modules.items()):
        if not name.endswith("_test.rego"):
            continue
        package = _PACKAGE.search(source)
        if package is None:
            continue
        seen: set[str] = set()
        for match in _RULE.finditer(source):
            rule = match.group(1)
            if rule in seen:
                continue
            seen.add(rule)
            test = RegoTest(name, package.group(1), rule, source.count("\n", 0, match.start()) + 1, _opa_only(source))
            if pattern is None or pattern.search(test.name):
                tests.append(test)
    return tests


def _opa_only(source: str) -> bool:
    return source.startswith(OPA_ONLY)


def _skip_reason(source: str) -> str:
    lines = [line.lstrip("# ").strip() for line in source.splitlines()[1:4] if line.startswith("#")]
    return " ".join(lines) or "marked engines=opa"


def only_test(source: str, keep: str) -> str:
    """``source`` without the test/todo rules other than ``keep`` (rules start at column 0)."""
    lines = source.splitlines(keepends=True)
    out, dropping = [], False
    for line in lines:
        starts_rule = bool(line[:1].strip()) and not line.startswith(("}", ")", "]", "#"))
        if starts_rule:
            match = _RULE.match(line)
            dropping = match is not None and match.group(1) != keep
        if not dropping:
            out.append(line)
    return "".join(out)


def _judge(found: object) -> EngineResult:
    if found is None:
        return EngineResult(Outcome.ERROR, "no result")
    raw = mapping(found)
    if "error" in raw:
        text = str(raw["error"])
        if text.strip() == "<error>":
            text = "evaluation error (regopy gives no detail: e.g. conflicting rule values or a builtin error)"
        return EngineResult(Outcome.ERROR, text)
    value = raw.get("value")
    if value is True:
        return EngineResult(Outcome.PASS)
    return EngineResult(Outcome.FAIL, "undefined" if value is None else f"evaluated to {json.dumps(value)[:200]}")


def run_regopy(modules: Mapping[str, str], tests: Sequence[RegoTest]) -> dict[str, EngineResult]:
    """regopy outcome per test name, surviving engine aborts by narrowing the child's work."""
    runnable = [t for t in tests if not t.opa_only and not t.todo]
    results: dict[str, EngineResult] = {}
    for test in tests:
        if test.todo:
            results[test.name] = EngineResult(Outcome.SKIP, "todo")
        elif test.opa_only:
            results[test.name] = EngineResult(Outcome.SKIP, _skip_reason(modules[test.file]))
    loadable = {name: source for name, source in modules.items() if not _opa_only(source)}
    by_file: dict[str, list[RegoTest]] = {}
    for test in runnable:
        by_file.setdefault(test.file, []).append(test)
    policy = {name: source for name, source in loadable.items() if not name.endswith("_test.rego")}
    files = [(name, loadable[name], [t.entrypoint for t in group]) for name, group in sorted(by_file.items())]
    for name, out in regopy_files(policy, files).items():
        group = by_file[name]
        if out is not None and "__timeout__" in out:
            _timed_out(group, number(out["__timeout__"]) or 0.0, results)
        elif out is not None and "__build_error__" not in out:
            for test in group:
                results[test.name] = _judge(out.get(test.entrypoint))
        else:  # the engine died or could not plan the file: test by test, so one test takes only itself down
            _run_group(_with_one_test_file(loadable, name), group, results, split=False)
    return results


def _timed_out(tests: Sequence[RegoTest], seconds: float, results: dict[str, EngineResult]) -> None:
    for test in tests:
        results[test.name] = EngineResult(
            Outcome.ERROR,
            f"regopy did not finish planning and running {test.file} in {seconds:g} s (engine-findings item 12); "
            "mark the file `# kcp-opa: engines=opa` with the reason, or test the rule over a compiled bundle",
        )


def _run_group(
    modules: Mapping[str, str], tests: Sequence[RegoTest], results: dict[str, EngineResult], *, split: bool
) -> None:
    if not tests:
        return
    out = regopy_child(modules, [t.entrypoint for t in tests])
    if out is not None and "__timeout__" in out:
        _timed_out(tests, number(out["__timeout__"]) or 0.0, results)
        return
    if out is not None and "__build_error__" not in out:
        for test in tests:
            results[test.name] = _judge(out.get(test.entrypoint))
        return
    if len(tests) == 1:
        # regopy plans every rule of every module, not only the entrypoint: run the test with
        # the other test rules of its file removed, so one aborting test does not take its
        # neighbours down with it.
        test = tests[0]
        alone = {**modules, test.file: only_test(modules[test.file], test.rule)}
        solo = regopy_child(alone, [test.entrypoint]) if alone != modules else out
        if solo is not None and "__build_error__" not in solo and "__timeout__" not in solo:
            results[test.name] = _judge(solo.get(test.entrypoint))
            return
        if solo is None:
            detail = _abort_detail(modules[test.file], test)
        elif "__timeout__" in solo:
            detail = f"regopy did not finish planning in {solo['__timeout__']:g} s"
        else:
            detail = f"regopy cannot compile it: {str(solo['__build_error__'])[:400]}"
        results[test.name] = EngineResult(Outcome.ERROR, detail)
        return
    by_file: dict[str, list[RegoTest]] = {}
    for test in tests:
        by_file.setdefault(test.file, []).append(test)
    if split:
        for file, group in by_file.items():
            _run_group(_with_one_test_file(modules, file), group, results, split=False)
    else:
        for test in tests:
            _run_group(modules, [test], results, split=False)


def _with_one_test_file(modules: Mapping[str, str], keep: str) -> dict[str, str]:
    """The policy modules and one test file: another test file that aborts regopy stays out."""
    return {name: source for name, source in modules.items() if name == keep or not name.endswith("_test.rego")}


def _abort_detail(source: str, test: RegoTest) -> str:
    """ABORT_HINT, pointing at the first `with input` line of the test rule when there is one."""
    lines = source.splitlines()
    for row in range(test.line, len(lines) + 1):
        text = lines[row - 1]
        if row > test.line and text[:1].strip() and not text.startswith(("}", "#")):
            break  # the next rule starts: the test has no `with input`
        if "with input" in text:
            return f"{test.file}:{row}: {ABORT_HINT}"
    return ABORT_HINT


def run_opa(
    modules: Mapping[str, str], tests: Sequence[RegoTest], *, coverage: bool = False
) -> tuple[dict[str, EngineResult], CoverageReport | None]:
    """OPA outcome per test name (None if OPA is not installed), with merged coverage."""
    try:
        from opa_bindings import OpaEngine
    except ImportError:
        return {}, None
    engine = OpaEngine()
    results: dict[str, EngineResult] = {}
    try:
        for name, source in sorted(modules.items()):
            engine.add_policy(name, source)
    except Exception as exc:  # a module OPA cannot compile fails every test
        detail = " ".join(str(exc).split())[:500]
        engine.close()
        return {t.name: EngineResult(Outcome.ERROR, f"OPA cannot compile: {detail}") for t in tests}, None
    merged = CoverageMerger() if coverage else None
    for test in tests:
        if test.todo:
            results[test.name] = EngineResult(Outcome.SKIP, "todo")
            continue
        try:
            bindings = engine.eval_query(f"x := {test.name}", {}, coverage=coverage)
        except Exception as exc:
            results[test.name] = EngineResult(Outcome.ERROR, " ".join(str(exc).split())[:500])
            continue
        if merged is not None and engine.last_coverage:
            merged.add(engine.last_coverage)
        results[test.name] = _judge({"value": bindings[0].get("x") if bindings else None})
    engine.close()
    return results, merged.report() if merged is not None else None


class FileCoverage(TypedDict):
    covered: list[int]
    covered_lines: int
    not_covered_lines: int
    coverage: float
    not_covered: list[int]


class CoverageReport(TypedDict):
    """OPA's coverage merged: the lines of each policy file, and the percentage over them all."""

    files: dict[str, FileCoverage]
    coverage: float


class CoverageMerger:
    """Union of covered lines across evaluations (a line covered once is covered)."""

    def __init__(self) -> None:
        self.covered: dict[str, set[int]] = {}
        self.seen: dict[str, set[int]] = {}

    def add(self, report: JsonObject) -> None:
        """One evaluation's coverage (OPA's: ``files.<name>.covered``/``not_covered`` row spans)."""
        for file, spans in mapping(report.get("files")).items():
            covered = self.covered.setdefault(file, set())
            seen = self.seen.setdefault(file, set())
            for span in objects(mapping(spans).get("covered")):
                covered.update(_rows(span))
                seen.update(_rows(span))
            for span in objects(mapping(spans).get("not_covered")):
                seen.update(_rows(span))

    def report(self) -> CoverageReport:
        files: dict[str, FileCoverage] = {}
        total_covered = total_seen = 0
        for file in sorted(self.seen):
            covered = self.covered.get(file, set())
            missed = sorted(self.seen[file] - covered)
            files[file] = {
                "covered": sorted(covered),
                "covered_lines": len(covered),
                "not_covered_lines": len(missed),
                "coverage": 100.0 * len(covered) / len(self.seen[file]) if self.seen[file] else 100.0,
                "not_covered": missed,
            }
            total_covered += len(covered)
            total_seen += len(self.seen[file])
        return {"files": files, "coverage": 100.0 * total_covered / total_seen if total_seen else 100.0}


def _rows(span: JsonObject) -> range:
    """The rows of one coverage span, ``start.row`` to ``end.row``."""
    start, end = (integer(mapping(span.get(edge)).get("row")) for edge in ("start", "end"))
    if start is None or end is None:
        raise TypeError("a coverage span without start and end rows")
    return range(start, end + 1)


def opa_installed() -> bool:
    try:
        import opa_bindings  # noqa: F401
    except ImportError:
        return False
    return True


def opa_engine(modules: Mapping[str, str], data: JsonObject | None = None) -> OpaEngine:
    """The OPA reference engine with MODULES (in name order) and DATA loaded."""
    from opa_bindings import OpaEngine

    engine = OpaEngine()
    for name, source in sorted(modules.items()):
        engine.add_policy(name, source)
    if data is not None:
        engine.add_data(dict(data))
    return engine


def run_tests(
    modules: Mapping[str, str],
    tests: Sequence[RegoTest],
    engines: Iterable[str] = ("regopy", "opa"),
    *,
    coverage: bool = False,
) -> tuple[list[TestResult], CoverageReport | None]:
    wanted = set(engines)
    combined = {t.name: TestResult(t) for t in tests}
    coverage_report = None
    broken = syntax_problems(modules, wanted) if tests else []
    if broken:  # nothing runs: every test names the parse error (its own file's) on each engine
        for held in combined.values():
            for engine in sorted(wanted):
                own = [str(p) for p in broken if p.engine == engine and p.file == held.test.file]
                others = sorted({p.file for p in broken if p.file != held.test.file})
                detail = "; ".join(own) or f"not run: {', '.join(others)} does not parse"
                held.engines[engine] = EngineResult(Outcome.ERROR, detail)
        return list(combined.values()), None
    if "regopy" in wanted:
        for name, result in run_regopy(modules, tests).items():
            combined[name].engines["regopy"] = result
    if "opa" in wanted:
        opa_results, coverage_report = run_opa(modules, tests, coverage=coverage)
        for name, result in opa_results.items():
            combined[name].engines["opa"] = result
    return list(combined.values()), coverage_report
