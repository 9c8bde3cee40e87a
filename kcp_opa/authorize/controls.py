"""Control evidence: signed attestations from registered issuers, judged by the policy.

A result counts only when a registered issuer allowed for that control signed it (see
attestations.py), it is bound to this decision id and action hash, and the bundle's Rego
(``data.kcp.controls.verdict``) accepts it for the principal the trust registry names:
separation of duties, roles, FAILED-is-final are policy, not Python. The desk seals every
record it hands out (HMAC with its own key), so an edited record is refused, and it re-derives
the verdict from the verified evidence before a receipt is signed.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from kcp_opa.authorize.attestations import VerifiedAttestation, sign_attestation, verify_attestation
from kcp_opa.authorize.documents import Attestation, Receipt
from kcp_opa.authorize.evidence import EvidenceStatus
from kcp_opa.authorize.parties import parties
from kcp_opa.authorize.receipts import issue_for_checked_decision
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.errors import EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.jsonread import JsonDict, JsonObject, mapping
from kcp_opa.core.principalids import canonical_or_empty
from kcp_opa.core.signing import Keyring, Signer, seal, seal_holds
from kcp_opa.decide.action import action_hash, check_action
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.engine import RegopyEngine
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateinput import DecisionInput, built_context
from kcp_opa.declare.parameters import DEFAULT_RECEIPT_TTL_SECONDS
from kcp_opa.declare.trust import TrustRegistry
from kcp_opa.models.decision import Decision

EVIDENCE_ENTRYPOINT = "kcp/controls/verdict"
LEDGER_PRINCIPAL = "kcp-opa-ledger"


@dataclass(frozen=True)
class ControlEvidence:
    """One accepted control result: the signed attestation and the actor type the policy derived."""

    control: str
    status: EvidenceStatus
    actor_type: str
    actor_id: str
    evidence_reference: str
    completed_at: str
    decision_id: str
    action_hash: str
    issuer: str
    attestation: Attestation = field(repr=False)

    def to_dict(self) -> JsonDict:
        """The KYA evidence item (with the registry's actor type) plus issuer and signature."""
        return {
            "control": self.control,
            "status": self.status.value,
            "actor_type": self.actor_type,
            "actor_id": self.actor_id,
            "evidence_reference": self.evidence_reference,
            "completed_at": self.completed_at,
            "decision_id": self.decision_id,
            "action_hash": self.action_hash,
            "issuer": self.issuer,
            "signature": self.attestation.signature.to_dict(),
        }


def context_sources(document: JsonObject) -> dict[str, dict[str, object]]:
    """Where each gate and attested fact of a decision came from: ``{fact: {class, source}}``."""
    facts = mapping(mapping(document.get("context")).get("facts")).items()
    return {name: {"class": mapping(f).get("class"), "source": mapping(f).get("source")} for name, f in sorted(facts)}


def registry_mismatch(bundle: LoadedBundle, registry: TrustRegistry) -> str | None:
    """Why ``registry`` is not the trust registry ``bundle`` was compiled with (None: it is)."""
    compiled = mapping(mapping(mapping(bundle.manifest.get("metadata")).get("kcp_opa")).get("trust")).get("sha256")
    why = f"the bundle was compiled with trust registry {compiled}, not {registry.file} ({registry.sha256})"
    return None if compiled == registry.sha256 else f"{why}: compile with --trust {registry.file}"


@dataclass(frozen=True)
class GateDecision:
    """A decision with the control evidence recorded for it, sealed by the desk that made it."""

    action: JsonObject
    prepared: DecisionInput
    decision: Decision
    evidence: tuple[ControlEvidence, ...] = ()
    receipt_ttl_seconds: int = DEFAULT_RECEIPT_TTL_SECONDS
    inputs: tuple[JsonObject, ...] = field(default=(), repr=False)
    seal: str = field(default="", repr=False)

    @property
    def passed_controls(self) -> frozenset[str]:
        return frozenset(self.decision.verdict.satisfied_controls)

    def to_dict(self) -> JsonDict:
        """The contract's decision document plus ``control_evidence`` and ``blocked_actions``."""
        document = self.decision.to_dict()
        approved = document["authorization_status"] == "APPROVED"
        document["control_evidence"] = [e.to_dict() for e in self.evidence]
        document["blocked_actions"] = [] if approved else [str(self.action.get("requested_action", ""))]
        document["receipt_ttl_seconds"] = self.receipt_ttl_seconds
        document["context_sources"] = context_sources(self.prepared.document)
        return document

    def sealed_content(self) -> JsonDict:
        """What the seal covers: the action, the sealed input, the decision and every attestation."""
        return {
            "action": self.action,
            "prepared": self.prepared.document,
            "decision": self.decision.to_dict(),
            "trace_id": self.decision.trace_id,
            "attestations": [e.attestation.to_dict() for e in self.evidence],
            "actor_types": [e.actor_type for e in self.evidence],
            "receipt_ttl_seconds": self.receipt_ttl_seconds,
        }


def decide_record(
    gate: Gate,
    action: JsonObject | CheckedAction,
    *,
    now: dt.datetime | str | None = None,
    principal: str | None = None,
    ttl: int | None = None,
) -> tuple[GateDecision, JsonObject | None]:
    """Decide ``action`` and start its record, unsealed (a desk seals it; without a registry the
    service keeps it as it is), with the ledger entry that recorded the decision. The record
    holds the checked, read-only copy of the action: the caller's mapping is never kept."""
    checked = check_action(action)
    frozen = checked.mapping
    prepared = gate.prepare(checked, now=now, principal=principal)
    decision, entry = gate.decide_recorded(prepared)
    ttl = DEFAULT_RECEIPT_TTL_SECONDS if ttl is None else ttl
    return GateDecision(frozen, prepared, decision, (), ttl, (prepared.document,)), entry


class ControlDesk:
    """Records signed control results against gate decisions for one bundle and trust registry.

    ``keyring`` holds the HMAC secrets of issuers registered by keyring kid; ``gate_key`` signs
    the gate's own ``standard_audit_logging`` attestation as issuer ``gate_issuer``; ``seal_key``
    (default: random per desk) seals records, so a record edited by its holder is refused.
    """

    def __init__(
        self,
        gate: Gate,
        registry: TrustRegistry,
        *,
        keyring: Keyring | None = None,
        gate_issuer: str = "kcp-opa-gate",
        gate_key: Signer | None = None,
        seal_key: bytes | None = None,
    ) -> None:
        if (mismatch := registry_mismatch(gate.bundle, registry)) is not None:
            raise EvidenceRejectedError(mismatch, "registry_mismatch")
        self.gate, self.registry, self.keyring = gate, registry, keyring
        self.gate_issuer, self.gate_key = gate_issuer, gate_key
        self._seal_key = seal_key or secrets.token_bytes(32)
        self.engine = RegopyEngine(gate.bundle, EVIDENCE_ENTRYPOINT, preflight=False, plan_cache=gate.plan_cache)
        self.receipt_ttl_seconds = gate.bundle.parameters.receipt_ttl_seconds

    def _sealed(self, record: GateDecision) -> GateDecision:
        return replace(record, seal=seal(self._seal_key, record.sealed_content()))

    def check_seal(self, record: GateDecision) -> None:
        """Refuse a record this desk did not hand out as it is (edited evidence, input or decision)."""
        if not seal_holds(self._seal_key, record.sealed_content(), record.seal):
            raise EvidenceRejectedError("the record was edited or not made by this desk", "record_tampered")

    def seal_document(self, body: JsonObject) -> str:
        """This desk's seal over a record document (the files ``kcp_opa.authorize.sealedrecords`` writes)."""
        return seal(self._seal_key, body)

    def seal_document_holds(self, body: JsonObject, presented: object) -> bool:
        """Whether ``presented`` is this desk's seal over ``body`` (constant-time)."""
        return seal_holds(self._seal_key, body, presented)

    def open(
        self, action: JsonObject | CheckedAction, *, now: dt.datetime | str | None = None, principal: str | None = None
    ) -> GateDecision:
        """Decide ``action`` and start its control record (the action is frozen from here on)."""
        record, entry = decide_record(self.gate, action, now=now, principal=principal, ttl=self.receipt_ttl_seconds)
        record, frozen, decision = self._sealed(record), record.action, record.decision
        if entry is not None and self.gate_key is not None and "standard_audit_logging" in decision.required_controls:
            # The ledger entry is the evidence for the gate's own control, signed as the gate.
            fields = {
                "control": "standard_audit_logging",
                "status": "PASSED",
                "actor_id": LEDGER_PRINCIPAL,
                "evidence_reference": f"ledger:{entry['entry_hash']}",
                "completed_at": str(entry["timestamp"]),
                "decision_id": decision.decision_id,
                "action_hash": decision.action_hash,
            }
            record = self.record_control_result(
                record, sign_attestation(fields, self.gate_issuer, self.gate_key), action=frozen
            )
        return record

    def record_control_result(self, record: GateDecision, evidence: object, *, action: JsonObject) -> GateDecision:
        """Verify, bind, judge (Rego) and add one signed control result; the policy re-derives the status.

        Raises :class:`EvidenceRejectedError` with a distinct ``code`` for each refusal.
        """
        self.check_seal(record)
        if action_hash(action) != record.decision.action_hash:
            raise EvidenceRejectedError(
                "the action differs from the one decided; a changed action needs a new decision", "action_changed"
            )
        try:
            attested = verify_attestation(evidence, self.registry, self.keyring)
            item, satisfied = self._judge(record, record.evidence, attested)
        except EvidenceRejectedError as exc:
            if self.gate.audit is not None:
                body = dict(evidence) if isinstance(evidence, Mapping) else {"evidence": repr(evidence)[:200]}
                written = self.gate.audit.event(
                    "failure", record.action, record.decision, code=exc.code, message=str(exc), evidence=body
                )
                exc.ledger_seq = int(written["seq"])
            raise
        updated = self._rederive(replace(record, evidence=(*record.evidence, item)), satisfied, "control_answer")
        if self.gate.audit is not None:
            self.gate.audit.event(
                "control",
                updated.action,
                updated.decision,
                decision_id=updated.decision.decision_id,
                action_hash=updated.decision.action_hash,
                evidence=item.to_dict(),
                authorization_status=updated.decision.authorization_status.value,
                missing_controls=list(updated.decision.missing_controls),
            )
        return updated

    def _judge(
        self, record: GateDecision, prior: Sequence[ControlEvidence], attested: VerifiedAttestation
    ) -> tuple[ControlEvidence, list[str]]:
        """Binding checks, then the policy's verdict for this principal; the accepted item and what is satisfied."""
        if attested.action_hash != record.decision.action_hash:
            raise EvidenceRejectedError(
                f"evidence is for action {attested.action_hash}, the decision is for {record.decision.action_hash}",
                "evidence_for_another_action",
            )
        if attested.decision_id != record.decision.decision_id:
            raise EvidenceRejectedError(
                f"evidence is for decision {attested.decision_id}, not {record.decision.decision_id}",
                "evidence_for_another_decision",
            )
        verdict = self.engine.evaluate(
            {
                "evidence": {**attested.signed, "actor_id": attested.actor_id},
                "issuer": attested.issuer,
                "prior": [{"control": e.control, "status": e.status.value} for e in prior],
                "action": dict(record.action),
                "subject": canonical_or_empty(record.action.get("subject_id")),
                "parties": parties(record.action),
                "required_controls": list(record.decision.required_controls),
                "approver_roles": list(record.decision.verdict.approver_roles),
            }
        )
        value = verdict.value or {}
        if verdict.error is not None or value.get("accepted") is not True:
            code = str(value.get("code", "evidence_unreadable"))
            message = str(value.get("message", verdict.error or "the evidence could not be judged"))
            raise EvidenceRejectedError(f"{attested.control}: {message}", code)
        try:
            status = EvidenceStatus(attested.status)
        except ValueError:
            raise EvidenceRejectedError(
                f"status {attested.status!r} is not PASSED or FAILED", "malformed_evidence"
            ) from None
        item = ControlEvidence(
            control=attested.control,
            status=status,
            actor_type=str(value.get("actor_type")),
            actor_id=attested.actor_id,
            evidence_reference=attested.attestation.evidence_reference,
            completed_at=attested.attestation.completed_at,
            decision_id=attested.decision_id,
            action_hash=attested.action_hash,
            issuer=attested.issuer,
            attestation=attested.attestation,
        )
        return item, [str(c) for c in value.get("satisfied") or []]

    def reopen(self, recorded: GateDecision, attestations: Sequence[object]) -> GateDecision:
        """A record loaded again (``records.replay_record``), sealed, every attestation replayed in order."""
        record = self._sealed(replace(recorded, receipt_ttl_seconds=self.receipt_ttl_seconds))
        accepted: list[ControlEvidence] = []
        satisfied: list[str] = []
        for raw in attestations:
            item, satisfied = self._judge(record, accepted, verify_attestation(raw, self.registry, self.keyring))
            accepted.append(item)
        if not accepted:
            return record
        return self._rederive(replace(record, evidence=tuple(accepted)), satisfied, "record_reloaded")

    def rederive(self, record: GateDecision, *, counters: JsonObject | None = None) -> GateDecision:
        """Re-verify every attestation and replay the policy over them (on ``counters``, else the record's)."""
        self.check_seal(record)
        accepted: list[ControlEvidence] = []
        satisfied: list[str] = []
        for item in record.evidence:
            attested = verify_attestation(item.attestation.to_dict(), self.registry, self.keyring)
            checked, satisfied = self._judge(record, accepted, attested)
            accepted.append(checked)
        return self._rederive(replace(record, evidence=tuple(accepted)), satisfied, "receipt_issue", counters)

    def issue(
        self, record: GateDecision, key: Signer, *, ttl_seconds: int | None = None, now: dt.datetime | None = None
    ) -> Receipt:
        """Issue a receipt for a record this desk sealed, after re-deriving its verdict from verified evidence
        (and, when the gate counts from a store, on fresh counts with its budget reserved: reservation.py)."""
        counting = self.gate.context.counters if self.gate.context is not None else None
        if isinstance(counting, StoreCounters):
            from kcp_opa.authorize.reservation import issue_reserved

            return issue_reserved(self, counting, record, key, ttl_seconds=ttl_seconds, now=now)
        return self.issue_rederived(self.rederive_for_issue(record), key, ttl_seconds=ttl_seconds, now=now)

    def rederive_for_issue(self, record: GateDecision, counters: JsonObject | None = None) -> GateDecision:
        try:
            return self.rederive(record, counters=counters)
        except EvidenceRejectedError as exc:
            raise ReceiptIssueError(f"the record does not stand: {exc}", exc.code) from None

    def issue_rederived(
        self, rederived: GateDecision, key: Signer, *, ttl_seconds: int | None = None, now: dt.datetime | None = None
    ) -> Receipt:
        """Sign the receipt for a record just re-derived (and audit it)."""
        document = rederived.to_dict()
        receipt = issue_for_checked_decision(document, rederived.action, key, ttl_seconds=ttl_seconds, now=now)
        if self.gate.audit is not None:
            self.gate.audit.event(
                "receipt",
                rederived.action,
                rederived.decision,
                decision_id=receipt.decision_id,
                action_hash=receipt.action_hash,
                receipt_id=receipt.receipt_id,
                signature={"alg": receipt.signature.alg, "kid": receipt.signature.kid},
                issued_at=receipt.issued_at,
                expires_at=receipt.expires_at,
                approver_ids=list(receipt.approver_ids),
            )
        return receipt

    def _rederive(
        self,
        record: GateDecision,
        satisfied: Sequence[str],
        step: str,
        counters: JsonObject | None = None,
    ) -> GateDecision:
        # The gate seals the input the desk built from the policy's satisfied controls only; ``step``
        # is why it is re-decided (the ledger entry says so, linked to the decision it re-decides).
        prepared = self.gate.reprepare(
            record.action,
            at=record.decision.evaluated_at,
            decision_id=record.decision.decision_id,
            satisfied=sorted(set(satisfied) | set(self.gate.system_controls)),
            facts=_with_counts(built_context(record.prepared.document), counters),
            redecision=step,
        )
        decision = self.gate.decide_prepared(prepared)
        # The trace id is the decision's, not a new one generated for the re-evaluation.
        decision = replace(decision, trace_id=record.decision.trace_id)
        return self._sealed(
            replace(record, prepared=prepared, decision=decision, inputs=(*record.inputs, prepared.document))
        )


def _with_counts(built: JsonDict, counters: JsonObject | None) -> JsonDict:
    """The recorded context, on fresh ``counters`` when the reservation re-read them under its lock."""
    return built if counters is None else {**built, "counters": dict(counters)}
