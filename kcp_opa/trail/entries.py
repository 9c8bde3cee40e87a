"""Audit events: what an auditor needs to reproduce each decision, written to the ledger.

Every entry carries the KCP evaluator log fields (action_id, agent_id, timestamp,
kcp_unit_applied, evaluator_id, evaluator_version, fields_accessed, fields_declared, passed,
trace_id, model, legal_basis) and, for decisions, OPA decision-log fields (decision_id, path,
input, result, bundles, labels, erased). Emission goes through structlog, whose final logger
is the hash-chained ledger: an exception there reaches the caller, which fails closed.

Content of a unit under ``no-logging`` never reaches the ledger: only the allow-listed,
non-content fields of ``trail.redaction`` are archived, in decision and in control, receipt,
intent, execution and failure events alike; everything else is erased and listed in ``erased`` as JSON
pointers. The access itself is recorded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Any

import structlog

from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.compile.datadoc import leaf_path
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, items, mapping
from kcp_opa.core.principalids import canonical_or_empty
from kcp_opa.models.decision import Decision
from kcp_opa.stores.protocols import LedgerStore
from kcp_opa.trail.redaction import EVENT_FIELDS, INPUT_FIELDS, redact

DECISION_PATH = "kcp/gate/decision"
#: Compiled units remembered per trail (one bundle): the units its actions name.
_UNITS_HELD = 4096
BUNDLE_NAME = "kcp-opa"


def _shape_of(result: object) -> JsonDict | None:
    """An engine's decision without its wording: the state and the reason codes."""
    if not isinstance(result, Mapping):
        return None
    return {key: result.get(key) for key in ("decision", "authorization_status", "reason_codes")}


def _fields_declared(compliance: JsonObject, task: object) -> object:
    """The list the gate read the action against: its task type's own, else declared_fields."""
    listed = mapping(compliance.get("declared_fields_by_task_type")).get(task) if isinstance(task, str) else None
    return listed if isinstance(listed, list) else compliance.get("declared_fields")


class _LedgerLogger:
    """structlog's final logger: every method appends the event dict to the ledger."""

    def __init__(self, ledger: LedgerStore) -> None:
        self.ledger = ledger

    def msg(self, **event: object) -> JsonDict:
        return self.ledger.append(event)

    info = error = warning = msg


