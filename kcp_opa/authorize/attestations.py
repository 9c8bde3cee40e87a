"""Signed control evidence: an attestation by a registered issuer, checked before the policy sees it.

An attestation is the evidence item plus ``issuer`` and ``signature {alg, kid, value}``; the
signature covers the KYA-CJ-1 JSON of the item with only ``signature.value`` removed (the
receipt rule), so the control, the status, the acting principal, the time and the decision and
action it is bound to are all signed. Who the principal is (human, agent, provider, ...) is
read from the trust registry; an ``actor_type`` in the body is only compared with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from kcp_opa.authorize.documents import ATTESTATION_FIELDS, Attestation
from kcp_opa.core.documents import Signature
from kcp_opa.core.errors import EvidenceRejectedError, MalformedDocumentError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import ALGORITHMS, Keyring, Signer, document_verifies, signed_bytes
from kcp_opa.declare.trust import TrustRegistry

SIGNED_FIELDS = ATTESTATION_FIELDS
#: Registry principal type -> the KYA actor_type a body may declare for it.
_DECLARABLE = {
    "human": {"human", "user"},
    "ai_agent": {"ai_agent"},
    "provider": {"provider"},
    "system": {"system"},
    "executor": {"system"},
    "auditor": {"system"},
}


#: What an issuer signs: the item with only ``signature.value`` removed.
attestation_bytes = signed_bytes


def sign_attestation(fields: JsonObject, issuer: str, key: Signer) -> JsonDict:
    """Sign one evidence item as ``issuer`` (an approval app, an IdP, the gate for its ledger).

    The wire form of the :class:`Attestation`; a field missing or not a non-empty string is a
    ``malformed_evidence`` refusal, so nothing is signed that a verifier could not read.
    """
    draft = {name: fields.get(name) for name in SIGNED_FIELDS if name != "issuer"}
    draft |= {"issuer": issuer, "signature": Signature(key.alg, key.kid, "").to_dict()}
    return Attestation.from_dict(draft).signed_by(key).to_dict()


@dataclass(frozen=True)
class VerifiedAttestation:
    """A verified item: its canonical principal and issuer, and the signed document as given."""

    control: str
    status: str
    actor_id: str
    issuer: str
    decision_id: str
    action_hash: str
    attestation: Attestation
    verify_ns: int

    @property
    def signed(self) -> JsonDict:
        """The signed document as the policy reads it (the JSON boundary)."""
        return self.attestation.to_dict()


def verify_attestation(raw: object, registry: TrustRegistry, keyring: Keyring | None) -> VerifiedAttestation:
    """Check issuer, key, signature and principal; each refusal has its own code."""
    started = time.perf_counter_ns()
    if not isinstance(raw, Mapping):
        raise EvidenceRejectedError("control evidence is a JSON object", "malformed_evidence")
    signature = raw.get("signature")
    if not isinstance(signature, Mapping) or not isinstance(signature.get("value"), str):
        raise EvidenceRejectedError(
            "the evidence is not signed: a control result must be an attestation by a registered issuer",
            "unsigned_evidence",
        )
    issuer_id = raw.get("issuer")
    try:
        issuer = registry.issuer(issuer_id) if isinstance(issuer_id, str) else None
    except IdentityError:
        issuer = None
    if issuer is None:
        raise EvidenceRejectedError(f"issuer {issuer_id!r} is not in the trust registry", "unknown_issuer")
    control = raw.get("control")
    if control not in issuer.controls:
        raise EvidenceRejectedError(f"issuer {issuer.id} may not attest {control!r}", "issuer_not_allowed")
    alg, kid = signature.get("alg"), signature.get("kid")
    key = issuer.key(kid, keyring) if isinstance(kid, str) and alg in ALGORITHMS else None
    if key is None or key.alg != alg:
        raise EvidenceRejectedError(f"issuer {issuer.id} has no {alg} key {kid!r}", "unknown_issuer_key")
    if not document_verifies(raw, key):
        raise EvidenceRejectedError(f"the signature of {issuer.id} does not verify", "bad_signature")
    try:
        attestation = Attestation.from_dict(raw)
    except MalformedDocumentError as exc:
        raise EvidenceRejectedError(f"signed {exc}", "malformed_evidence") from None
    try:
        actor = canonical_id(attestation.actor_id)
    except IdentityError as exc:
        raise EvidenceRejectedError(str(exc), exc.code) from None
    principal = registry.principals.get(actor)
    if principal is None:
        raise EvidenceRejectedError(f"principal {actor!r} is not in the trust registry", "unknown_principal")
    declared = attestation.actor_type
    if declared is not None and declared not in _DECLARABLE.get(principal.type, set()):
        raise EvidenceRejectedError(
            f"the evidence declares {actor!r} a {declared!r}; the registry says {principal.type!r}",
            "actor_type_mismatch",
        )
    return VerifiedAttestation(
        control=attestation.control,
        status=attestation.status,
        actor_id=actor,
        issuer=issuer.id,
        decision_id=attestation.decision_id,
        action_hash=attestation.action_hash,
        attestation=attestation,
        verify_ns=time.perf_counter_ns() - started,
    )
