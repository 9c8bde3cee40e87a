"""Decision cases: an action and the decision it must get, kept as YAML beside the deployment.

A case file names its deployment and decision time, a ``base_action`` and cases whose
``action`` is deep-merged over it (mappings merge, lists replace, ``null`` deletes the key), so
each case shows only what makes it different. ``check_case`` compares a decision with the
expectation and says every difference; it decides nothing itself.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from jsonschema import Draft202012Validator

from kcp_opa.context import counting
from kcp_opa.context.factcontract import fact_problem
from kcp_opa.context.facts import FACTS
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping, objects, strings, text
from kcp_opa.declare.yamlsource import YamlSource, load_yaml
from kcp_opa.models.decision import Decision

#: Controls a gate satisfies itself when its audit ledger is on: the decision is written to
#: the ledger before it is returned, or it becomes a DENY (contract §1.3).
SYSTEM_CONTROLS = ("standard_audit_logging",)


@dataclass(frozen=True)
class Expectation:
    """What a case requires of its decision; None means "not checked"."""

    decision: str
    outcome: str | None = None
    authorization_status: str | None = None
    reason_codes: frozenset[str] | None = None
    required_controls: frozenset[str] | None = None
    satisfied_controls: frozenset[str] | None = None
    missing_controls: frozenset[str] | None = None
    approver_roles: frozenset[str] | None = None
    risk_level: str | None = None
    obligations: frozenset[str] | None = None
    violations: tuple[JsonObject, ...] = ()
    execution_allowed: bool | None = None
    must_not_execute: bool = True
    required_trace_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class DecisionCase:
    case_id: str
    description: str
    deployment: str
    now: str
    action: JsonObject
    expect: Expectation
    file: str
    line: int | None
    ledger: bool = False
    #: ``input.context.counters`` as the gate would count them (docs/budgets.md), or None.
    counters: JsonObject | None = None
    #: What the gate knows for this case (file-level ``context`` merged with the case's;
    #: kcp_opa.authoring.casecontext). None: no source, every gate fact missing.
    context: JsonObject | None = None


def merge(base: object, patch: object) -> object:
    """Deep-merge ``patch`` over ``base``: mappings merge, anything else replaces, None deletes."""
    if not isinstance(base, Mapping) or not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = {key: copy.deepcopy(value) for key, value in base.items()}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge(merged.get(key), value)
    return merged


def _merge_context(base: JsonObject, patch: JsonObject) -> JsonDict:
    """Like :func:`merge`, but a null stays (it says: the gate does not know this fact)."""
    merged = {key: copy.deepcopy(value) for key, value in base.items()}
    for key, value in patch.items():
        old = merged.get(key)
        merged[key] = _merge_context(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return merged


def check_context(value: object) -> str | None:
    """Why ``value`` is not a gate context as a case (or ``kcp-opa decide --context``) declares it."""
    defs = mapping(mapping(_validator().schema).get("$defs"))
    checker = Draft202012Validator({**mapping(defs.get("context")), "$defs": defs})
    error = next(iter(checker.iter_errors(value)), None)
    if error is None:
        return next((f"{'/'.join(map(str, path))}: {why}" for path, why in context_fact_problems(value)), None)
    return f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"


def context_fact_problems(context: object) -> list[tuple[list[str], str]]:
    """(path, why) for each ``config``/``registry`` fact a context declares that breaks the
    contract of the action path it would be stated at (kcp_opa.context.factcontract)."""
    found: list[tuple[list[str], str]] = []
    if not isinstance(context, Mapping):
        return found
    for block in ("config", "registry"):
        declared = context.get(block)
        if not isinstance(declared, Mapping):
            continue
        for key, value in declared.items():
            if key == "model" and isinstance(value, Mapping):
                named = [(["model", part], f"model_{part}", value[part]) for part in ("id", "hosting") if part in value]
            else:
                named = [([str(key)], str(key), value)]
            for path, name, given in named:
                why = fact_problem(name, given) if given is not None and name in FACTS else None
                if why is not None:
                    found.append(([block, *path], why))
    return found


@cache
def _validator() -> Draft202012Validator:
    text = resources.files("kcp_opa.schemas").joinpath("decision-cases.schema.json").read_text("utf-8")
    return Draft202012Validator(json.loads(text))


def load_cases(path: str | Path) -> list[DecisionCase]:
    """Read and check one case file; a malformed file raises :class:`ValidationFailedError`."""
    source: YamlSource = load_yaml(Path(path))
    document = source.data
    errors = [
        f"{path}:{source.line_of(list(error.absolute_path)) or 1}: "
        f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
        for error in sorted(_validator().iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if errors:
        raise ValidationFailedError(str(path), errors)
    contexts: list[tuple[list[str | int], object]] = [(["context"], document.get("context"))]
    contexts += [(["cases", index, "context"], raw.get("context")) for index, raw in enumerate(document["cases"])]
    refused = [
        f"{path}:{source.line_of([*where, *inner]) or 1}: {'/'.join(map(str, [*where, *inner]))}: {why}"
        for where, context in contexts
        for inner, why in context_fact_problems(context)
    ]
    if refused:
        raise ValidationFailedError(str(path), refused)
    seen: set[str] = set()
    cases = []
    for index, raw in enumerate(document["cases"]):
        if raw["case_id"] in seen:
            line = source.line_of(["cases", index, "case_id"])
            raise ValidationFailedError(str(path), [f"{path}:{line}: duplicate case_id {raw['case_id']}"])
        seen.add(raw["case_id"])
        cases.append(
            DecisionCase(
                case_id=raw["case_id"],
                description=raw.get("description", ""),
                deployment=document["deployment"],
                now=raw.get("now", document["now"]),
                action=mapping(merge(document.get("base_action", {}), raw.get("action", {}))),
                expect=_expectation(raw["expect"]),
                file=str(path),
                line=source.line_of(["cases", index]),
                ledger=bool(document.get("ledger", False)),
                counters=_counters(document, raw),
                context=_merge_context(document.get("context") or {}, raw.get("context") or {}) or None,
            )
        )
    return cases


def _counters(document: JsonObject, raw: JsonObject) -> JsonDict | None:
    """The case's counts over the file's ``base_counters``; the rate's unit and principal and the
    beneficiary's key are filled from the action as the gate keys them (context/counting.py)."""
    if "base_counters" not in document and "counters" not in raw:
        return None
    counters = dict(mapping(merge(document.get("base_counters", {}), raw.get("counters", {}))))
    action = mapping(merge(document.get("base_action", {}), raw.get("action", {})))
    rate = counters.get("rate")
    knowledge = mapping(action.get("knowledge"))
    if isinstance(rate, dict) and "unit" not in rate:
        rate["unit"] = f"{knowledge.get('project', '')}/{knowledge.get('unit', '')}"
        rate["principal"] = counting.principal(action)
    paid = counters.get("beneficiary")
    if isinstance(paid, dict) and "key" not in paid:
        paid["key"] = f"{action.get('tenant_id')}/{counting.beneficiary(action)}"
    return counters


