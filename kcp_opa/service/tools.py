"""The service's tools: the seven KYA tools in the trust sequence, the two kcp-opa adds, and three
JSON-API-only entries, each one :class:`~kcp_opa.service.catalog.Tool` in :data:`CATALOG`.

MCP ``tools/list``, dispatch, the ``/v1`` routes, the OpenAPI document and ``/v1/status`` are all
derived from :data:`CATALOG` (catalog.py): a new tool is one entry here (docs/architecture.md).
"""

from __future__ import annotations

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonDict, JsonObject, number, strings
from kcp_opa.models.decision import RoutingState
from kcp_opa.schemas import _inline, schema
from kcp_opa.service.callers import Principal, Scope
from kcp_opa.service.catalog import Catalog, Route, Tool
from kcp_opa.service.desk import GateService
from kcp_opa.service.factintake import REFUSALS as FACT_REFUSALS
from kcp_opa.service.factintake import post_fact


def _action_schema() -> JsonDict:
    document = schema("action-intent.schema.json")
    inlined: JsonDict = _inline(document, document.get("$defs", {}))
    return {k: v for k, v in inlined.items() if k not in {"$schema", "$id"}}


def _object(properties: JsonObject, required: list[str], *, closed: bool = True) -> JsonDict:
    out: JsonDict = {"type": "object", "properties": dict(properties), "required": required}
    if closed:
        out["additionalProperties"] = False
    return out


_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}
_DECISION = _object(
    {
        "schema_version": _STR,
        "decision_id": _STR,
        "action_hash": _STR,
        "decision": {"enum": [s.value for s in RoutingState]},
        "authorization_status": {"enum": ["APPROVED", "PENDING_CONTROLS", "DENIED"]},
        "execution_allowed": {"type": "boolean"},
        "risk_level": _STR,
        "required_controls": _STRS,
        "satisfied_controls": _STRS,
        "missing_controls": _STRS,
        "reason_codes": _STRS,
        "policy_version": _STR,
        "bundle_revision": _STR,
    },
    ["decision_id", "action_hash", "decision", "authorization_status", "execution_allowed", "required_controls"],
    closed=False,
)
_CHALLENGE = _object(
    {
        "challenge_id": _STR,
        "decision_id": _STR,
        "action_hash": _STR,
        "control": _STR,
        "addressed_to": {"type": "object"},
        "summary": {"type": "object"},
        "expires_at": _STR,
        "state": {"enum": ["open", "consumed"]},
    },
    ["challenge_id", "decision_id", "action_hash", "control", "addressed_to", "summary", "expires_at", "state"],
    closed=False,
)
_RECEIPT = {"type": "object", "description": "A KYA v2.0 delegation receipt, as issue_delegation_receipt returned it."}


_ACTION = _action_schema()
#: What deciding refuses of the caller's action: its contract, and what it states about its caller.
_CALLER_STATED = ("action_rejected", "not_authorized", "principal_mismatch", "tenant_not_granted")
#: What execution refuses or faults with past dispatch (the receipt's own checks answer 422).
_EXECUTION: tuple[str, ...] = ("unknown_handler", "handler_not_bound", "replay", "expired", "bad_signature")
_EXECUTION += ("action_mismatch", "audit_unavailable", "outcome_unrecorded", "handler_error")
_DECIDED = _object({"action": _ACTION}, ["action"])


def _evaluate_financial(service: GateService, p: Principal, args: JsonObject) -> JsonDict:
    return service.evaluate(p, args.get("action"), financial=True)


def _evaluate(service: GateService, p: Principal, args: JsonObject) -> JsonDict:
    return service.evaluate(p, args.get("action"))


def _create_challenges(service: GateService, p: Principal, args: JsonObject) -> JsonDict:
    decision_id, ttl, controls = str(args.get("decision_id", "")), _ttl(args), args.get("controls")
    chosen = None if controls is None else strings(controls)
    return service.create_challenges(p, decision_id, chosen, 900 if ttl is None else ttl)


def _ttl(args: JsonObject) -> int | None:
    """``ttl_seconds`` as the input schema admits it (an integer, perhaps written 30.0), or None."""
    ttl = number(args.get("ttl_seconds"))
    return None if ttl is None else int(ttl)


def _record_result(service: GateService, p: Principal, args: JsonObject) -> JsonDict:
    challenge_id, status = str(args.get("challenge_id", "")), str(args.get("status", ""))
    return service.record_result(p, challenge_id, status, str(args.get("evidence_reference", "")))


#: Execution refusals raised after the handler was claimed to run: the execution failed, not refused.
_FAILED = frozenset({"handler_failed", "handler_error", "result_not_json", "late_outcome", "outcome_unrecorded"})


