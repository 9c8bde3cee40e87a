"""The authorize stage's signed documents, typed: a :class:`Receipt` and an :class:`Attestation`.

Each is read in one place (``from_dict``: strict, through :class:`~kcp_opa.core.documents.Fields`,
so an unknown or missing field or a wrong type is one ``malformed_*`` error) and written in one
place (``to_dict``: the wire form, key for key and in the order it was always written, so every
signature made before still verifies).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kcp_opa.core.documents import Fields, Signature, sign
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.keys import Signer, Verifier, document_verifies

RECEIPT_SCHEMA_VERSION = "2.0"
#: The action's fields a receipt repeats, so an executor can compare them (tenant first).
BOUND_FIELDS = (
    "action_id",
    "idempotency_key",
    "tenant_id",
    "subject_id",
    "agent_id",
    "action_type",
    "requested_action",
)
RECEIPT_FIELDS = (
    "schema_version",
    "receipt_id",
    "decision_id",
    "decision_hash",
    "action_hash",
    *BOUND_FIELDS,
    "policy_version",
    "required_controls",
    "satisfied_controls",
    "control_evidence_hash",
    "approver_ids",
    "issued_at",
    "expires_at",
    "nonce",
    "one_time_use",
    "signature",
)
#: What an issuer signs of an evidence item (``signature`` aside); ``actor_type`` is optional.
ATTESTATION_FIELDS = (
    "control",
    "status",
    "actor_id",
    "evidence_reference",
    "completed_at",
    "decision_id",
    "action_hash",
    "issuer",
)


@dataclass(frozen=True)
class Receipt:
    """A KYA v2.0 one-time delegation receipt, as signed."""

    receipt_id: str
    decision_id: str
    decision_hash: str
    action_hash: str
    bound: tuple[tuple[str, str | None], ...]  # BOUND_FIELDS in order: (name, the action's value)
    policy_version: str
    required_controls: tuple[str, ...]
    satisfied_controls: tuple[str, ...]
    control_evidence_hash: str
    approver_ids: tuple[str, ...]
    issued_at: str
    expires_at: str
    nonce: str
    signature: Signature
    decision_authentication: str | None = None  # "unsigned": the issuer accepted an unsigned decision

    def bound_value(self, name: str) -> str | None:
        return dict(self.bound)[name]

    @property
    def tenant_id(self) -> str | None:
        return self.bound_value("tenant_id")

    @classmethod
    def from_dict(cls, raw: object) -> Receipt:
        fields = Fields(raw, "receipt", required=RECEIPT_FIELDS, optional=("decision_authentication",))
        if fields.raw["schema_version"] != RECEIPT_SCHEMA_VERSION:
            raise fields.error(f"schema_version must be {RECEIPT_SCHEMA_VERSION}")
        if fields.raw["one_time_use"] is not True:
            raise fields.error("one_time_use must be true")
        satisfied = fields.strings("satisfied_controls")
        if list(satisfied) != sorted(set(satisfied)):
            raise fields.error("satisfied_controls must be sorted and unique")
        return cls(
            receipt_id=fields.text("receipt_id"),
            decision_id=fields.text("decision_id"),
            decision_hash=fields.text("decision_hash"),
            action_hash=fields.text("action_hash"),
            bound=tuple((name, fields.optional_text(name)) for name in BOUND_FIELDS),
            policy_version=fields.text("policy_version"),
            required_controls=fields.strings("required_controls"),
            satisfied_controls=satisfied,
            control_evidence_hash=fields.text("control_evidence_hash"),
            approver_ids=fields.strings("approver_ids"),
            issued_at=fields.text("issued_at"),
            expires_at=fields.text("expires_at"),
            nonce=fields.text("nonce"),
            signature=fields.signature(),
            decision_authentication=fields.optional_text("decision_authentication"),
        )

    def to_dict(self) -> JsonDict:
        document: JsonDict = {
            "schema_version": RECEIPT_SCHEMA_VERSION,
            "receipt_id": self.receipt_id,
            "decision_id": self.decision_id,
            "decision_hash": self.decision_hash,
            "action_hash": self.action_hash,
            **dict(self.bound),
            "policy_version": self.policy_version,
            "required_controls": list(self.required_controls),
            "satisfied_controls": list(self.satisfied_controls),
            "control_evidence_hash": self.control_evidence_hash,
            "approver_ids": list(self.approver_ids),
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "nonce": self.nonce,
            "one_time_use": True,
        }
        if self.decision_authentication is not None:
            document["decision_authentication"] = self.decision_authentication
        document["signature"] = self.signature.to_dict()
        return document

    def with_signature(self, signature: Signature) -> Receipt:
        return replace(self, signature=signature)

    def signed_by(self, key: Signer) -> Receipt:
        return sign(self, key)

    def verifies(self, key: Verifier) -> bool:
        return document_verifies(self.to_dict(), key)


@dataclass(frozen=True)
class Attestation:
    """One signed control result: the evidence item, its issuer and the issuer's signature."""

    control: str
    status: str
    actor_id: str
    evidence_reference: str
    completed_at: str
    decision_id: str
    action_hash: str
    issuer: str
    signature: Signature
    actor_type: str | None = None  # a type the issuer declared; only compared with the registry's

    @classmethod
    def from_dict(cls, raw: object) -> Attestation:
        fields = Fields(raw, "evidence", required=(*ATTESTATION_FIELDS, "signature"), optional=("actor_type",))
        text = {name: fields.text(name, nonempty=True) for name in ATTESTATION_FIELDS}
        return cls(
            control=text["control"],
            status=text["status"],
            actor_id=text["actor_id"],
            evidence_reference=text["evidence_reference"],
            completed_at=text["completed_at"],
            decision_id=text["decision_id"],
            action_hash=text["action_hash"],
            issuer=text["issuer"],
            signature=fields.signature(),
            actor_type=fields.optional_text("actor_type"),
        )

    def body(self) -> JsonDict:
        """The item without its signature (what the control policy reads)."""
        item: JsonDict = {name: getattr(self, name) for name in ATTESTATION_FIELDS[:-1]}
        if self.actor_type is not None:
            item["actor_type"] = self.actor_type
        item["issuer"] = self.issuer
        return item

    def to_dict(self) -> JsonDict:
        return {**self.body(), "signature": self.signature.to_dict()}

    def with_signature(self, signature: Signature) -> Attestation:
        return replace(self, signature=signature)

    def signed_by(self, key: Signer) -> Attestation:
        return sign(self, key)

    def verifies(self, key: Verifier) -> bool:
        return document_verifies(self.to_dict(), key)
