"""OpenID AuthZEN Authorization API 1.0: a gateway's question as the gate's action intent, and the
gate's decision as AuthZEN's answer.

A policy enforcement point (an MCP or API gateway) asks whether a subject may perform an action
on a resource. This module only translates: the request becomes the same action intent
``POST /v1/decisions`` takes (the table in docs/service.md, "AuthZEN"), which the caller's
checks and the gate then decide as they decide any other; the decision becomes
``{"decision": bool, "context": {...}}``. Nothing here decides, and nothing a request says
about who is asking is taken on its word: the subject must be the authenticated caller.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict, JsonObject, items
from kcp_opa.service.callers import AccessDeniedError, Principal

#: subject.properties -> authorization_context (by name); ``authenticated_principal`` is subject.id.
SUBJECT_PROPERTIES = ("requested_by", "agent_scope", "session_id", "actor_role", "principal_scopes")
#: resource.properties -> target (by name); ``knowledge`` -> the action's KCP unit.
RESOURCE_PROPERTIES = ("tenant_id", "country", "account_fingerprint")
#: action.properties -> the action intent (by name).
ACTION_PROPERTIES = ("action_type", "amount")
#: context -> the rest of the action intent (by name).
CONTEXT_FIELDS = (
    "tenant_id",
    "subject_id",
    "scenario",
    "action_id",
    "idempotency_key",
    "created_at",
    "attributes",
    "evidence_references",
    "runtime",
    "delegation_chain",
    "trace",
)
#: Action-intent fields a request may state in one place only: where each belongs.
PLACED = {
    "schema_version": "nowhere (the service sets it)",
    "agent_id": "subject.id",
    "authenticated_principal": "subject.id",
    "authorization_context": "subject.properties",
    "target": "resource",
    "knowledge": "resource.properties.knowledge",
    "requested_action": "action.name",
    "action_type": "action.properties.action_type",
    "amount": "action.properties.amount",
}
SEMANTICS = ("execute_all", "deny_on_first_deny", "permit_on_first_permit")
MAX_EVALUATIONS = 64
ENTITIES = ("subject", "resource", "action", "context")


class AuthZenRequestError(CodedError):
    """An AuthZEN request that cannot become an action intent: HTTP 400, naming the part to fix."""

    code = "authzen_request"


@dataclass(frozen=True)
class Mapped:
    """One evaluation as the gate's action intent, and the request keys the gate does not read."""

    action: JsonDict
    ignored: tuple[str, ...]


def _object(value: object, where: str) -> JsonObject:
    if not isinstance(value, Mapping):
        raise AuthZenRequestError(f"{where} must be a JSON object")
    return value


def _string(entity: JsonObject, key: str, where: str) -> str:
    value = entity.get(key)
    if not isinstance(value, str) or not value:
        raise AuthZenRequestError(f"{where}.{key} is required: a non-empty string")
    return value


def _properties(entity: JsonObject, where: str) -> JsonObject:
    return _object(entity.get("properties", {}), f"{where}.properties")


def _take(source: JsonObject, names: tuple[str, ...], where: str, into: JsonDict, ignored: list[str]) -> None:
    """Copy ``names`` from ``source``; a key that belongs elsewhere is refused, any other is ignored."""
    for key, value in source.items():
        if key in names:
            into[key] = value
        elif key in PLACED:
            raise AuthZenRequestError(f"{where}.{key} is not read there: state it at {PLACED[key]}")
        else:
            ignored.append(f"{where}.{key}")


def check_entities(request: JsonObject, where: str = "") -> None:
    """Refuse a subject, resource, action or context of the wrong shape (defaults included)."""
    for name in ENTITIES:
        if name in request:
            entity = _object(request[name], f"{where}{name}")
            if name != "context":
                _properties(entity, f"{where}{name}")


def _check_subject(caller: Principal, kind: str, stated: str) -> None:
    """The subject is the authenticated caller: its kind, and its canonical id spelled exactly so
    (constant time), as ``check_caller_action`` holds every route's ``agent_id`` to."""
    given = stated.encode("utf-8", "surrogatepass")
    if kind != caller.kind.value or not hmac.compare_digest(given, caller.id.encode("utf-8")):
        raise AccessDeniedError(
            f"subject {kind[:64]!r} {stated[:128]!r} is not the authenticated caller ({caller.kind.value} "
            f"{caller.id}): an AuthZEN subject is decided for, and recorded as, the principal that authenticated; "
            f"state subject.type {caller.kind.value!r} and subject.id {caller.id!r}",
            "principal_mismatch",
        )


