"""The trust registry: who the principals are and which issuers may attest which controls.

Actor type and identity of a control result come from here, never from the evidence body:
an evidence item names a principal, the registry says whether that principal is a human (and
with which roles) or an agent, and an attestation counts only when a registered issuer, allowed
for that control, signed it. Principals and roles compile into the bundle's data for the
policy; verification keys stay out of the bundle (the desk reads them from this file).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kcp_opa import schemas
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping, objects, strings, text
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.core.signing import ED25519, Ed25519Key, HmacKey, Key, Keyring
from kcp_opa.declare.declstrings import TRUST_RULES, check_declaration_strings
from kcp_opa.declare.diagnostics import Findings, Report
from kcp_opa.declare.validation import DocumentKind, load_file, validate_file
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES

TRUST_KIND_NAME = "kcp-opa/trust-registry"
#: Controls only an independent human may satisfy, whatever the deployment adds.
BASE_SOD_CONTROLS = ("compliance_review", "independent_human_approval")


@dataclass(frozen=True)
class Principal:
    id: str
    type: str
    roles: tuple[str, ...]
    #: KCP auth scopes the principal holds: what the service lets its actions state (not in the bundle).
    auth_scopes: tuple[str, ...] = ()
    #: Gate facts the context stage reads for an agent principal (kcp_opa.context): the role its
    #: actions run as, the scope it was granted, the model it is registered with and its hosting.
    actor_role: str | None = None
    agent_scope: tuple[str, ...] | None = None
    model_id: str | None = None
    model_hosting: str | None = None
    #: The tenants it acts in (the service refuses an action stating another); None: not bound.
    tenants: frozenset[str] | None = None


@dataclass(frozen=True)
class Issuer:
    id: str
    type: str
    controls: frozenset[str]
    keys: Mapping[str, JsonObject]
    #: The registry marks this gate's decision documents as unsigned (``unsigned_decisions: true``).
    unsigned_decisions: bool = False
    #: The context facts this issuer may attest (evidence_status, new_beneficiary, ...).
    facts: frozenset[str] = frozenset()
    #: It may sign exceptions (kcp_opa.declare.exceptionfile).
    signs_exceptions: bool = False

    def key(self, kid: str, keyring: Keyring | None) -> Key | None:
        """The verification key for ``kid``: an inline Ed25519 public key, or an HMAC secret from the keyring."""
        entry = self.keys.get(kid)
        if entry is None:
            return None
        if entry["alg"] == ED25519:
            return Ed25519Key(kid, public_key=_ed25519_public(str(entry["public_key"])))
        held = keyring.verifier(str(entry.get("keyring_kid", kid))) if keyring is not None else None
        return HmacKey(kid, held.secret) if isinstance(held, HmacKey) else None


@lru_cache(maxsize=1024)
def _ed25519_public(text: str) -> Ed25519PublicKey:
    """A registry entry's public key, decoded once (an issuer's key is looked up on every decision)."""
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text))


@dataclass(frozen=True)
class TrustRegistry:
    file: str
    sha256: str
    data: JsonObject

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @cached_property
    def principals(self) -> dict[str, Principal]:
        return {p.id: p for p in map(_principal, objects(self.data["principals"]))}

    @cached_property
    def issuers(self) -> dict[str, Issuer]:
        return {i.id: i for i in map(_issuer, objects(self.data["issuers"]))}

    def principal(self, raw_id: str) -> Principal | None:
        """The registered principal ``raw_id`` names (canonical comparison); None when unknown."""
        return self.principals.get(canonical_id(raw_id))

    @property
    def exception_grantor_roles(self) -> frozenset[str]:
        """The roles whose holders may grant exceptions (none listed: nobody may)."""
        return frozenset(strings(self.data.get("exception_grantor_roles")))

    def issuer(self, raw_id: str) -> Issuer | None:
        return self.issuers.get(canonical_id(raw_id))

    def to_data(self) -> JsonDict:
        """What the policy reads (``data.kcp_data.trust``): principals, roles, issuers' controls; no keys."""
        return {
            "name": self.name,
            "version": str(self.data["version"]),
            "sha256": self.sha256,
            "principals": {pid: {"type": p.type, "roles": list(p.roles)} for pid, p in sorted(self.principals.items())},
            "issuers": {
                iid: {"type": i.type, "controls": sorted(i.controls)} for iid, i in sorted(self.issuers.items())
            },
            "separation_of_duties": sorted(
                set(BASE_SOD_CONTROLS) | set(strings(self.data.get("separation_of_duties")))
            ),
        }


