"""The service as an evidence issuer, and registry principals as service callers.

With a trust registry the service signs each control result it records (an approval app in the
registry's sense): the answering principal's canonical id, the challenge's decision id and action
hash, the status and the reference, signed as one of the issuers it holds a key for. The desk
then verifies that attestation like any other and the policy judges it; the service cannot make
an answer count that an outside issuer could not.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kcp_opa.authorize.attestations import sign_attestation
from kcp_opa.authorize.controls import ControlDesk
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.errors import CodedError, EvidenceRejectedError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.secretkeys import secret_name
from kcp_opa.core.signing import Key, Keyring
from kcp_opa.decide.gate import Gate
from kcp_opa.declare.trust import TrustRegistry
from kcp_opa.service.callers import AccessDeniedError, Principal, PrincipalKind, StaticAuthenticator
from kcp_opa.stores.storedtypes import Challenge

#: Registry principal type -> the service's kind and the role that grants its scopes.
_T = TypeVar("_T")
_KINDS: Mapping[str, tuple[PrincipalKind, str]] = {
    "human": (PrincipalKind.HUMAN, "subject"),
    "ai_agent": (PrincipalKind.AGENT, "agent"),
    "provider": (PrincipalKind.PROVIDER, "provider"),
    "executor": (PrincipalKind.EXECUTOR, "executor"),
    "auditor": (PrincipalKind.AUDITOR, "auditor"),
    "system": (PrincipalKind.SYSTEM, "issuer"),
}


class IssuerConfigError(CodedError):
    code = "issuer_config"


@dataclass(frozen=True)
class ServiceIssuers:
    """The registered issuers the service signs as, each with its private key, in preference order."""

    keys: tuple[tuple[str, Key], ...]

    @classmethod
    def load(cls, registry: TrustRegistry, issuer_ids: Sequence[str], keyring: Keyring) -> ServiceIssuers:
        """Each issuer must be in the registry and the keyring must hold a private key it lists."""
        found: list[tuple[str, Key]] = []
        for raw in issuer_ids:
            issuer = _listed(registry.issuer, "issuer", raw, registry)
            keys = [keyring.keys[kid] for kid in issuer.keys if kid in keyring.keys and keyring.keys[kid].can_sign]
            if not keys:
                kids = ", ".join(sorted(issuer.keys))
                raise IssuerConfigError(f"the issuer keyring holds no private key of issuer {issuer.id} ({kids})")
            found.append((issuer.id, keys[0]))
        return cls(tuple(found))

    def sign(
        self, registry: TrustRegistry, control: str, status: str, principal: Principal, reference: str, bound: Challenge
    ) -> JsonDict:
        """A signed attestation of ``principal``'s answer, by the first held issuer allowed for ``control``."""
        issuer_id, key = self.for_control(registry, control)
        fields = {
            "control": control,
            "status": status,
            "actor_id": principal.id,
            "evidence_reference": reference,
            "completed_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "decision_id": bound.decision_id,
            "action_hash": bound.action_hash,
        }
        return sign_attestation(fields, issuer_id, key)

    def desk(self, gate: Gate, registry: TrustRegistry, *, seal_key: bytes | None = None) -> ControlDesk:
        """The ControlDesk; the gate's ledger entry (standard_audit_logging) is signed by an issuer held for it."""
        found = self.held_for(registry, "standard_audit_logging")
        if found is None:
            return ControlDesk(gate, registry, seal_key=seal_key)
        return ControlDesk(gate, registry, gate_issuer=found[0], gate_key=found[1], seal_key=seal_key)

    def held_for(self, registry: TrustRegistry, control: str) -> tuple[str, Key] | None:
        """The first held issuer the registry allows to attest ``control``."""
        for issuer_id, key in self.keys:
            issuer = registry.issuer(issuer_id)
            if issuer is not None and control in issuer.controls:
                return issuer_id, key
        return None

    def unsignable(self, registry: TrustRegistry) -> dict[str, list[str]]:
        """Each control some registry issuer may attest but none of the service's issuers may: an
        answer to its challenge would be refused ``issuer_not_allowed``. Control -> the registry
        issuers that could sign it (what ``--issuer-id`` would need)."""
        gaps: dict[str, list[str]] = {}
        for issuer_id, issuer in sorted(registry.issuers.items()):
            for control in sorted(issuer.controls):
                if self.held_for(registry, control) is None:
                    gaps.setdefault(control, []).append(issuer_id)
        return dict(sorted(gaps.items()))

    def for_control(self, registry: TrustRegistry, control: str) -> tuple[str, Key]:
        found = self.held_for(registry, control)
        if found is not None:
            return found
        held = ", ".join(i for i, _ in self.keys) or "none"
        raise EvidenceRejectedError(
            f"this service signs as {held}; none of them may attest {control!r} in the trust registry",
            "issuer_not_allowed",
        )


