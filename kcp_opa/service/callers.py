"""Who is calling: principals, the scopes their roles grant, and the authenticator seam.

The service never takes a caller's identity from a request body. An :class:`Authenticator`
resolves it per request: over stdio the principal is fixed when the server starts; over HTTP a
bearer token is hashed (sha256) and looked up among the stored hashes in constant time. With a
trust registry (``--trust``) the principals' kinds and roles come from the registry (see
issuing.py); without one a server knows one local agent principal and nothing else.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kcp_opa.core.errors import CodedError
from kcp_opa.core.principalids import canonical_or_empty
from kcp_opa.decide.action import check_action
from kcp_opa.decide.checked import CheckedAction


class AccessDeniedError(CodedError):
    """The caller is not authenticated, or its roles do not grant this operation."""

    code = "not_authorized"


class PrincipalKind(enum.StrEnum):
    AGENT = "agent"
    HUMAN = "human"
    EXECUTOR = "executor"
    AUDITOR = "auditor"
    PROVIDER = "provider"
    SYSTEM = "system"


class Scope(enum.StrEnum):
    """What a tool call needs; a role grants a set of these."""

    EVALUATE = "evaluate"
    HASH = "hash"
    OPEN_CHALLENGE = "open_challenge"
    RECORD_RESULT = "record_result"
    ISSUE_RECEIPT = "issue_receipt"
    VERIFY_RECEIPT = "verify_receipt"
    EXECUTE = "execute"
    WRITE_AUDIT = "write_audit"
    READ = "read"
    ADMIN = "admin"
    POST_FACTS = "post_facts"


#: Scopes by role (the issue's agent / approver / executor / auditor, plus provider and issuer).
#: An agent evaluates and opens challenges, never records a control or issues a receipt; an
#: approver or provider records results only through a challenge addressed to them.
ROLE_SCOPES: Mapping[str, frozenset[Scope]] = {
    "agent": frozenset({Scope.EVALUATE, Scope.HASH, Scope.OPEN_CHALLENGE, Scope.WRITE_AUDIT}),
    "approver": frozenset({Scope.EVALUATE, Scope.HASH, Scope.RECORD_RESULT, Scope.READ, Scope.WRITE_AUDIT}),
    "subject": frozenset({Scope.HASH, Scope.RECORD_RESULT}),  # confirms its own action when asked
    "provider": frozenset({Scope.HASH, Scope.RECORD_RESULT, Scope.WRITE_AUDIT}),
    "issuer": frozenset({Scope.HASH, Scope.ISSUE_RECEIPT, Scope.READ, Scope.WRITE_AUDIT}),
    "executor": frozenset({Scope.HASH, Scope.VERIFY_RECEIPT, Scope.EXECUTE, Scope.READ, Scope.WRITE_AUDIT}),
    "auditor": frozenset({Scope.HASH, Scope.READ}),
    # A registry principal holding the role ``service_admin`` may reload the service (and read it).
    "service_admin": frozenset({Scope.ADMIN, Scope.READ}),
    # A registry principal that is itself an issuer of facts (issuing.py) posts the facts it signed.
    "fact_issuer": frozenset({Scope.POST_FACTS, Scope.HASH}),
}


def canonical_id(raw: str) -> str:
    """NFKC, casefolded, trimmed: the one form every comparison of principal ids uses."""
    return unicodedata.normalize("NFKC", raw).casefold().strip()


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: canonical id, kind and roles (from the registry, never the request)."""

    id: str
    kind: PrincipalKind
    roles: frozenset[str] = field(default_factory=frozenset)
    #: The KCP auth scopes the registry grants (``auth_scopes``): all an action may state as its
    #: ``principal_scopes``. Empty without a registry.
    auth_scopes: frozenset[str] = field(default_factory=frozenset)
    #: The tenants the registry binds it to (``tenants``): an action must state one of them as its
    #: ``tenant_id``. None: the registry does not say, so the stated tenant is taken as stated.
    tenants: frozenset[str] | None = None

    @classmethod
    def of(
        cls, raw_id: str, kind: PrincipalKind | str, roles: Iterable[str] = (), auth_scopes: Iterable[str] = ()
    ) -> Principal:
        canonical = canonical_id(raw_id)
        if not canonical:
            raise ValueError("a principal id cannot be empty")
        return cls(canonical, PrincipalKind(kind), frozenset(roles), frozenset(auth_scopes))

    @property
    def scopes(self) -> frozenset[Scope]:
        granted: set[Scope] = set()
        for role in self.roles:
            granted |= ROLE_SCOPES.get(role, frozenset())
        return frozenset(granted)

    def require(self, scope: Scope, what: str) -> None:
        """Raise :class:`AccessDeniedError` unless one of the caller's roles grants ``scope``."""
        if scope not in self.scopes:
            roles = ", ".join(sorted(self.roles)) or "no roles"
            raise AccessDeniedError(f"{self.kind.value} {self.id} ({roles}) may not {what}")

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "kind": self.kind.value, "roles": sorted(self.roles)}


#: The caller of a server started without a trust registry.
LOCAL_AGENT = Principal("local-agent", PrincipalKind.AGENT, frozenset({"agent"}))


class Authenticator(Protocol):
    """Resolves the caller of one request (in memory, or from the trust registry)."""

    def fixed(self) -> Principal | None:
        """The principal of a connection without credentials (stdio), or None when none is allowed."""
        ...

    def bearer(self, token: str) -> Principal | None:
        """The principal a bearer token belongs to, or None (unknown tokens are not errors)."""
        ...

    def hashed(self, hashed: str) -> Principal | None:
        """The principal of the token whose :func:`token_hash` is ``hashed`` (a UI session keeps only that)."""
        ...


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


