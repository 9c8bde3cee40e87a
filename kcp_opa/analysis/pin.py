"""Misses become regression cases: an archived decision or a counterexample as a decision case.

``kcp-opa cases pin LEDGER DECISION_ID --expect STATE`` takes the exact action and decision time
the ledger archived and writes a case with the corrected expectation, so ``kcp-opa test`` fails
until the policy decides it that way. A case appended to a file with a ``base_action`` is
written as a patch over it (null deletes a key), so it still decides the archived action.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from kcp_opa.authoring.cases import load_cases, merge
from kcp_opa.core.errors import AnalysisError, KcpOpaError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping, objects, strings
from kcp_opa.schemas import validator
from kcp_opa.trail.ledger import read_entries

#: What a counterexample of each built-in invariant should have decided (fail closed).
_EXPECTED = {
    "contract.absent_needed_fact_never_allows": "ESCALATE",
    "contract.unknown_unit_never_allows": "DENY",
    "contract.unknown_task_type_never_allows": "DENY",
    "contract.deny_is_terminal": "DENY",
    "contract.unit_outside_its_window_never_allows": "DENY",
    "contract.action_outside_its_age_window_never_allows": "ESCALATE",
}


def counterexample_case(
    invariant: str,
    action: JsonObject,
    decision: JsonObject,
    now: str,
    change: str = "",
    before: JsonObject | None = None,
) -> JsonDict:
    """A decision case that fails until the policy keeps INVARIANT for ACTION."""
    from kcp_opa.analysis.neighbours import EVIDENCE, stronger

    subject = dict(action)
    if change and change != EVIDENCE:
        subject = stronger(action, change) or subject
    expected = _EXPECTED.get(invariant.split("[", 1)[0])
    if expected is None and change and change != EVIDENCE and before is not None:
        expected = str(before.get("decision", "DENY"))  # at least as strong as the weaker action's
    if expected is None:
        got = str(decision.get("decision", "DENY"))
        expected = got if got != "ALLOW" and invariant == "contract.executable_only_with_every_control" else "DENY"
    expect: JsonDict = {"decision": expected}
    if expected != "ALLOW":
        expect["must_not_execute"] = True
    slug = re.sub(r"[^a-z0-9._-]+", "-", invariant.lower()).strip("-.") or "invariant"
    what = f" after {change}" if change else ""
    if change.startswith("stronger_restriction:"):  # a declaration change: the case needs it too
        what = (
            f" with {change.partition(':')[2]} added to the unit's restrictions (add it to the "
            "manifest of the case's deployment to reproduce)"
        )
    return {
        "case_id": f"prove-{slug}",
        "description": (
            f"kcp-opa prove: {invariant} broken{what}; decided {decision.get('decision')} "
            f"{items(decision.get('reason_codes'))}. Shrunk counterexample; the expectation is the "
            "fail-closed answer: edit it to the intended state before pinning."
        ),
        "now": now,
        "context": {"from_action": True},
        "action": subject,
        "expect": expect,
    }


def archived_decision(ledger: str | Path, decision_id: str) -> tuple[JsonDict, str, JsonDict]:
    """(action, decision time, entry) of DECISION_ID in LEDGER; refuses an erased input."""
    try:
        for _, entry in read_entries(ledger):
            if entry.get("decision_id") != decision_id or not isinstance(entry.get("input"), Mapping):
                continue
            if entry.get("erased"):
                raise AnalysisError(
                    f"{decision_id}: its input was erased under no-logging ({', '.join(strings(entry['erased']))}); "
                    "the archived action cannot be replayed as a case"
                )
            document = mapping(entry["input"])
            action, now = document.get("action"), mapping(document.get("context")).get("evaluated_at")
            if not isinstance(action, Mapping) or not isinstance(now, str):
                raise AnalysisError(f"{decision_id}: the archived input has no action or decision time")
            return dict(action), now, dict(entry)
    except KcpOpaError as exc:
        if isinstance(exc, AnalysisError):
            raise
        raise AnalysisError(str(exc)) from None
    raise AnalysisError(f"{ledger}: no decision {decision_id}")


def pin(
    ledger: str | Path,
    decision_id: str,
    *,
    expect: str,
    reasons: Sequence[str],
    to: str | Path,
    deployment: str | None = None,
    case_id: str | None = None,
) -> JsonDict:
    """Append the archived decision as a case to TO (created when missing); the case written."""
    action, now, entry = archived_decision(ledger, decision_id)
    decided = entry.get("decision")
    expected: JsonDict = {"decision": expect, **({"reason_codes": sorted(set(reasons))} if reasons else {})}
    if expect != "ALLOW":
        expected["must_not_execute"] = True
    case: JsonDict = {
        "case_id": case_id or re.sub(r"[^a-z0-9._-]+", "-", f"pinned-{decision_id}".lower()),
        "description": f"Pinned from the ledger: {decision_id} was decided {decided} {entry.get('reason_codes', [])}; "
        f"the corrected expectation is {expect}.",
        "now": now,
        "context": {"from_action": True},
        "action": action,
        "expect": expected,
    }
    write_case(Path(to), case, deployment)
    return case


def write_case(path: Path, case: JsonDict, deployment: str | None) -> None:
    """Append CASE to the case file at PATH as text (its comments stay), or create the file."""
    original = ""
    if path.exists():
        try:
            original = path.read_text(encoding="utf-8")
            document = mapping(yaml.safe_load(original))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise AnalysisError(f"{path}: cannot read the case file: {exc}") from None
        if deployment is not None and document.get("deployment") != deployment:
            raise AnalysisError(f"{path}: its deployment is {document.get('deployment')!r}, not {deployment!r}")
        if any(c.get("case_id") == case["case_id"] for c in objects(document.get("cases"))):
            raise AnalysisError(f"{path}: case {case['case_id']} is already pinned")
        base = document.get("base_action", {})
        wanted = case["action"]
        case = {**case, "action": patch_over(base, wanted)}
        if merge(base, case["action"]) != wanted:
            raise AnalysisError("internal: the patch over base_action does not rebuild the action")
        indent = _list_indent(original)
        item = yaml.safe_dump([case], sort_keys=False, allow_unicode=True, width=100)
        text = original.rstrip("\n") + "\n\n" + "".join(indent + line for line in item.splitlines(True))
        expected = {**document, "cases": [*items(document.get("cases")), case]}
        if yaml.safe_load(text) != expected:
            raise AnalysisError(f"{path}: `cases:` is not the file's last key; cannot append the case")
    else:
        if deployment is None:
            raise AnalysisError(f"{path} does not exist: name its deployment (--deployment NAME)")
        expected = {"deployment": deployment, "now": case["now"], "cases": [case]}
        text = yaml.safe_dump(expected, sort_keys=False, allow_unicode=True, width=100)
    errors = sorted(e.message for e in validator("decision-cases.schema.json").iter_errors(expected))
    if errors:
        raise AnalysisError(f"the case would not be valid: {errors[0]}")
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        load_cases(temporary)  # the file the next `kcp-opa test` reads must load
        temporary.replace(path)
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot write: {exc}") from None
    finally:
        temporary.unlink(missing_ok=True)


def _list_indent(text: str) -> str:
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped.startswith("- case_id:"):
            return line[: len(line) - len(stripped)]
    return "  "


def patch_over(base: object, target: object) -> object:
    """The patch that ``merge(base, patch)`` turns into TARGET (mappings merge, null deletes)."""
    if not isinstance(base, Mapping) or not isinstance(target, Mapping):
        return target
    patch: JsonDict = {key: None for key in base if key not in target}
    for key, value in target.items():
        if key in base and base[key] == value:
            continue
        patch[key] = patch_over(base[key], value) if key in base else value
    return patch