def _listed(find: Callable[[str], _T | None], what: str, raw: str, registry: TrustRegistry) -> _T:
    """The registry's ``what`` named ``raw`` (``find`` looks it up); a service that names one the
    registry does not list, or a malformed id, is misconfigured."""
    try:
        found = find(raw)
    except IdentityError as exc:
        raise IssuerConfigError(f"{what} {raw!r}: {exc}") from None
    if found is None:
        raise IssuerConfigError(f"{what} {raw!r} is not in the trust registry {registry.file}")
    return found


def registry_principal(registry: TrustRegistry, raw_id: str, approver_roles: Iterable[str] = ()) -> Principal:
    """The caller the registry names: its kind and roles, plus the service role its type grants.

    A human holding one of ``approver_roles`` (the bundle's) also gets the approver's scopes; a
    principal (not an agent) that is also an issuer the registry lists facts for gets the
    ``fact_issuer`` role: it may post the facts it signed (``POST /v1/facts``).
    """
    entry = _listed(registry.principal, "principal", raw_id, registry)
    kind, role = _KINDS[entry.type]
    roles = {role, *entry.roles}
    if kind is PrincipalKind.HUMAN and set(entry.roles) & set(approver_roles):
        roles.add("approver")
    issuer = registry.issuer(entry.id)
    if issuer is not None and issuer.facts and kind is not PrincipalKind.AGENT:  # never an agent's own facts
        roles.add("fact_issuer")
    return Principal(entry.id, kind, frozenset(roles), frozenset(entry.auth_scopes), entry.tenants)


def registry_authenticator(
    registry: TrustRegistry,
    token_hashes: Mapping[str, str],
    *,
    stdio: str | None = None,
    approver_roles: Iterable[str] = (),
) -> StaticAuthenticator:
    """Bearer token hashes (``sha256:<hex>`` -> principal id) and the stdio caller, resolved in the registry."""
    wanted = set(approver_roles)
    fixed = registry_principal(registry, stdio, wanted) if stdio is not None else None
    authenticator = StaticAuthenticator(stdio=fixed)
    for hashed, principal_id in token_hashes.items():
        authenticator.add_token_hash(hashed, registry_principal(registry, principal_id, wanted))
    return authenticator


def bundle_approver_roles(bundle: LoadedBundle) -> set[str]:
    """Every role the bundle's matrix asks an approver to hold, plus the compliance officer."""
    return {"compliance_officer", *bundle.parameters.approver_roles.every()}


def check_addressed(principal: Principal, challenge: Challenge) -> None:
    """Refuse a principal the challenge is not addressed to (kind, named principals, roles)."""
    address = challenge.addressed_to
    kinds, roles, named = address.get("kinds", []), address.get("roles", []), address.get("principals", [])
    if principal.kind.value not in kinds or (named and principal.id not in {canonical_id(n) for n in named}):
        raise AccessDeniedError(f"challenge {challenge.challenge_id} is not addressed to {principal.id}")
    if roles and not principal.roles & set(roles):
        raise AccessDeniedError(f"challenge {challenge.challenge_id} needs one of the roles {', '.join(roles)}")


MAX_AUDIT_DETAIL_BYTES = 16 * 1024


def check_audit_detail(detail: object) -> JsonObject:
    """An audit note's detail, checked: a JSON object, no secret-bearing key anywhere, at most 16 KiB."""
    if not isinstance(detail, Mapping):
        raise CodedError("detail is a JSON object", "bad_arguments")
    secret = secret_key(detail)
    if secret is not None:
        raise CodedError(f"detail carries a secret-bearing key {secret!r}; secrets never reach the ledger", "secret")
    size = len(json.dumps(detail, sort_keys=True, default=str))
    if size > MAX_AUDIT_DETAIL_BYTES:
        raise CodedError(f"detail is {size} bytes; at most {MAX_AUDIT_DETAIL_BYTES}", "detail_too_large")
    return detail


def secret_key(value: object, depth: int = 0) -> str | None:
    """The first secret-bearing key (as the gate refuses in actions) anywhere in ``value``."""
    if depth > 32:
        return "<nested too deep>"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if secret_name(str(key)) is not None:
                return str(key)
            found = secret_key(item, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = secret_key(item, depth + 1)
            if found is not None:
                return found
    return None