class StaticAuthenticator:
    """Principals with hashed bearer tokens, held in memory (tests, and the seam's reference).

    Only sha256 hashes are kept; a lookup hashes the presented token and compares it with every
    stored hash using :func:`hmac.compare_digest`, so timing says nothing about which matched.
    """

    def __init__(self, tokens: Mapping[str, Principal] | None = None, *, stdio: Principal | None = LOCAL_AGENT) -> None:
        self._stdio = stdio
        self._hashed: tuple[tuple[bytes, Principal], ...] = ()
        for token, principal in (tokens or {}).items():
            self.add_token_hash(token_hash(token), principal)

    def add_token_hash(self, hashed: str, principal: Principal) -> None:
        """Register a principal by the sha256 of its token (``sha256:<hex>``), never the token itself."""
        if not hashed.startswith("sha256:") or len(hashed) != 71:
            raise ValueError("a token hash is 'sha256:' and 64 hex digits")
        self._hashed = (*self._hashed, (hashed.encode("ascii"), principal))

    def fixed(self) -> Principal | None:
        return self._stdio

    def bearer(self, token: str) -> Principal | None:
        return self.hashed(token_hash(token))

    def hashed(self, hashed: str) -> Principal | None:
        presented = hashed.encode("utf-8")
        found: Principal | None = None
        for stored, principal in self._hashed:  # no early exit: every hash is compared
            if hmac.compare_digest(stored, presented):
                found = principal
        return found


def check_caller_action(principal: Principal, action: object) -> CheckedAction:
    """Check an action a caller asks the service to decide, and bind what it states about its caller.

    Who acted is the authenticated caller: the action's ``agent_id`` must be the caller's canonical
    id, spelled exactly so (compared in constant time; a look-alike, a case or width variant is
    refused, since budgets and rate limits count by the id as written), so a decision is never
    made for, nor recorded as, a principal that did not authenticate. The action model has no authenticated way to act
    for another principal (``delegation_chain`` is the caller's own statement, and ``subject_id``
    is whom the agent acts for, not who acts), so no statement lets a caller name another agent.
    KCP ``access`` and ``visibility.requires_auth`` read
    ``authorization_context.authenticated_principal``, ``access: restricted`` its
    ``principal_scopes``: an action may state only the caller's exact id there too, and only scopes
    the trust registry grants the caller (``auth_scopes``; none without a registry). Anything else
    is refused with ``principal_mismatch`` / ``scope_not_granted``, and the refusal is audited like
    every other, attributed to the caller. A caller the registry binds to tenants (``tenants``) may
    act only in one of them: another ``tenant_id`` is ``tenant_not_granted``, since the policy's
    tenant boundary compares the target's tenant with the one the action states. Returns the
    checked action, decided as it is from here.
    """
    checked = check_action(action)
    _check_stated_agent(principal, checked.agent_id)
    _check_stated_tenant(principal, checked.get("tenant_id"))
    context = checked.get("authorization_context")
    if isinstance(context, Mapping):
        _check_stated_principal(principal, context.get("authenticated_principal"))
        _check_stated_scopes(principal, context.get("principal_scopes"))
    return checked


def _exactly_the_caller(principal: Principal, stated: object) -> bool:
    """``stated`` is the caller's canonical id, spelled exactly so (constant time): budgets, rate
    limits and the ledger count by the id as written, so another spelling would count apart."""
    given = stated.encode("utf-8", "surrogatepass") if isinstance(stated, str) else b""
    return hmac.compare_digest(given, principal.id.encode("utf-8"))


def _not_the_caller(principal: Principal, field: str, stated: object) -> AccessDeniedError:
    named = canonical_or_empty(stated)
    if named == principal.id:
        why = f"{field} {str(stated)[:128]!r} spells the caller's id {principal.id} another way"
        why += " (budgets, rate limits and the ledger count the exact id)"
    elif named:
        why = f"{field} names {named} but the authenticated caller is {principal.id}"
    else:
        why = f"{field} {str(stated)[:128]!r} has no canonical form; the authenticated caller is {principal.id}"
    return AccessDeniedError(
        f"{why}: an action is decided for, and recorded as, the principal that authenticated; "
        f"state {field} {principal.id!r}",
        "principal_mismatch",
    )


def _check_stated_agent(principal: Principal, stated: object) -> None:
    if not _exactly_the_caller(principal, stated):
        raise _not_the_caller(principal, "agent_id", stated)


def _check_stated_scopes(principal: Principal, stated: object) -> None:
    if not isinstance(stated, list):
        return  # absent (the input contract admits only a list of identifiers)
    ungranted = sorted({scope for scope in stated if scope not in principal.auth_scopes})
    if ungranted:
        held = ", ".join(sorted(principal.auth_scopes)) or "none"
        raise AccessDeniedError(
            f"authorization_context.principal_scopes may state only scopes the trust registry grants the caller "
            f"{principal.id} (auth_scopes: {held}); not granted: {', '.join(ungranted)}",
            "scope_not_granted",
        )


def _check_stated_tenant(principal: Principal, stated: object) -> None:
    if principal.tenants is None or stated in principal.tenants:
        return
    held = ", ".join(sorted(principal.tenants))
    raise AccessDeniedError(
        f"tenant_id {str(stated)[:128]!r} is not a tenant the trust registry binds the caller {principal.id} to "
        f"(tenants: {held}): an agent acts only in its own tenants; state one of them",
        "tenant_not_granted",
    )


def _check_stated_principal(principal: Principal, stated: object) -> None:
    if stated is not None and not _exactly_the_caller(principal, stated):
        raise _not_the_caller(principal, "authorization_context.authenticated_principal", stated)
