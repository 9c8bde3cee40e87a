"""Decision records kept by the service (the store: :class:`kcp_opa.stores.protocols.DecisionStore`).

A row keeps only what cannot be recomputed (the sealed export of ``kcp_opa.authorize.sealedrecords``:
the frozen action, decision id and time, trace id, bundle revision, signed attestations) plus
who evaluated it. Loading re-decides with the bundle and replays every attestation through the
desk, so nothing in a row is taken on its word; a record decided under another bundle is refused
(``bundle_changed``). Updates run in one ``BEGIN IMMEDIATE`` transaction: two answers for the same
decision, in one process or in two, are applied one after the other and neither is lost.
"""

from __future__ import annotations

from collections.abc import Mapping

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.sealedrecords import RECORD_FORMAT, export_record, load_record, replay_record
from kcp_opa.core.errors import EvidenceRejectedError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.principalids import IdentityError, canonical_id
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateinput import built_context
from kcp_opa.stores.protocols import DecisionStore
from kcp_opa.stores.storedtypes import UnknownRecordError

__all__ = [
    "canonical_or_none",
    "check_current",
    "decided_for",
    "export",
    "restore",
]


def export(desk: ControlDesk | None, gate: Gate, record: GateDecision) -> JsonDict:
    """The row's document: the desk's sealed export, or (no registry) the same fields unsealed."""
    if desk is not None:
        return export_record(desk, record)
    decision = record.decision
    return {
        "format": RECORD_FORMAT,
        "action": dict(record.action),
        "decision_id": decision.decision_id,
        "evaluated_at": decision.evaluated_at,
        "trace_id": decision.trace_id,
        "bundle_revision": decision.bundle_revision,
        "attestations": [],
        "context": built_context(record.prepared.document),
    }


def check_current(gate: Gate, document: JsonObject) -> None:
    """Refuse a record decided under another bundle (after a reload): the action is evaluated anew."""
    if document.get("bundle_revision") != gate.bundle_revision:
        raise EvidenceRejectedError(
            f"decision {document.get('decision_id')} was made under bundle {document.get('bundle_revision')},"
            f" this server now decides with {gate.bundle_revision}: evaluate the action again",
            "bundle_changed",
        )


def restore(desk: ControlDesk | None, gate: Gate, document: JsonObject) -> GateDecision:
    """The record again, re-decided with ``gate`` (and its evidence replayed through ``desk``)."""
    check_current(gate, document)
    if desk is not None:
        return load_record(desk, document)
    return replay_record(gate, document)


def canonical_or_none(value: object) -> str | None:
    try:
        return canonical_id(value) if isinstance(value, str) else None
    except IdentityError:
        return None


def decided_for(records: DecisionStore, receipt: object) -> str | None:
    """Who evaluated the decision a receipt names: the re-decision at execution establishes the
    facts for that same caller. None (no such record here): the action's agent, whose facts the
    registry must then establish, else the re-decision holds it (fail closed)."""
    decision_id = receipt.get("decision_id") if isinstance(receipt, Mapping) else None
    if not isinstance(decision_id, str):
        return None
    try:
        return records.get(decision_id).evaluated_by
    except UnknownRecordError:
        return None
