"""Why a Rego test failed: the expressions that failed, with the values they were evaluated on.

``kcp-opa test --explain fails`` (like ``opa test --explain fails``) re-runs each failing test on
the OPA reference engine with tracing on and shows every expression that failed: its file and
line, the source line, the expression with its operands' values, and the local variables bound
there. ``--explain full`` shows every evaluated expression of every test. regopy has no tracer;
a test both engines run alike fails on the same expression.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from kcp_opa.authoring.regotest import TestResult
from kcp_opa.core.jsonread import JsonObject, integer, objects

#: Lines of one explanation at most (a deep rule chain would print thousands).
MAX_LINES = 200


def explain_results(modules: Mapping[str, str], results: Sequence[TestResult], mode: str) -> None:
    """Attach ``explain`` lines to the failed or errored results (``fails``) or to all (``full``)."""
    for result in results:
        if mode == "full" or result.outcome.value in ("FAIL", "ERROR"):
            result.explain = explain_test(modules, result.test.name, mode)


def explain_test(modules: Mapping[str, str], entrypoint: str, mode: str) -> list[str]:
    """The explanation of one test (``data.pkg.test_x``), ``mode`` "fails" or "full"."""
    try:
        from opa_bindings import OpaEngine
    except ImportError:
        return ["(no explanation: the OPA reference engine is not installed)"]
    engine = OpaEngine()
    try:
        for name, source in sorted(modules.items()):
            engine.add_policy(name, source)
        engine.eval_query(f"x := {entrypoint}", {}, trace=True)
        events = objects(engine.last_trace)
    except Exception as exc:  # an error is already the test's outcome; say why there is no trace
        return [f"(no explanation: {' '.join(str(exc).split())[:300]})"]
    finally:
        engine.close()
    return render(events, modules, mode)


def render(events: Sequence[JsonObject], modules: Mapping[str, str], mode: str) -> list[str]:
    """One line per failed (``fails``) or evaluated (``full``) expression of the test's queries."""
    wanted = "Fail" if mode == "fails" else "Eval"
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    last_unify: dict[tuple[int, str], str] = {}
    for event in events:
        if event.get("query_id", 0) == 0:
            continue  # the test runner's own query, not the test
        location, node = str(event.get("location", "")), str(event.get("node", ""))
        key = (integer(event.get("query_id")) or 0, location)
        if event.get("op") == "Unify":
            last_unify[key] = node
            continue
        if event.get("op") != wanted or (mode == "fails" and (location, node) in seen):
            continue
        seen.add((location, node))
        evaluated = last_unify.get(key) if mode == "fails" else None
        shown = f"{location}: {_source_line(location, modules) or node}"
        if evaluated and evaluated != node and "__local" not in evaluated:
            shown += f"    evaluated: {evaluated}"
        bound = event.get("locals")
        if isinstance(bound, Mapping) and bound:
            values = ", ".join(f"{k} = {compact(v)}" for k, v in sorted(bound.items()))
            shown += f"    with {values}"
        if lines and lines[-1] == shown:
            continue  # one expression evaluated again for each part of it
        lines.append(shown)
        if len(lines) >= MAX_LINES:
            lines.append(f"(cut at {MAX_LINES} lines)")
            break
    if not lines and mode == "fails":
        lines.append("(no expression failed: the test's value is not true, e.g. a rule that is undefined)")
    return lines


def _source_line(location: str, modules: Mapping[str, str]) -> str:
    file, _, line = location.rpartition(":")
    source = modules.get(file)
    if source is None or not line.isdigit():
        return ""
    lines = source.splitlines()
    number = int(line)
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def compact(value: object, limit: int = 120) -> str:
    """VALUE as JSON on one line, cut to LIMIT characters."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
