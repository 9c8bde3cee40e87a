"""``kcp-opa mutate``: which rules does no test pin? Mutate the policies, run the suite, count.

Each mutant (kcp_opa.authoring.mutate_ops) runs the Rego tests and the decision cases on the
OPA reference engine, in worker processes, one per core: it is *killed* when a test fails or
errors or a case gets another decision, *survives* when everything still passes, is *invalid*
when it does not compile (not scored) and *timed out* past the per-mutant limit (counted as
killed: the suite noticed). OPA is the default because it is the faster engine here: one
batched query per suite costs ~0.5 s, where regopy plans the test suite in ~40 s
(docs/testing.md). Every test package and every deployment's cases are one query each.
"""

from __future__ import annotations

import enum
import multiprocessing
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcp_opa.authoring.casecontext import case_input
from kcp_opa.authoring.cases import SYSTEM_CONTROLS, DecisionCase, check_case, decision_trace
from kcp_opa.authoring.mutate_ops import Mutant, excuse, generate
from kcp_opa.authoring.regotest import RegoTest, opa_engine
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.jsonread import JsonObject, mapping
from kcp_opa.decide.gate import DecisionInput
from kcp_opa.models.decision import ENGINE_ERROR_VERDICT, Decision, MalformedDecisionError, PolicyVerdict

DEFAULT_TIMEOUT_S = 120.0
_INVALID = ("rego_parse_error", "rego_compile_error", "rego_type_error", "rego_unsafe_var_error", "rego_recursion")


class Status(enum.StrEnum):
    KILLED = "killed"
    SURVIVED = "survived"
    TIMEOUT = "timeout"
    INVALID = "invalid"
    EXCUSED = "excused"


@dataclass
class MutantResult:
    mutant: Mutant
    status: Status
    detail: str = ""
    reached_by: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Suite:
    """Everything a worker needs to judge a mutant: picklable, built once."""

    modules: Mapping[str, str]
    tests: tuple[RegoTest, ...]
    deployments: Mapping[str, JsonObject]  # name -> bundle data
    versions: Mapping[str, tuple[str, str]]  # name -> (policy_version, bundle revision)
    cases: Mapping[str, tuple[tuple[DecisionCase, DecisionInput], ...]]  # deployment -> cases


def build_suite(
    modules: Mapping[str, str],
    tests: Sequence[RegoTest],
    cases: Sequence[DecisionCase],
    policies: Path,
    deployments: Path,
) -> Suite:
    import tempfile

    from kcp_opa.compile.bundle import read_bundle

    data: dict[str, JsonObject] = {}
    versions: dict[str, tuple[str, str]] = {}
    by_deployment: dict[str, list[tuple[DecisionCase, DecisionInput]]] = {}
    with tempfile.TemporaryDirectory(prefix="kcp-opa-mutate-") as tmp:
        for case in cases:
            if case.deployment not in data:
                base = deployments / case.deployment
                out = Path(tmp) / f"{case.deployment}.tar.gz"
                compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, out)
                bundle = read_bundle(out)
                data[case.deployment] = bundle.data
                metadata = mapping(mapping(bundle.manifest.get("metadata")).get("kcp_opa"))
                versions[case.deployment] = (str(metadata.get("policy_version", "")), bundle.revision)
            prepared = case_input(case, satisfied_controls=SYSTEM_CONTROLS)
            by_deployment.setdefault(case.deployment, []).append((case, prepared))
    return Suite(
        dict(modules),
        tuple(t for t in tests if not t.todo),
        data,
        versions,
        {k: tuple(v) for k, v in by_deployment.items()},
    )


def run_tests_batched(modules: Mapping[str, str], tests: Sequence[RegoTest]) -> str | None:
    """The first failing test (its name and why), or None when every test passes."""
    packages = sorted({t.package for t in tests})
    query = "x := {" + ", ".join(f'"{p}": data.{p}' for p in packages) + "}"
    engine = None
    try:  # a mutant OPA refuses to load raises here: reported as an error, never out of a pool worker
        engine = opa_engine(modules)
        bindings = engine.eval_query(query, {})
        values = bindings[0].get("x", {}) if bindings else {}
        for test in tests:
            if values.get(test.package, {}).get(test.rule) is not True:
                return f"test {test.name} fails"
        return None
    except Exception as exc:
        return f"error: {' '.join(str(exc).split())[:300]}"
    finally:
        if engine is not None:
            engine.close()


def decide_all(modules: Mapping[str, str], data: JsonObject, prepared: Sequence[DecisionInput]) -> list[Any]:
    """The raw gate decision of every input, in one query (as OPA gave it: ``typed`` checks it)."""
    query = "x := [d | some i in input.cases; d := data.kcp.gate.decision with input as i]"
    engine = opa_engine({k: v for k, v in modules.items() if not k.endswith("_test.rego")}, data)
    try:
        bindings = engine.eval_query(query, {"cases": [dict(p.document) for p in prepared]})
        return list(bindings[0]["x"]) if bindings else []
    finally:
        engine.close()