def _timestamp(_: object, __: str, event: MutableMapping[str, object]) -> MutableMapping[str, object]:
    event.setdefault("timestamp", dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    return event


def _type_from_event(_: object, __: str, event: MutableMapping[str, object]) -> MutableMapping[str, object]:
    event["type"] = event.pop("event")
    return event


def attribution(document: JsonObject, action: JsonObject) -> JsonDict:
    """Whom a decision entry is attributed to (its top-level ``agent_id``), never on the action's word.

    The principal the decision was made for (``input.context.facts_principal``: over the service
    the authenticated caller, whose canonical id the action's ``agent_id`` must be; over the
    library whom the host runs the agent as) when the action names that principal; the action's
    own spelling is kept as ``stated_agent_id`` when it differs. Otherwise nothing vouches for the
    agent (``kcp-opa decide``, ``Gate.decide`` without ``principal``, a vouching host's stand-in
    principal): the entry names the stated agent and says ``unauthenticated: true``.
    """
    context = document.get("context")
    principal = context.get("facts_principal") if isinstance(context, Mapping) else None
    stated = action.get("agent_id")
    if isinstance(principal, str) and principal and canonical_or_empty(stated) == principal:
        return {"agent_id": principal} if stated == principal else {"agent_id": principal, "stated_agent_id": stated}
    return {"agent_id": stated, "unauthenticated": True}


def erase_content(document: JsonObject) -> tuple[JsonDict, list[str]]:
    """The decision input reduced to its allow-listed fields; the JSON pointers erased."""
    return redact(document, INPUT_FIELDS, "/input")


def _malformed(what: str) -> LedgerError:
    return LedgerError(
        f"the bundle's unit index is malformed ({what}): no entry is written for a unit it cannot look up"
    )


def _indexed(index: JsonObject, project: str, unit_id: str) -> object:
    """The unit stored under ``project``/``unit_id`` in a hashed index (None: not there).

    Strict: a shape :func:`kcp_opa.compile.datadoc.build_index` never writes is a LedgerError,
    never "not found" (a unit not found has no restriction, and its content would be logged)."""
    depth, node = integer(index.get("depth", 0)), index.get("slots")
    if depth is None or depth < 0:
        raise _malformed(f"depth {index.get('depth')!r}")
    for digit in leaf_path([project, unit_id], depth):
        if not isinstance(node, list) or len(node) <= digit:
            raise _malformed("a slot is not a list of 16")
        node = node[digit]
    projects = node.get(project, {}) if isinstance(node, Mapping) else None
    if not isinstance(projects, Mapping):
        raise _malformed(f"the leaf of {project}/{unit_id} is not an object of objects")
    return projects.get(unit_id)


class AuditTrail:
    """Builds and emits the audit entries for one bundle's gate."""

    def __init__(self, ledger: LedgerStore, bundle: LoadedBundle) -> None:
        self.ledger = ledger
        self.bundle = bundle
        self.policy_version = str(bundle.manifest.get("metadata", {}).get("kcp_opa", {}).get("policy_version", ""))
        self._log = structlog.wrap_logger(
            _LedgerLogger(ledger),
            processors=[_timestamp, _type_from_event],
            wrapper_class=structlog.BoundLogger,  # never a level-filtering one: audit is not optional
            cache_logger_on_first_use=False,
        )
        self._units: dict[tuple[str, str], JsonObject | None] = {}

    def bundles(self) -> dict[str, JsonDict]:
        """OPA's ``bundles`` field: the revision, and the bytes (sha256) and signer that decided."""
        named: JsonDict = {"revision": self.bundle.revision, "sha256": self.bundle.sha256}
        if self.bundle.signer is not None:
            named["keyid"] = self.bundle.signer
        return {BUNDLE_NAME: named}

    def _unit(self, action: JsonObject) -> JsonObject | None:
        knowledge = action.get("knowledge")
        if not isinstance(knowledge, Mapping):
            return None
        project, unit_id = knowledge.get("project"), knowledge.get("unit")
        if not isinstance(project, str) or not isinstance(unit_id, str):
            return None
        return self._compiled_unit(project, unit_id)

    def _compiled_unit(self, project: str, unit_id: str) -> JsonObject | None:
        """The bundle's compiled unit (its profile merged in), looked up once per unit, not per entry."""
        key = (project, unit_id)
        if key in self._units:
            return self._units[key]
        compiled: object = self.bundle.data.get("kcp_data", {})
        if not isinstance(compiled, Mapping):
            raise _malformed("kcp_data is not an object")
        index, profiles = compiled.get("units", {}), compiled.get("profiles", [])
        if not isinstance(index, Mapping) or not isinstance(profiles, list):
            raise _malformed("units is not an object or profiles not a list")
        found = _indexed(index, project, unit_id) if index else None
        unit = None
        if found is not None:
            if not isinstance(found, Mapping):
                raise _malformed(f"unit {project}/{unit_id} is not an object")
            position = found.get("profile")
            profile: object = {} if position is None else None
            if (at := integer(position)) is not None and 0 <= at < len(profiles):
                profile = profiles[at]
            if not isinstance(profile, Mapping):
                raise _malformed(f"unit {project}/{unit_id} names no profile ({position!r})")
            unit = MappingProxyType({**profile, **found})
        if len(self._units) >= _UNITS_HELD:
            self._units.clear()
        self._units[key] = unit
        return unit

    def _kcp_fields(self, action: JsonObject, decision: Decision | None) -> JsonDict:
        unit = self._unit(action) or {}
        compliance = mapping(unit.get("compliance"))
        knowledge = mapping(action.get("knowledge"))
        model = mapping(mapping(action.get("runtime")).get("model"))
        unit_ref = f"{knowledge['project']}/{knowledge['unit']}" if knowledge.get("unit") else None
        return {
            "action_id": action.get("action_id"),
            "agent_id": action.get("agent_id"),
            "kcp_unit_applied": unit_ref,
            "evaluator_id": "kcp_gate",
            "evaluator_version": self.policy_version,
            "fields_accessed": list(items(knowledge.get("fields_read"))),
            "fields_declared": _fields_declared(compliance, action.get("action_type")),
            "passed": None if decision is None else decision.decision.value != "DENY",
            "trace_id": None if decision is None else decision.trace_id,
            "model": model.get("id"),
            "legal_basis": compliance.get("legal_basis"),
        }

    def decision(
        self,
        document: JsonObject,
        action: JsonObject,
        decision: Decision,
        result: object,
        engine_results: JsonObject | None = None,
        shadow: str | None = None,
        redecision: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """The decision-log entry: the exact input (content erased under no-logging) and result.

        ``engine_results`` (a cross-checked gate's divergence) keeps each engine's answer;
        ``shadow`` (the sha256 of a candidate evaluated beside) goes into ``labels``;
        ``redecision`` (the decision re-decided, the step) becomes ``original_decision_id`` and
        ``redecision``: a re-decision is linked to its original, and counted as what it is.
        """
        no_logging = "redact_content" in decision.verdict.obligations or self.no_logging(action)
        archived, erased = erase_content(document) if no_logging else (dict(document), [])
        extra: JsonDict = {} if engine_results is None else {"engine_results": dict(engine_results)}
        if redecision is not None:
            extra["original_decision_id"], extra["redecision"] = redecision
        if engine_results is not None and no_logging:
            # Each engine's messages may quote content: keep what each decided, erase the rest.
            extra["engine_results"] = {name: _shape_of(value) for name, value in engine_results.items()}
            erased = [*erased, "/engine_results"]
        entry: dict[str, Any] = self._log.msg(
            "decision",
            **{**self._kcp_fields(action, decision), **attribution(document, action)},
            decision_id=decision.decision_id,
            action_hash=decision.action_hash,
            decision=decision.decision.value,
            authorization_status=decision.authorization_status.value,
            reason_codes=list(decision.reason_codes),
            evaluators=sorted({f"{r.evaluator_id}@{r.evaluator_version}" for r in decision.verdict.reasons}),
            path=DECISION_PATH,
            input=archived,
            result=result,
            engine_error=decision.engine_error,
            bundles=self.bundles(),
            **({"mode": decision.mode, "enforced": False} if decision.mode != "enforce" else {}),
            labels={
                "app": "kcp-opa",
                "policy_version": decision.policy_version,
                **({"shadow": shadow} if shadow is not None else {}),
            },
            erased=erased,
            **extra,
        )
        return entry

    def event(
        self, kind: str, action: JsonObject | None, decision: Decision | None, **fields: object
    ) -> dict[str, Any]:
        """A control, receipt, intent, execution or failure event, with the KCP fields of its action.

        Returns the entry as chained (its ``seq`` is what an execution's outcome names as ``intent_seq``).
        """
        base = {**self._kcp_fields(action or {}, decision), "bundles": self.bundles()}
        if action is not None and self.no_logging(action):
            kept, erased = redact(fields, EVENT_FIELDS)
            entry: dict[str, Any] = self._log.msg(kind, **base, **kept, erased=erased)
        else:
            entry = self._log.msg(kind, **base, **fields)
        return entry

    def no_logging(self, action: JsonObject) -> bool:
        """True when the unit the action names is under the ``no-logging`` restriction."""
        restrictions = mapping((self._unit(action) or {}).get("compliance")).get("restrictions")
        return isinstance(restrictions, list) and "no-logging" in restrictions