def _execute(service: GateService, p: Principal, args: JsonObject) -> JsonDict:
    """Run the execution, counted by outcome (``kcp_opa_executions_total``)."""
    try:
        done = service.execute(p, args.get("action"), args.get("receipt"), str(args.get("handler", "")))
    except KcpOpaError as exc:
        failed = getattr(exc, "code", "") in _FAILED
        service.metrics.executions.labels(outcome="failed" if failed else "refused").inc()
        raise
    service.metrics.executions.labels(outcome="replayed" if done.get("replayed") else "executed").inc()
    return done


CATALOG = Catalog(
    (
        Tool(
            "evaluate_financial_action",
            "Decide a financial action (it carries an amount); the decision is kept for its controls.",
            _DECIDED,
            _DECISION,
            Scope.EVALUATE,
            "evaluate actions",
            _evaluate_financial,
            refusals=(*_CALLER_STATED, "not_financial"),
        ),
        Tool(
            "create_control_challenge",
            "Open one-time, expiring challenges for a decision's missing controls, addressed to who may answer.",
            _object(
                {"decision_id": _STR, "controls": _STRS, "ttl_seconds": {"type": "integer", "minimum": 30}},
                ["decision_id"],
            ),
            _object(
                {"decision_id": _STR, "action_hash": _STR, "challenges": {"type": "array", "items": _CHALLENGE}},
                ["decision_id", "action_hash", "challenges"],
            ),
            Scope.OPEN_CHALLENGE,
            "open control challenges",
            _create_challenges,
            Route(
                "/v1/decisions/{decision_id}/challenges",
                "Open challenges for a decision's missing controls",
                parameter="decision_id",
            ),
            refusals=("unknown_decision", "not_your_decision", "bad_ttl", "control_not_missing"),
        ),
        Tool(
            "record_control_result",
            "Answer a challenge addressed to the caller (PASSED or FAILED); the policy re-derives the decision.",
            _object(
                {"challenge_id": _STR, "status": {"enum": ["PASSED", "FAILED"]}, "evidence_reference": _STR},
                ["challenge_id", "status", "evidence_reference"],
            ),
            _object(
                {"challenge_id": _STR, "control": _STR, "decision": _DECISION}, ["challenge_id", "control", "decision"]
            ),
            Scope.RECORD_RESULT,
            "record control results",
            _record_result,
            Route(
                "/v1/challenges/{challenge_id}/result",
                "Answer a challenge addressed to the caller",
                parameter="challenge_id",
            ),
            refusals=(
                "not_authorized",
                "malformed_evidence",
                "unknown_challenge",
                "challenge_used",
                "unknown_decision",
            ),
        ),
        Tool(
            "issue_delegation_receipt",
            "Sign a one-time receipt for an APPROVED decision, bound to the frozen action's hash.",
            _object(
                {"decision_id": _STR, "ttl_seconds": {"type": "integer", "minimum": 30, "maximum": 900}},
                ["decision_id"],
            ),
            _object({"receipt": _RECEIPT, "action": {"type": "object"}}, ["receipt", "action"]),
            Scope.ISSUE_RECEIPT,
            "issue delegation receipts",
            lambda service, p, args: service.issue_receipt(p, str(args.get("decision_id", "")), _ttl(args)),
            Route("/v1/receipts", "Sign a one-time receipt for an APPROVED decision"),
            refusals=("not_authorized", "unknown_decision", "not_approved", "controls_missing", "hold_stands"),
        ),
        Tool(
            "verify_and_consume_receipt",
            "Verify a receipt against the final action and consume it (for a side effect run elsewhere).",
            _object({"receipt": _RECEIPT, "action": _ACTION}, ["receipt", "action"]),
            _object(
                {"verified": {"type": "boolean"}, "consumed": {"type": "boolean"}, "receipt_id": _STR},
                ["verified", "consumed", "receipt_id"],
            ),
            Scope.VERIFY_RECEIPT,
            "verify and consume receipts",
            lambda service, p, args: service.verify_and_consume(p, args.get("receipt"), args.get("action")),
            Route("/v1/receipts/verify", "Verify and consume a receipt"),
            refusals=("action_rejected", "replay", "expired", "bad_signature", "action_mismatch", "policy_changed"),
        ),
        Tool(
            "execute_authorized_action",
            "Verify and consume the receipt, then run a registered handler once per idempotency key.",
            _object({"action": _ACTION, "receipt": _RECEIPT, "handler": _STR}, ["action", "receipt", "handler"]),
            _object(
                {
                    "idempotency_key": _STR,
                    "receipt_id": _STR,
                    "outcome": {},
                    "replayed": {"type": "boolean"},
                    "executed_by": _STR,
                },
                ["idempotency_key", "receipt_id", "replayed"],
            ),
            Scope.EXECUTE,
            "execute actions",
            _execute,
            Route("/v1/executions", "Verify, consume, run a handler once"),
            refusals=("action_rejected", *_EXECUTION),
        ),
        Tool(
            "write_audit_event",
            "Append an event to the hash-chained audit ledger, attributed to the authenticated caller.",
            _object({"event": _STR, "detail": {"type": "object"}}, ["event"]),
            _object(
                {"written": {"type": "boolean"}, "event": _STR, "principal": _STR}, ["written", "event", "principal"]
            ),
            Scope.WRITE_AUDIT,
            "write audit events",
            lambda service, p, args: service.write_audit_event(p, str(args.get("event", "")), args.get("detail") or {}),
            Route("/v1/audit-events", "Append a note to the audit ledger"),
        ),
        Tool(
            "evaluate_action",
            "Decide any action type with the same gate; the decision is kept for its controls.",
            _DECIDED,
            _DECISION,
            Scope.EVALUATE,
            "evaluate actions",
            _evaluate,
            Route("/v1/decisions", "Decide an action; the decision is kept for its controls"),
            refusals=_CALLER_STATED,
        ),
        Tool(
            "hash_action",
            "The action's KYA-CJ-1 hash (what decisions, evidence and receipts are bound to).",
            _DECIDED,
            _object({"action_hash": _STR, "canonicalization": _STR}, ["action_hash", "canonicalization"]),
            Scope.HASH,
            "hash actions",
            lambda service, p, args: service.hash_action(p, args.get("action")),
            refusals=("action_rejected",),
        ),
        # JSON API only: the OPA-compatible decision (its route is http.py's, {"input"} -> {"result"}).
        Tool(
            "opa_decision",
            "The bare decision document (decided and audited, not kept).",
            _object({"action": {"type": "object"}}, ["action"]),
            _DECISION,
            Scope.EVALUATE,
            "evaluate actions",
            lambda service, p, args: service.decide_only(p, args.get("action")),
            mcp=False,
            refusals=_CALLER_STATED,
        ),
        # JSON API only: a registered issuer posts a fact it signed (factintake.py).
        Tool(
            "post_fact",
            "Keep a fact attestation the caller signed as its registered issuer (kcp-opa facts sign), bound to"
            " one action's hash or one subject; the next decision bound to it uses it.",
            _object(
                {
                    "fact": {"description": "An attested fact: evidence_status, new_beneficiary, ..."},
                    "value": {"description": "Its value (a boolean, or evidence_status's word)."},
                    "action_hash": {"description": "The action it is bound to (sha256:..., as a decision shows it)."},
                    "subject_id": {"description": "Or the subject it is bound to."},
                    "issued_at": {"description": "RFC 3339."},
                    "expires_at": {"description": "RFC 3339; refused once past."},
                    "issuer": {"description": "The caller's own id: an issuer posts only what it signed."},
                    "signature": {"description": "{alg, kid, value}, over the KYA-CJ-1 JSON of the rest."},
                },
                [],
                closed=False,
            ),
            _object(
                {
                    "fact_id": _STR,
                    "fact": _STR,
                    "value": {},
                    "action_hash": _STR,
                    "subject_id": _STR,
                    "issuer": _STR,
                    "expires_at": _STR,
                    "kept": {"type": "boolean"},
                    "already_kept": {"type": "boolean"},
                },
                ["fact_id", "fact", "value", "issuer", "expires_at", "kept", "already_kept"],
            ),
            Scope.POST_FACTS,
            "post facts",
            lambda service, p, args: post_fact(service, p, args),
            Route("/v1/facts", "Post a signed fact attestation as its registered issuer"),
            mcp=False,
            refusals=FACT_REFUSALS,
        ),
        Tool(
            "read_challenge",
            "One challenge, for its addressees and for principals that may read.",
            _object({"challenge_id": _STR}, ["challenge_id"]),
            _CHALLENGE,
            None,
            "read challenges",
            lambda service, p, args: service.read_challenge(p, str(args.get("challenge_id", ""))),
            Route("/v1/challenges/{challenge_id}", "One challenge (its addressees and readers)", "get", "challenge_id"),
            mcp=False,
            refusals=("unknown_challenge", "not_authorized"),
        ),
    )
)

#: The tools MCP ``tools/list`` gives, in order: the seven KYA tools in the seed's order, then kcp-opa's two.
TOOL_NAMES = tuple(tool.name for tool in CATALOG if tool.mcp)
