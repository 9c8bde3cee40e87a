"""``POST /v1/facts``: a registered issuer posts a signed fact attestation; the gate checks it at
the door, records it in the ledger, keeps it in the store every replica shares, and the next
decision bound to it uses it.

The caller holds ``post_facts`` (the ``fact_issuer`` role: a registry principal, never an agent,
that is itself an issuer the registry lists facts for; issuing.py) and posts only what it signed
itself. The door (kcp_opa.context.posted.intake_refusal) refuses, with a code naming why and
nothing kept: a malformed attestation, another issuer's, an unregistered issuer, a fact the
issuer is not listed for, a signature that does not verify, no binding or two, an expired fact.
A kept fact is judged again on every decision (its issuer and key may be gone after a reload).
"""

from __future__ import annotations

import datetime as dt

from kcp_opa.context.posted import PostedAttestations, intake_refusal
from kcp_opa.core.errors import CodedError, LedgerError, StoreUnavailableError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import canonical_id
from kcp_opa.service.callers import AccessDeniedError, Principal, PrincipalKind, Scope
from kcp_opa.service.desk import GateService
from kcp_opa.stores.storedtypes import posted_fact

#: The codes the route answers beyond dispatch's (their statuses: refusals.py).
REFUSALS = (
    "not_authorized",
    "facts_not_taken",
    "fact_malformed",
    "fact_not_attested",
    "fact_unbound",
    "fact_issuer_mismatch",
    "fact_issuer_unknown",
    "fact_issuer_not_allowed",
    "fact_signature_invalid",
    "fact_expired",
    "audit_unavailable",
    "no_ledger",
)

#: How long an expired posted fact stays in the store: each post deletes the ones expired longer
#: (a decision archives the facts it used; a day covers a re-decision at approval or execution).
EXPIRED_FACTS_KEPT_S = 86_400


def post_fact(service: GateService, principal: Principal, attestation: JsonObject) -> JsonDict:
    """Check ``attestation`` as the gate would use it, record and keep it; what was kept."""
    principal.require(Scope.POST_FACTS, "post facts")
    if principal.kind is PrincipalKind.AGENT:  # an agent never vouches for facts about its own actions
        raise AccessDeniedError(f"agent {principal.id} may not post facts")
    gate = service.gate
    source = gate.context.attestations if gate.context is not None else None
    if not isinstance(source, PostedAttestations):
        raise CodedError(
            "this server takes no posted facts: start it with --trust REGISTRY (and a store)", "facts_not_taken"
        )
    moment = dt.datetime.now(dt.UTC)
    refused = intake_refusal(source.held, attestation, principal.id, moment)
    if refused is not None:
        raise refused
    subject = attestation.get("subject_id")
    kept = posted_fact(
        dict(attestation),
        issuer=principal.id,
        subject_id=None if subject is None else canonical_id(str(subject)),
    )
    bound = {"action_hash": kept.action_hash} if kept.action_hash is not None else {"subject_id": kept.subject_id}
    if "tenant_id" in attestation:
        bound["tenant_id"] = str(attestation["tenant_id"])
    summary = {"fact_id": kept.fact_id, "fact": kept.fact, "value": attestation["value"], **bound}
    summary |= {"issuer": kept.issuer, "expires_at": kept.expires_at}
    if gate.audit is None:
        raise CodedError("this service has no audit ledger: a posted fact is recorded before it is kept", "no_ledger")
    try:  # recorded first: no fact counts that the ledger does not show was posted, and by whom
        gate.audit.event("note", None, None, note="fact_posted", detail=summary, principal=principal.to_dict())
    except StoreUnavailableError:
        raise
    except LedgerError as exc:
        raise CodedError(
            f"the ledger cannot record the posted fact, so it is not kept: {exc}", "audit_unavailable"
        ) from None
    new = source.store.keep(kept)
    source.store.prune(int(moment.timestamp()) - EXPIRED_FACTS_KEPT_S)
    service.metrics.facts_posted.labels(fact=kept.fact).inc()
    return {**summary, "kept": True, "already_kept": not new}
