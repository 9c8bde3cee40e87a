"""Attested spend: what the gate cannot count itself (an agent run's model and tool cost).

A metering issuer (a registry entry whose ``facts`` lists ``metered_spend``) signs one spend
attestation per budget, subject and period::

    {fact: metered_spend, budget, subject, amount_minor, currency, period_start, period_end,
     issued_at, expires_at, issuer, signature {alg, kid, value}}

signed like every fact attestation (the KYA-CJ-1 JSON of the item without ``signature.value``).
``budget`` is a matrix budget's id and ``subject`` the key it counts under (the tenant id, agent
id or task type of its ``per``). Python verifies what needs keys (the issuer is registered for
``metered_spend``, the signature, the fields' form) and keeps the attestations of this action's
subjects; everything that decides is the policy's (``budget.rego``): whether the attestation
names this action's budget key, whether its period lies in the window, whether it is current at
the decision time, and the sum. A refused one is listed in ``input.context.attestations_refused``
(with the budget it names) and never counted; the policy holds that budget ``context_missing``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Protocol

from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import ALGORITHMS, Keyring, Signer, document_verifies, sign_document
from kcp_opa.core.verified import VerifiedSignatures
from kcp_opa.declare.trust import TrustRegistry

#: The fact a metering issuer is registered for (``issuers[*].facts``).
METERED_SPEND = "metered_spend"
_TEXT = ("fact", "budget", "subject", "currency", "period_start", "period_end", "issued_at", "expires_at", "issuer")
SIGNED = (*_TEXT, "amount_minor")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
Spend = JsonDict


class MeteringSource(Protocol):
    """Verified spend attestations for one action's subjects: ``(spends, refused)``."""

    def metered_spends(self, action: JsonObject) -> tuple[list[Spend], list[dict[str, str]]]: ...

    def describe(self) -> JsonDict: ...


def sign_spend(fields: JsonObject, issuer: str, key: Signer) -> JsonDict:
    """Sign one spend attestation as the metering ``issuer``."""
    item = {k: fields[k] for k in SIGNED if k in fields and k not in {"issuer", "fact"}}
    item |= {"fact": METERED_SPEND, "issuer": issuer}
    return sign_document(item, key)


def epoch_seconds(text: object) -> int | None:
    """An RFC 3339 time with its zone as whole seconds since the epoch; None when it is not one."""
    return _epoch_seconds(text) if isinstance(text, str) else None


@lru_cache(maxsize=4096)
def _epoch_seconds(text: str) -> int | None:
    """:func:`epoch_seconds` of a string (an attestation's times are read on every decision)."""
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int((moment - _EPOCH).total_seconds() // 1)


def subjects(action: JsonObject) -> set[str]:
    """The keys a budget of this action may count under (budget.rego's ``key``)."""
    return {
        v for v in (action.get("tenant_id"), action.get("agent_id"), action.get("action_type")) if isinstance(v, str)
    }


def refusal(
    raw: JsonObject,
    registry: TrustRegistry,
    keyring: Keyring | None,
    verified: VerifiedSignatures | None = None,
) -> str | None:
    """Why ``raw`` is not a verified spend attestation, or None when it is one (``verified``: the
    memo of signatures that verified before, kcp_opa.core.verified)."""
    amount = raw.get("amount_minor")
    if any(not isinstance(raw.get(k), str) for k in _TEXT) or type(amount) is not int or amount < 0:
        return "malformed"
    try:
        issuer = registry.issuer(str(raw["issuer"]))
    except IdentityError:
        issuer = None
    if issuer is None:
        return "unknown_issuer"
    if METERED_SPEND not in issuer.facts:
        return "issuer_not_allowed"
    signature = raw.get("signature")
    if not isinstance(signature, Mapping) or not isinstance(signature.get("value"), str):
        return "unsigned"
    alg, kid = signature.get("alg"), signature.get("kid")
    key = issuer.key(kid, keyring) if isinstance(kid, str) and alg in ALGORITHMS else None
    verifies = verified.document_verifies if verified is not None else document_verifies
    if key is None or key.alg != alg or not verifies(raw, key):
        return "bad_signature"
    times = [epoch_seconds(raw[k]) for k in ("period_start", "period_end", "issued_at", "expires_at")]
    if any(t is None for t in times) or (times[0] or 0) > (times[1] or 0):
        return "malformed"
    return None


def metered_spends(
    items: Iterable[object],
    action: JsonObject,
    registry: TrustRegistry,
    keyring: Keyring | None,
    verified: VerifiedSignatures | None = None,
) -> tuple[list[Spend], list[dict[str, str]]]:
    """The verified spend attestations of this action's subjects, and the refused ones.

    An attestation of another subject is not this decision's business (skipped); one whose
    subject cannot be read is refused (whose spend it is, nobody can tell). Of several for one
    budget, subject and period by one issuer the newest speaks (the largest if issued together).
    """
    mine = subjects(action)
    held: dict[tuple[str, ...], Spend] = {}
    refused: list[dict[str, str]] = []
    for raw in items:
        if not isinstance(raw, Mapping) or raw.get("fact") != METERED_SPEND:
            continue
        subject = raw.get("subject")
        if isinstance(subject, str) and subject not in mine:
            continue
        why = refusal(raw, registry, keyring, verified)
        if why is not None:
            budget = raw.get("budget")
            refused.append(
                {"fact": METERED_SPEND, "reason": why, **({"budget": budget} if isinstance(budget, str) else {})}
            )
            continue
        issuer = canonical_id(str(raw["issuer"]))
        spend = {
            "budget": raw["budget"],
            "subject": raw["subject"],
            "amount_minor": raw["amount_minor"],
            "currency": raw["currency"],
            "period_start_epoch_seconds": epoch_seconds(raw["period_start"]),
            "period_end_epoch_seconds": epoch_seconds(raw["period_end"]),
            "issued_epoch_seconds": epoch_seconds(raw["issued_at"]),
            "expires_epoch_seconds": epoch_seconds(raw["expires_at"]),
            "class": "attested",
            "source": f"attestation:{issuer}/{raw['signature']['kid']}",
        }
        slot = (issuer, str(raw["budget"]), str(subject), str(raw["currency"]), raw["period_start"], raw["period_end"])
        before = held.get(slot)
        if before is None or (spend["issued_epoch_seconds"], spend["amount_minor"]) > (
            before["issued_epoch_seconds"],
            before["amount_minor"],
        ):
            held[slot] = spend
    return sorted(held.values(), key=lambda s: (s["budget"], s["subject"], s["period_start_epoch_seconds"])), refused