def _principal(entry: JsonObject) -> Principal:
    roles = tuple(sorted(set(strings(entry.get("roles")))))
    model = mapping(entry.get("model"))
    scope, tenants = entry.get("agent_scope"), entry.get("tenants")
    return Principal(
        canonical_id(str(entry["id"])),
        str(entry["type"]),
        roles,
        tuple(sorted(set(strings(entry.get("auth_scopes"))))),
        # One role is the actor role; several need it named (the gate never picks one).
        text(entry.get("actor_role")) or (roles[0] if len(roles) == 1 else None),
        tuple(sorted(set(strings(scope)))) if isinstance(scope, list) else None,
        text(model.get("id")),
        text(model.get("hosting")),
        frozenset(strings(tenants)) if isinstance(tenants, list) else None,
    )


def _issuer(entry: JsonObject) -> Issuer:
    return Issuer(
        canonical_id(str(entry["id"])),
        str(entry["type"]),
        frozenset(strings(entry["controls"])),
        {str(k["kid"]): k for k in objects(entry["keys"])},
        entry.get("unsigned_decisions") is True,
        frozenset(strings(entry.get("facts"))),
        entry.get("signs_exceptions") is True,
    )


def _check(doc: JsonObject, findings: Findings) -> None:
    check_declaration_strings(doc, TRUST_RULES, findings)
    for section in ("principals", "issuers"):
        entries = doc.get(section)
        if not isinstance(entries, list):
            continue
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                continue
            try:
                canonical = canonical_id(entry["id"])
            except IdentityError as exc:
                findings.error("non_canonical_id", str(exc), (section, index, "id"))
                continue
            if canonical in seen:
                findings.error(
                    "duplicate_id",
                    f"{entry['id']!r} is the same principal as entry {seen[canonical]} ({canonical!r})",
                    (section, index, "id"),
                )
            seen[canonical] = index
            if section == "issuers":
                _check_keys(entry, index, findings)


def _check_keys(entry: JsonObject, index: int, findings: Findings) -> None:
    kids: set[str] = set()
    for k, key in enumerate(items(entry.get("keys"))):
        if not isinstance(key, dict):
            continue
        if key.get("kid") in kids:
            findings.error("duplicate_kid", f"kid {key.get('kid')!r} appears twice", ("issuers", index, "keys", k))
        kids.add(str(key.get("kid")))
        if key.get("alg") == ED25519 and isinstance(key.get("public_key"), str):
            try:
                Ed25519PublicKey.from_public_bytes(base64.b64decode(key["public_key"], validate=True))
            except ValueError:
                findings.error(
                    "malformed_key", "public_key is not a raw Ed25519 key", ("issuers", index, "keys", k, "public_key")
                )


def _counts(data: JsonObject) -> dict[str, int]:
    principals, issuers = data.get("principals"), data.get("issuers")
    return {
        "principal_count": len(principals) if isinstance(principals, list) else 0,
        "issuer_count": len(issuers) if isinstance(issuers, list) else 0,
    }


TRUST_KIND: DocumentKind[TrustRegistry] = DocumentKind(
    noun="trust registry",
    schema=schemas.TRUST,
    check=_check,
    counts=_counts,
    build=lambda source: TrustRegistry(source.file, source.sha256, source.data),
)


def validate_trust(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Report[TrustRegistry]:
    return validate_file(TRUST_KIND, path, max_bytes)


def load_trust(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> TrustRegistry:
    """The registry, or :class:`ValidationFailedError` listing every error with its line."""
    return load_file(TRUST_KIND, path, max_bytes)
