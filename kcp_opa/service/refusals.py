"""The HTTP status of each refusal code: one table the JSON API (http.py), the edge (httpedge.py),
``GET /v1/challenges`` (ui.py), the AuthZEN routes (authzenhttp.py) and the OpenAPI document
(openapi.py) all read, so what a route answers and what its document says cannot disagree.

A refusal is ``{"error", "code"}``; its status is :data:`STATUS`'s for the code, else
:data:`DEFAULT_STATUS` (422: the gate understood the request and refuses it). The AuthZEN routes
answer with :data:`AUTHZEN_STATUS` (the same table and AuthZEN's own codes). The groups below
name the codes every route of a kind can answer, wherever its handler: the OpenAPI document lists
each operation's statuses from them and from each catalog tool's own ``refusals``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

STATUS: Mapping[str, int] = MappingProxyType(
    {
        "bad_host": 421,  # a loopback listener refuses any other Host (DNS rebinding)
        "unauthenticated": 401,
        "not_authorized": 403,
        "not_your_decision": 403,
        "principal_mismatch": 403,
        "scope_not_granted": 403,
        "tenant_not_granted": 403,
        "unknown_decision": 404,
        "unknown_challenge": 404,
        "unknown_handler": 404,
        "no_reload": 404,  # an admin route on a server started without reload sources
        "handler_not_bound": 403,
        "challenge_used": 409,
        "replay": 409,
        "reload_failed": 409,
        "action_rejected": 400,
        "bad_request": 400,  # a body over the cap, not strict JSON, not an object, a bad query
        "bad_arguments": 400,
        "unknown_tool": 404,
        "store_unavailable": 503,  # the database is down, failing or read-only: retry later (nothing was done)
        "audit_unavailable": 503,  # the ledger cannot record an execution's intent: nothing ran, retry later
        "outcome_unrecorded": 500,  # the side effect ran and the ledger lacks its outcome: reconcile, never retry
        # POST /v1/facts: the attestation's form, whose it is, whether it verifies, whether it is current.
        "facts_not_taken": 404,  # a server without a trust registry takes no posted facts
        "no_ledger": 409,
        "fact_malformed": 400,
        "fact_not_attested": 400,
        "fact_unbound": 400,
        "fact_issuer_mismatch": 403,
        "fact_issuer_unknown": 403,
        "fact_issuer_not_allowed": 403,
        "fact_signature_invalid": 422,
        "fact_expired": 422,
        "fact_not_yet_valid": 422,  # issued in the future: it would outrank the facts issued before it
    }
)
#: Any code :data:`STATUS` does not name (``internal_error`` on the JSON API among them).
DEFAULT_STATUS = 422
#: The AuthZEN routes' statuses: the table, AuthZEN's request errors, and 500 for an internal error.
AUTHZEN_STATUS: Mapping[str, int] = MappingProxyType(
    {**STATUS, "authzen_request": 400, "authzen_mixed_tenants": 400, "internal_error": 500}
)

#: Every route: the edge's Host check on a loopback listener.
EDGE = ("bad_host",)
#: Every bearer-authenticated route.
AUTHENTICATED = ("unauthenticated",)
#: What any tool route can answer around its handler: its body, its arguments, its scope, a
#: handler's unexpected failure, the store or ledger down (catalog.py dispatch, desk.py call).
DISPATCH = ("bad_request", "bad_arguments", "scope_not_granted", "internal_error", "store_unavailable")

_MEANING = {
    400: "Bad request: the body, query or arguments are malformed, or the action breaks its contract",
    401: "Unauthenticated: send Authorization: Bearer <token> (WWW-Authenticate: Bearer)",
    403: "Forbidden: the caller may not do this",
    404: "Not found",
    409: "Conflict: already used, or the reload was refused (the server keeps serving)",
    421: "Misdirected: on a loopback listener, the Host header must be loopback",
    422: "Refused by the gate (the code names why)",
    500: "Fault: reconcile before any retry (the code names what)",
    503: "Unavailable: the store or the ledger cannot be reached; nothing was done, retry later",
}


def status_of(code: str, table: Mapping[str, int] = STATUS) -> int:
    """The HTTP status a refusal with ``code`` is answered with."""
    return table.get(code, DEFAULT_STATUS)


def statuses(codes: Iterable[str], table: Mapping[str, int] = STATUS) -> dict[int, list[str]]:
    """``codes`` grouped by the status each is answered with, each group sorted."""
    grouped: dict[int, list[str]] = {}
    for code in sorted(set(codes)):
        grouped.setdefault(status_of(code, table), []).append(code)
    return grouped


def meaning(status: int) -> str:
    """What a refusal status means, for the OpenAPI document's response descriptions."""
    return _MEANING.get(status, "Refused")
