"""Attested facts: evidence status, screening and beneficiary status signed by a registered issuer.

An attestation is ``{fact, value, action_hash | subject_id [tenant_id], issued_at, expires_at,
issuer, signature {alg, kid, value}}``, signed like control evidence (the KYA-CJ-1 JSON of the
item without ``signature.value``; :func:`kcp_opa.core.signing.sign_document`). It counts only
when the registry lists its issuer for that fact (``issuers[*].facts``), the signature verifies,
and it is bound to this action's hash or its subject; a subject-bound attestation that names a
``tenant_id`` counts only for that tenant's actions (a subject id one tenant uses may be another
person in the next tenant). Whether it is still current is decision
logic: the fact carries its expiry and the policy compares it with the decision time, so a
replay judges it exactly as the gate did. A refused attestation is listed, with why, in
``input.context.attestations_refused`` and never becomes a fact.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Protocol

from kcp_opa.context.facts import ATTESTED_VALUES, FACTS, FactClass
from kcp_opa.context.factsources import Fact, fact
from kcp_opa.context.metering import METERED_SPEND, Spend, epoch_seconds, metered_spends
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import ALGORITHMS, Keyring, Signer, sign_document
from kcp_opa.core.verified import VerifiedSignatures
from kcp_opa.declare.trust import TrustRegistry

SIGNED = ("fact", "value", "issued_at", "expires_at", "issuer")
#: What an attestation is bound to: an action's hash, or a subject (within one tenant, if named).
BINDINGS = ("action_hash", "subject_id", "tenant_id")


class AttestationSource(Protocol):
    """Attested facts for one action: ``(facts, refused)``."""

    def attested_facts(self, action: JsonObject, action_hash: str) -> tuple[dict[str, Fact], list[dict[str, str]]]: ...

    def describe(self) -> JsonDict: ...


def sign_fact(fields: JsonObject, issuer: str, key: Signer) -> JsonDict:
    """Sign one fact attestation as ``issuer`` (a KYC provider, a beneficiary registry, ...)."""
    item = {k: fields[k] for k in (*SIGNED, *BINDINGS) if k in fields and k != "issuer"}
    item["issuer"] = issuer
    return sign_document(item, key)


def _same_id(left: object, right: object) -> bool:
    try:
        return isinstance(left, str) and isinstance(right, str) and canonical_id(left) == canonical_id(right)
    except IdentityError:
        return False


class SignedAttestations:
    """Fact and spend attestations held in memory, verified against the trust registry per action
    (an :class:`AttestationSource` and a :class:`~kcp_opa.context.metering.MeteringSource`).

    Each signature is verified once (``verified``, kcp_opa.core.verified: keyed by the exact
    signed bytes and the key's material), not once per decision it is offered to. The items are
    held as read-only copies: a holder changing its own mapping later changes nothing held."""

    def __init__(self, registry: TrustRegistry, keyring: Keyring | None = None, items: Iterable[object] = ()) -> None:
        self.registry, self.keyring = registry, keyring
        self.verified = VerifiedSignatures()
        # Held as read-only copies the memo knows: each one's signed bytes are hashed once.
        self._items: list[object] = [self.verified.own(item) for item in items]
        self._lock = threading.Lock()

    def add(self, item: object) -> None:
        held = self.verified.own(item)
        with self._lock:
            self._items.append(held)

    def items(self) -> list[object]:
        """The attestations held now (read-only copies)."""
        with self._lock:
            return list(self._items)

    def describe(self) -> JsonDict:
        with self._lock:
            held = len(self._items)
        return {"kind": "attestations", "registry": self.registry.name, "held": held}

    def metered_spends(self, action: JsonObject) -> tuple[list[Spend], list[dict[str, str]]]:
        """The verified spend attestations of this action's subjects (kcp_opa.context.metering)."""
        with self._lock:
            items = list(self._items)
        return metered_spends(items, action, self.registry, self.keyring, self.verified)

    def refusal(self, raw: object, action: JsonObject, action_hash: str) -> str | None:
        """Why ``raw`` does not attest a fact of this action, or None when it does."""
        if not isinstance(raw, Mapping) or any(not isinstance(raw.get(k), str | bool) for k in SIGNED):
            return "malformed"
        name, value = raw["fact"], raw["value"]
        spec = FACTS.get(str(name))
        if spec is None or spec.fact_class is not FactClass.ATTESTED:
            return "not_an_attested_fact"
        allowed = ATTESTED_VALUES[spec.name]
        if not any(type(value) is type(v) and value == v for v in allowed):  # True is not 1
            return "not_an_attested_fact"
        try:
            issuer = self.registry.issuer(str(raw["issuer"]))
        except IdentityError:
            issuer = None
        if issuer is None:
            return "unknown_issuer"
        if spec.name not in issuer.facts:
            return "issuer_not_allowed"
        signature = raw.get("signature")
        if not isinstance(signature, Mapping) or not isinstance(signature.get("value"), str):
            return "unsigned"
        alg, kid = signature.get("alg"), signature.get("kid")
        key = issuer.key(kid, self.keyring) if isinstance(kid, str) and alg in ALGORITHMS else None
        if key is None or key.alg != alg or not self.verified.document_verifies(raw, key):
            return "bad_signature"
        if "action_hash" in raw:
            bound = raw["action_hash"] == action_hash
        else:
            bound = _same_id(raw.get("subject_id"), action.get("subject_id"))
            if "tenant_id" in raw:  # named: that tenant's subject only (exactly that tenant id)
                bound = bound and isinstance(raw["tenant_id"], str) and raw["tenant_id"] == action.get("tenant_id")
        if not bound:
            return "not_bound_to_this_action"
        if epoch_seconds(raw["issued_at"]) is None or epoch_seconds(raw["expires_at"]) is None:
            return "malformed"
        return None

    def attested_facts(self, action: JsonObject, action_hash: str) -> tuple[dict[str, Fact], list[dict[str, str]]]:
        with self._lock:
            items = list(self._items)
        return self.judged(items, action, action_hash)

    def judged(
        self, items: Iterable[object], action: JsonObject, action_hash: str
    ) -> tuple[dict[str, Fact], list[dict[str, str]]]:
        """The facts ``items`` attest for this action, and the refused ones (another action's are
        skipped); of several attesting one fact, the newest speaks."""
        facts: dict[str, Fact] = {}
        refused: list[dict[str, str]] = []
        for raw in items:
            if isinstance(raw, Mapping) and raw.get("fact") == METERED_SPEND:
                continue  # a spend, not a fact: metered_spends
            why = self.refusal(raw, action, action_hash)
            if why == "not_bound_to_this_action":
                continue  # another action's attestation: not this decision's business
            if why is not None or not isinstance(raw, Mapping):
                refused.append(
                    {"fact": str(raw.get("fact", "")) if isinstance(raw, Mapping) else "", "reason": why or "malformed"}
                )
                continue
            issued, expires = epoch_seconds(raw["issued_at"]), epoch_seconds(raw["expires_at"])
            name = str(raw["fact"])
            held = facts.get(name)
            if held is not None and (integer(held["issued_epoch_seconds"]) or 0) >= (issued or 0):
                continue  # the newest attestation of a fact speaks for it
            where = f"attestation:{canonical_id(str(raw['issuer']))}/{raw['signature']['kid']}"
            facts[name] = fact(name, raw["value"], where, issued_epoch_seconds=issued, expires_epoch_seconds=expires)
        return facts, refused
