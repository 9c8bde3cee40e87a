"""Decisions from another KYA-compatible gate: accepted only when that gate is a registered issuer.

A KYA reference decision document carries ``decision_id`` and ``action_hash`` once, at the top;
its evidence items (``control``, ``status``, ``actor_type``, ``actor_id``,
``evidence_reference``, ``completed_at``) do not repeat them. When the operator names the gate
(``--issuer``) and the trust registry lists it as a ``gate`` allowed to attest those controls,
each item is bound by the document's own ids; the acting principal and its type still come from
the registry, and the bundle's control policy judges every item (separation of duties, roles,
FAILED is final) before the receipt is signed. Every refusal names the item and the reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

from kcp_opa.authorize.controls import EVIDENCE_ENTRYPOINT, registry_mismatch
from kcp_opa.authorize.documents import Receipt
from kcp_opa.authorize.parties import parties
from kcp_opa.authorize.receipts import issue_for_checked_decision
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.jsonread import JsonDict, JsonObject, Strict
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import ALGORITHMS, Key, Keyring, Signer, document_verifies
from kcp_opa.decide.engine import RegopyEngine
from kcp_opa.declare.trust import Issuer, TrustRegistry


def _refuse(message: str, code: str) -> ReceiptIssueError:
    return ReceiptIssueError(message, code)


def issue_for_foreign_decision(
    document: JsonObject,
    action: JsonObject,
    key: Signer,
    *,
    gate: str,
    registry: TrustRegistry,
    bundle: LoadedBundle,
    keyring: Keyring | None = None,
    ttl_seconds: int | None = None,
    now: dt.datetime | None = None,
    accept_unsigned: bool = False,
) -> Receipt:
    """Issue a receipt under a decision document written by the registered gate ``gate``.

    The document must carry a signature that verifies with one of the gate's registered keys.
    Unsigned is accepted only when the registry marks the gate ``unsigned_decisions`` AND the
    caller passes ``accept_unsigned``; the receipt then says ``decision_authentication: unsigned``.
    """
    try:
        issuer = registry.issuer(gate)
    except IdentityError as exc:
        raise _refuse(f"gate {gate!r}: {exc}", "untrusted_gate") from None
    if issuer is None or issuer.type != "gate":
        raise _refuse(
            f"gate {gate!r} is not a registered gate issuer in trust registry {registry.name}: its decision is not"
            " trusted",
            "untrusted_gate",
        )
    if registry_mismatch(bundle, registry) is not None:
        raise _refuse("the bundle was compiled with another trust registry (compile with --trust)", "registry_mismatch")
    if document.get("signature") is None:
        if not issuer.unsigned_decisions:
            raise _refuse(
                f"gate {issuer.id} has registered keys: its decision document must carry a signature that verifies"
                " with one of them (a registry may mark a gate unsigned_decisions)",
                "unsigned_decision",
            )
        if not accept_unsigned:
            raise _refuse(
                f"the registry marks gate {issuer.id} unsigned: accepting its unsigned decision needs"
                " --accept-unsigned-decision",
                "unsigned_decision",
            )
    _check_document_signature(document, issuer.id, lambda kid, alg: _key(issuer, kid, alg, keyring))
    decision_id, digest = document.get("decision_id"), document.get("action_hash")
    if not isinstance(decision_id, str) or not isinstance(digest, str):
        raise _refuse("the decision document lacks decision_id or action_hash", "malformed_decision")
    fields = Strict(document, _malformed)
    required, roles = fields.strings("required_controls"), fields.strings("approver_roles")
    engine = RegopyEngine(bundle, EVIDENCE_ENTRYPOINT, preflight=False)
    try:
        party_ids = parties(action)
    except EvidenceRejectedError as exc:
        raise _refuse(str(exc), exc.code) from None
    subject = action.get("subject_id")
    prior: list[dict[str, str]] = []
    bound: list[JsonDict] = []
    satisfied: list[str] = []
    for number, item in enumerate(fields.items("control_evidence"), start=1):
        label = f"evidence item {number} ({item.get('control') if isinstance(item, Mapping) else '?'})"
        if not isinstance(item, Mapping):
            raise _refuse(f"{label} is not an object", "malformed_evidence")
        for name, expected in (("decision_id", decision_id), ("action_hash", digest)):
            if name in item and item[name] != expected:
                raise _refuse(f"{label} is bound to another {name.split('_')[0]} ({item[name]})", f"evidence_{name}")
        control = item.get("control")
        if control not in issuer.controls:
            raise _refuse(f"{label}: gate {issuer.id} may not attest {control!r}", "issuer_not_allowed")
        try:
            actor = canonical_id(str(item.get("actor_id")))
        except IdentityError as exc:
            raise _refuse(f"{label}: {exc}", exc.code) from None
        principal = registry.principals.get(actor)
        if principal is None:
            raise _refuse(f"{label}: principal {actor!r} is not in the trust registry", "unknown_principal")
        verdict = engine.evaluate(
            {
                "evidence": {**item, "actor_id": actor},
                "issuer": issuer.id,
                "prior": prior,
                "action": dict(action),
                "subject": canonical_id(subject) if isinstance(subject, str) else "",
                "parties": party_ids,
                "required_controls": required,
                "approver_roles": roles,
            }
        )
        value = verdict.value or {}
        if verdict.error is not None or value.get("accepted") is not True:
            reason = value.get("message", verdict.error or "the evidence could not be judged")
            raise _refuse(f"{label} by {actor}: {reason}", str(value.get("code", "evidence_unreadable")))
        if item.get("actor_type") is not None and item["actor_type"] != value.get("actor_type"):
            raise _refuse(
                f"{label}: the document says {actor} is {item['actor_type']!r}, the registry says"
                f" {value.get('actor_type')!r}",
                "actor_type_mismatch",
            )
        prior.append({"control": str(control), "status": str(item.get("status"))})
        satisfied = [str(c) for c in value.get("satisfied") or []]
        bound.append({**item, "actor_id": actor, "decision_id": decision_id, "action_hash": digest})
    unsatisfied = [c for c in required if c not in satisfied]
    if unsatisfied:
        raise _refuse(f"no accepted PASSED evidence (or a FAILED one) for {', '.join(unsatisfied)}", "controls_missing")
    return issue_for_checked_decision(
        {**document, "control_evidence": bound},
        action,
        key,
        ttl_seconds=ttl_seconds,
        now=now,
        decision_hash=canonical_hash(dict(document)),
        unsigned_decision=document.get("signature") is None,
    )


def _malformed(message: str) -> ReceiptIssueError:
    """A list field of the foreign document (absent or null reads as empty) of another type, or
    with a non-string control or role: read as empty, a malformed ``required_controls`` would
    issue a receipt requiring nothing."""
    return _refuse(f"the decision document's {message}", "malformed_decision")


def _key(issuer: Issuer, kid: object, alg: object, keyring: Keyring | None) -> Key | None:
    key: Key | None = issuer.key(kid, keyring) if isinstance(kid, str) and alg in ALGORITHMS else None
    return key if key is not None and key.alg == alg else None


def _check_document_signature(document: JsonObject, gate: str, lookup: Callable[[object, object], Key | None]) -> None:
    """A document that carries a signature must verify with the gate's registered key."""
    signature = document.get("signature")
    if signature is None:
        return
    if not isinstance(signature, Mapping) or not isinstance(signature.get("value"), str):
        raise _refuse("the decision document's signature is malformed", "bad_signature")
    key = lookup(signature.get("kid"), signature.get("alg"))
    if key is None:
        raise _refuse(f"gate {gate} has no {signature.get('alg')} key {signature.get('kid')!r}", "unknown_issuer_key")
    if not document_verifies(document, key):
        raise _refuse(f"the decision document's signature does not verify with gate {gate}'s key", "bad_signature")