def map_evaluation(caller: Principal, request: JsonObject, *, now: dt.datetime | None = None) -> Mapped:
    """One evaluation (``subject``, ``resource``, ``action``, optional ``context``) as an action intent.

    Raises :class:`AuthZenRequestError` (400) for a missing or misplaced part and
    ``principal_mismatch`` (403) for a subject that is not the caller (the gate's own
    ``check_caller_action`` then holds the action's ``agent_id`` to the caller again).
    """
    for name in ("subject", "resource", "action"):
        if name not in request:
            raise AuthZenRequestError(f"{name} is required (AuthZEN: subject, resource and action)")
    check_entities(request)
    subject, resource = _object(request["subject"], "subject"), _object(request["resource"], "resource")
    verb, context = _object(request["action"], "action"), _object(request.get("context", {}), "context")
    ignored = [key for key in request if key not in ENTITIES]

    _check_subject(caller, _string(subject, "type", "subject"), _string(subject, "id", "subject"))
    agent_id = subject["id"]
    authorization: JsonDict = {}
    _take(_properties(subject, "subject"), SUBJECT_PROPERTIES, "subject.properties", authorization, ignored)
    authorization["authenticated_principal"] = agent_id

    target: JsonDict = {
        "type": _string(resource, "type", "resource"),
        "reference": _string(resource, "id", "resource"),
    }
    described = dict(_properties(resource, "resource"))
    knowledge = described.pop("knowledge", None)
    _take(described, RESOURCE_PROPERTIES, "resource.properties", target, ignored)

    action: JsonDict = {"schema_version": "2.0", "agent_id": agent_id}
    action["requested_action"] = _string(verb, "name", "action")
    _take(_properties(verb, "action"), ACTION_PROPERTIES, "action.properties", action, ignored)
    _take(context, CONTEXT_FIELDS, "context", action, ignored)
    action.update(target=target, authorization_context=authorization)
    if knowledge is not None:
        action["knowledge"] = knowledge
    for key, where in (
        ("action_type", "action.properties.action_type"),
        ("tenant_id", "context.tenant_id"),
        ("subject_id", "context.subject_id"),
    ):
        if key not in action:
            raise AuthZenRequestError(
                f"{where} is required: the gate decides an action of a type, for a tenant and a subject"
            )
    for key in ("requested_by", "agent_scope"):
        if key not in authorization:
            raise AuthZenRequestError(
                f"subject.properties.{key} is required (the action's authorization_context.{key})"
            )
    generated = f"authzen-{uuid.uuid4().hex}"
    action.setdefault("action_id", generated)
    action.setdefault("idempotency_key", generated)
    stamp = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    action.setdefault("created_at", stamp)
    return Mapped(action, _listed(ignored))


def _listed(ignored: list[str]) -> tuple[str, ...]:
    """The ignored keys as an answer shows them: sorted, each cut at 128 characters, at most 32."""
    shown = sorted(key[:128] for key in ignored)
    return tuple(shown[:32]) + ((f"... and {len(shown) - 32} more",) if len(shown) > 32 else ())


def stated_at(path: str) -> str:
    """Where in an AuthZEN request the action-intent path ``path`` ("/target/country", JSON-pointer
    style, as the action contract names a refusal) was stated: the mapping table, read backwards."""
    parts = [f"[{p}]" if p.isdigit() else f".{p}" for p in path.split("/") if p]
    if not parts:
        return "the request"
    head, rest = parts[0][1:], "".join(parts[1:])
    if head == "agent_id" or (head == "authorization_context" and rest == ".authenticated_principal"):
        return "subject.id"
    if head == "authorization_context":
        return f"subject.properties{rest}"
    if head == "target":
        named = {".type": "resource.type", ".reference": "resource.id"}
        return named.get(rest, f"resource.properties{rest}")
    if head == "knowledge":
        return f"resource.properties.knowledge{rest}"
    if head == "requested_action":
        return "action.name"
    if head in ACTION_PROPERTIES:
        return f"action.properties.{head}{rest}"
    return f"context.{head}{rest}"