def _expectation(raw: JsonObject) -> Expectation:
    """The expectation of a case the schema checked (so each field has its type)."""

    def as_set(key: str) -> frozenset[str] | None:
        return frozenset(strings(raw[key])) if key in raw else None

    allowed = raw.get("execution_allowed")
    return Expectation(
        decision=str(raw["decision"]),
        outcome=text(raw.get("outcome")),
        authorization_status=text(raw.get("authorization_status")),
        reason_codes=as_set("reason_codes"),
        required_controls=as_set("required_controls"),
        satisfied_controls=as_set("satisfied_controls"),
        missing_controls=as_set("missing_controls"),
        approver_roles=as_set("approver_roles"),
        risk_level=text(raw.get("risk_level")),
        obligations=as_set("obligations"),
        violations=tuple(objects(raw.get("violations"))),
        execution_allowed=allowed if isinstance(allowed, bool) else None,
        must_not_execute=bool(raw.get("must_not_execute", raw["decision"] != "ALLOW")),
        required_trace_fields=tuple(strings(raw.get("required_trace_fields"))),
    )


def check_case(case: DecisionCase, decision: Decision, trace: JsonObject) -> list[str]:
    """Every way ``decision`` differs from the case's expectation (empty when it matches)."""
    expect, got = case.expect, decision.to_dict()
    problems = []
    if got["decision"] != expect.decision:
        problems.append(f"decision {got['decision']}, expected {expect.decision}")
    for key in ("outcome", "authorization_status", "risk_level", "execution_allowed"):
        wanted = getattr(expect, key)
        if wanted is not None and got[key] != wanted:
            problems.append(f"{key} {got[key]!r}, expected {wanted!r}")
    for key in (
        "reason_codes",
        "required_controls",
        "satisfied_controls",
        "missing_controls",
        "approver_roles",
        "obligations",
    ):
        wanted_set = getattr(expect, key)
        if wanted_set is not None and set(got[key]) != wanted_set:
            problems.append(f"{key} {sorted(got[key])}, expected {sorted(wanted_set)}")
    for wanted_violation in expect.violations:
        if not any(_contains(actual, wanted_violation) for actual in got["violations"]):
            problems.append(f"no violation like {dict(wanted_violation)} in {got['violations']}")
    if expect.must_not_execute and decision.execution_allowed:
        problems.append("FALSE ALLOW: execution_allowed although the case must not execute")
    for name in expect.required_trace_fields:
        if trace.get(name) in (None, "", {}, []):
            problems.append(f"trace lacks {name}")
    return problems


def _contains(actual: JsonObject, wanted: JsonObject) -> bool:
    return all(actual.get(key) == value for key, value in wanted.items())


def decision_trace(action: JsonObject, decision: Decision) -> JsonDict:
    """Who acted on what, under which policy: the trace an auditor follows for one decision."""
    target = mapping(action.get("target"))
    return {
        "actor": {key: action[key] for key in ("tenant_id", "subject_id", "agent_id") if key in action},
        "resource": {key: target[key] for key in ("type", "reference", "tenant_id") if key in target},
        "decision_id": decision.decision_id,
        "action_hash": decision.action_hash,
        "policy_version": decision.policy_version,
        "bundle_revision": decision.bundle_revision,
        "trace_id": decision.trace_id,
    }


def case_files(directory: Path) -> Sequence[Path]:
    return sorted(directory.glob("*.yaml"))