def typed(prepared: DecisionInput, raw: Any, versions: tuple[str, str] = ("", "")) -> Decision:
    """The decision ``Gate.evaluate`` would return for this raw policy result."""
    error = None
    try:
        verdict = PolicyVerdict.from_policy(raw)
    except MalformedDecisionError as exc:
        verdict, error = ENGINE_ERROR_VERDICT, str(exc)
    required = "trace_context" in verdict.obligations
    trace_id = None if prepared.trace_id_generated and required else prepared.trace_id
    return Decision(
        prepared.decision_id,
        prepared.action_hash,
        verdict,
        versions[0],
        versions[1],
        trace_id,
        prepared.evaluated_at,
        engine_error=error,
    )


def run_cases_batched(suite: Suite, modules: Mapping[str, str]) -> str | None:
    """The first case whose decision differs from its expectation, or None."""
    for name, items in sorted(suite.cases.items()):
        try:
            raws = decide_all(modules, suite.deployments[name], [p for _, p in items])
        except Exception as exc:
            return f"error: {' '.join(str(exc).split())[:300]}"
        if len(raws) != len(items):
            return f"cases of {name}: {len(raws)} decisions for {len(items)} cases"
        for (case, prepared), raw in zip(items, raws, strict=True):
            decision = typed(prepared, raw, suite.versions[name])
            problems = check_case(case, decision, decision_trace(case.action, decision))
            if decision.engine_error or problems:
                return f"case {case.case_id}: {'; '.join(problems) or decision.engine_error}"
    return None


def judge(suite: Suite, mutant: Mutant) -> tuple[Status, str]:
    modules = dict(suite.modules)
    modules[mutant.file] = mutant.apply(modules[mutant.file])
    for stage in ("tests", "cases"):
        failure = run_tests_batched(modules, suite.tests) if stage == "tests" else run_cases_batched(suite, modules)
        if failure is None:
            continue
        # Invalid only if the policies alone do not compile; a test that no longer type-checks
        # against the mutant (OPA compares static object types) noticed it.
        invalid = failure.startswith("error:") and any(marker in failure for marker in _INVALID)
        if invalid and (stage == "cases" or _policies_fail_to_compile(modules)):
            return Status.INVALID, failure
        return Status.KILLED, failure
    return Status.SURVIVED, ""


def _policies_fail_to_compile(modules: Mapping[str, str]) -> bool:
    engine = None
    try:
        engine = opa_engine({k: v for k, v in modules.items() if not k.endswith("_test.rego")})
        engine.eval_query("x := 1", {})
    except Exception:
        return True
    finally:
        if engine is not None:
            engine.close()
    return False


_SUITE: Suite | None = None


def _init(suite: Suite) -> None:
    global _SUITE
    _SUITE = suite


def _work(mutant: Mutant) -> tuple[str, str, str]:
    assert _SUITE is not None
    try:
        status, detail = judge(_SUITE, mutant)
    except Exception as exc:  # the engine's own exception types do not survive the trip to the pool
        raise RuntimeError(f"mutant {mutant.key}: {type(exc).__name__}: {exc}") from None
    return mutant.key, status.value, detail


def mutants_of(modules: Mapping[str, str], only: str | None = None) -> list[Mutant]:
    """Every mutant of the non-test modules whose path matches ``only``, in file and line order
    (a CI sample of them: kcp_opa.authoring.mutate_slice)."""
    return [
        mutant
        for name, source in sorted(modules.items())
        if not name.endswith("_test.rego") and (only is None or re.search(only, name))
        for mutant in generate(name, source)
    ]


def run_mutants(
    suite: Suite,
    mutants: Sequence[Mutant],
    *,
    jobs: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[MutantResult], None] | None = None,
) -> list[MutantResult]:
    """Judge every mutant in ``jobs`` worker processes; a mutant over ``timeout_s`` is a TIMEOUT."""
    results: dict[str, MutantResult] = {}
    # An excuse covers a line, so it would also cover a mutant of that line which the tests kill
    # (a comparison flipped next to an equivalent dropped guard): every mutant runs, and only
    # a survivor on an excused line is EXCUSED.
    reasons = {m.key: excuse(suite.modules[m.file].split("\n"), m) for m in mutants}
    pending: list[Mutant] = list(mutants)
    by_key = {m.key: m for m in pending}
    context = multiprocessing.get_context("spawn")
    while pending:
        with context.Pool(processes=max(1, jobs), initializer=_init, initargs=(suite,)) as pool:
            # apply_async runs in submission order, so the oldest unfinished mutant is running.
            started = {m.key: pool.apply_async(_work, (m,)) for m in pending}
            pending = []
            last_progress = time.monotonic()
            while started:
                for key, handle in list(started.items()):
                    if handle.ready():
                        _, status, detail = handle.get()
                        reason = reasons[key]
                        if Status(status) is Status.SURVIVED and reason is not None:
                            status, detail = Status.EXCUSED.value, reason
                        results[key] = MutantResult(by_key[key], Status(status), detail)
                        del started[key]
                        last_progress = time.monotonic()
                        if progress is not None:
                            progress(results[key])
                if started and time.monotonic() - last_progress > timeout_s:
                    stale = next(iter(started))
                    results[stale] = MutantResult(by_key[stale], Status.TIMEOUT, f"no answer in {timeout_s:g} s")
                    if progress is not None:
                        progress(results[stale])
                    del started[stale]
                    pending = [by_key[key] for key in started]
                    pool.terminate()
                    break
                time.sleep(0.05)
    return [results[m.key] for m in mutants]