def evaluations_of(body: JsonObject, max_bytes: int) -> tuple[list[JsonDict], str] | None:
    """A batch request's evaluations, each with the top-level defaults filled in (entity by entity,
    whole: no merging inside an entity), and its semantic; None when it has no ``evaluations``
    (then it is one evaluation, as the spec says). Raises :class:`AuthZenRequestError` for a
    malformed batch, and for one whose evaluations, defaults filled in, hold more than
    ``max_bytes`` of JSON: each is decided and archived, so a default copied into 64 items would
    write 64 times the body the edge admitted into the ledger."""
    listed = body.get("evaluations")
    options = _object(body.get("options", {}), "options")
    semantic = options.get("evaluations_semantic", "execute_all")
    if semantic not in SEMANTICS:
        raise AuthZenRequestError(f"options.evaluations_semantic must be one of {', '.join(SEMANTICS)}")
    if listed is None or listed == []:
        return None
    if not isinstance(listed, list):
        raise AuthZenRequestError("evaluations must be an array of evaluation objects")
    if len(listed) > MAX_EVALUATIONS:
        raise AuthZenRequestError(f"evaluations holds {len(listed)} items: at most {MAX_EVALUATIONS} per request")
    check_entities(body)
    defaults = {name: body[name] for name in ENTITIES if name in body}
    expanded = []
    for index, item in enumerate(listed):
        entry = _object(item, f"evaluations[{index}]")
        expanded.append({**defaults, **{name: entry[name] for name in ENTITIES if name in entry}})
    size = sum(len(json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode("utf-8")) for item in expanded)
    if size > max_bytes:
        raise AuthZenRequestError(
            f"the evaluations, with the batch's defaults filled in, hold {size:,} bytes of JSON: at most "
            f"{max_bytes:,} per request (each is decided and archived); send the large part once per request"
        )
    return expanded, str(semantic)


def one_tenant(evaluations: list[JsonDict]) -> None:
    """A batch is decided for one tenant: evaluations that state different ``context.tenant_id``
    values are refused whole, before any is decided."""
    stated: set[str] = set()
    for item in evaluations:
        context = item.get("context")
        if isinstance(context, Mapping) and "tenant_id" in context:
            tenant = context["tenant_id"]
            if not isinstance(tenant, str):
                raise AuthZenRequestError(f"context.tenant_id must be a string, not {type(tenant).__name__}")
            stated.add(tenant)  # compared whole; shortened only in the message
    if len(stated) > 1:
        named = ", ".join(t[:128] for t in sorted(stated))
        raise AuthZenRequestError(
            f"one batch is decided for one tenant; these evaluations state {named}: send one request per tenant",
            "authzen_mixed_tenants",
        )


#: Obligations the gate fulfils itself: its ledger entry is the audit record.
GATE_KEPT_OBLIGATIONS = frozenset({"audit"})


def answer(decision: JsonObject, ignored: tuple[str, ...] = (), enforced: frozenset[str] = frozenset()) -> JsonDict:
    """The AuthZEN decision: ``true`` only when the gate allows execution now and owes nothing a
    gateway would not do. AuthZEN tells a receiver to ignore fields it does not know, so an
    obligation in ``context`` (``redact_content`` under no-logging) would be silently dropped by a
    gateway that reads only ``decision``: an ALLOW that carries an obligation neither the gate
    keeps (``audit``) nor the operator declares its gateway enforces (``enforced``, `serve
    --authzen-obligation`) is ``false``, with ``unenforced_obligations`` naming them. The
    ``context`` holds what a gateway needs to enforce the answer or start the approval flow, and
    nothing more: the decision id, routing state, reason codes, missing controls and obligations
    (never the input, facts or evidence)."""
    owed = decision.get("obligations", [])
    obligations = [str(o) for o in items(owed)]
    unenforced = sorted(set(obligations) - GATE_KEPT_OBLIGATIONS - enforced)
    allowed = (
        decision.get("decision") == "ALLOW"
        and decision.get("execution_allowed") is True
        and isinstance(owed, list)  # obligations that cannot be read are not "none owed"
        and not unenforced
    )
    context: JsonDict = {
        "decision_id": decision.get("decision_id"),
        "routing_state": decision.get("decision"),
        "reason_codes": items(decision.get("reason_codes")),
        "missing_controls": items(decision.get("missing_controls")),
        "obligations": obligations,
    }
    if unenforced:
        context["unenforced_obligations"] = unenforced
    if decision.get("enforced") is False:
        context.update(mode=decision.get("mode"), enforced=False)
    if ignored:
        context["ignored"] = list(ignored)
    return {"decision": allowed, "context": context}


def refused(status: int, code: str, message: str) -> JsonDict:
    """One evaluation of a batch that could not be decided: closed, with the error in its context."""
    return {"decision": False, "context": {"error": {"status": status, "code": code, "message": message}}}


def metadata(base: str) -> JsonDict:
    """The PDP metadata document (``/.well-known/authzen-configuration``) for the base URL ``base``."""
    return {
        "policy_decision_point": base,
        "access_evaluation_endpoint": f"{base}/access/v1/evaluation",
        "access_evaluations_endpoint": f"{base}/access/v1/evaluations",
    }
