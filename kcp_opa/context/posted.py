"""Attested facts issuers post to the service (``POST /v1/facts``), read from the shared store by
every decision they are bound to.

:class:`PostedAttestations` is the gate's attestation source when it runs with a trust registry:
the attestations of the ``--attestations`` file (held in memory) and those issuers posted, kept in
the service's store (:class:`~kcp_opa.stores.protocols.FactStore`, one for every replica), judged
together by the one verification of :mod:`kcp_opa.context.attested` on every decision. So a fact
posted on one replica counts for the next decision on any replica, and a reload whose registry
drops the issuer or its key drops the fact. A store that cannot be read fails the decision
(``store_unavailable``), never leaves the fact quietly missing.

:func:`intake_refusal` is the check at the door, before anything is kept: the same verification,
and what only the door can judge: the caller is the issuer that signed it, it is bound to one
action hash or one subject, and it has not expired.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

from kcp_opa.context.attested import SignedAttestations
from kcp_opa.context.factsources import Fact
from kcp_opa.context.metering import METERED_SPEND, epoch_seconds
from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.stores.protocols import FactStore

_HASH = re.compile(r"sha256:[0-9a-f]{64}")
#: The door's code for each refusal of :meth:`SignedAttestations.refusal`.
#: How far ahead of the gate's clock an issuer's clock may run. The newest fact speaks, so a fact
#: dated later would outrank (and, read newest first, crowd out) every fact issued before it.
MAX_FUTURE_SKEW_S = 300

_CODES = {
    "malformed": "fact_malformed",
    "not_an_attested_fact": "fact_not_attested",
    "unknown_issuer": "fact_issuer_unknown",
    "issuer_not_allowed": "fact_issuer_not_allowed",
    "unsigned": "fact_signature_invalid",
    "bad_signature": "fact_signature_invalid",
}
_SAY = {
    "fact_malformed": "the attestation is malformed: fact, value, issued_at, expires_at (RFC 3339) and issuer"
    " are required (kcp-opa facts sign makes one)",
    "fact_not_attested": "{fact!r} with this value is not a fact the gate takes from attestations",
    "fact_issuer_unknown": "issuer {issuer} is not in the trust registry {registry}",
    "fact_issuer_not_allowed": "the trust registry {registry} does not list {fact} in issuer {issuer}'s facts",
    "fact_signature_invalid": "the signature does not verify under a key the trust registry {registry} lists"
    " for issuer {issuer}",
}


class FactRefusedError(CodedError):
    """A posted attestation the gate will not keep (the code names why); nothing was kept."""

    code = "fact_refused"


class PostedAttestations:
    """The ``--attestations`` file's attestations and the posted ones, judged alike per decision
    (an :class:`~kcp_opa.context.attested.AttestationSource`)."""

    def __init__(self, held: SignedAttestations, store: FactStore) -> None:
        self.held, self.store = held, store

    def attested_facts(self, action: JsonObject, action_hash: str) -> tuple[dict[str, Fact], list[dict[str, str]]]:
        subject = _canonical(action.get("subject_id"))
        posted = [fact.document for fact in self.store.bound_to(action_hash, subject)]
        return self.held.judged([*self.held.items(), *posted], action, action_hash)

    def describe(self) -> JsonDict:
        return {**self.held.describe(), "posted": "POST /v1/facts, kept in the service's store"}


def _canonical(value: object) -> str | None:
    try:
        return canonical_id(value) if isinstance(value, str) else None
    except IdentityError:
        return None


def intake_refusal(verifier: SignedAttestations, raw: object, caller: str, now: dt.datetime) -> FactRefusedError | None:
    """Why the attestation ``raw`` posted by ``caller`` (a canonical principal id) is not kept, or
    None when it is one the gate would take: signed by a registered issuer allowed the fact, that
    issuer the caller, bound to one action hash or one subject, and not expired at ``now``."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("fact"), str) or not isinstance(raw.get("issuer"), str):
        return FactRefusedError(_SAY["fact_malformed"], "fact_malformed")
    if raw["fact"] == METERED_SPEND:
        return FactRefusedError(
            "a metered_spend attestation is not a fact: give it in the gate's --attestations file", "fact_not_attested"
        )
    issuer = _canonical(raw["issuer"])
    if issuer != caller:
        return FactRefusedError(
            f"the attestation names issuer {str(raw['issuer'])[:128]!r}; you are {caller}: an issuer posts"
            " only the facts it signed itself",
            "fact_issuer_mismatch",
        )
    bound_hash, subject = raw.get("action_hash"), raw.get("subject_id")
    if (bound_hash is None) == (subject is None):
        return FactRefusedError(
            "the attestation is bound to one action (action_hash) or one subject (subject_id): give exactly one",
            "fact_unbound",
        )
    if bound_hash is not None and (not isinstance(bound_hash, str) or not _HASH.fullmatch(bound_hash)):
        return FactRefusedError("action_hash is sha256:<64 lowercase hex>, as a decision shows it", "fact_unbound")
    if subject is not None and _canonical(subject) is None:
        return FactRefusedError("subject_id is not a valid principal id", "fact_unbound")
    action = {"subject_id": subject, "tenant_id": raw.get("tenant_id")} if subject is not None else {}
    why = verifier.refusal(raw, action, bound_hash if isinstance(bound_hash, str) else "")
    if why is not None:
        code = _CODES.get(why, "fact_malformed")
        text = _SAY[code].format(fact=raw["fact"], issuer=issuer, registry=verifier.registry.name)
        return FactRefusedError(text, code)
    issued, expires = epoch_seconds(raw["issued_at"]), epoch_seconds(raw["expires_at"])
    if issued is None or expires is None or expires <= issued:
        return FactRefusedError("expires_at is not after issued_at", "fact_malformed")
    if expires <= int(now.timestamp()):
        return FactRefusedError(f"the attestation expired at {raw['expires_at']}: sign a current one", "fact_expired")
    if issued > int(now.timestamp()) + MAX_FUTURE_SKEW_S:
        return FactRefusedError(
            f"the attestation is issued at {raw['issued_at']}, in the future: sign it with the time it is issued",
            "fact_not_yet_valid",
        )
    return None
