"""Control records as files: what ``kcp-opa controls`` keeps between commands, sealed by the desk.

A record file holds only what cannot be recomputed: the frozen action, the decision id and
time, the trace id, the bundle revision and the signed attestations, plus an HMAC seal with the
desk's key. Loading checks the seal, re-decides with the bundle and replays every attestation
through signature verification and the control policy, so an edited file is refused and
nothing in it is taken on its word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.core.errors import EvidenceRejectedError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateinput import built_context

RECORD_FORMAT = "kcp-opa/control-record"


def export_record(desk: ControlDesk, record: GateDecision) -> JsonDict:
    """The record as a sealed JSON document (refused by ``load_record`` once edited)."""
    desk.check_seal(record)
    body: JsonDict = {
        "format": RECORD_FORMAT,
        "action": dict(record.action),
        "decision_id": record.decision.decision_id,
        "evaluated_at": record.decision.evaluated_at,
        "trace_id": record.decision.trace_id,
        "bundle_revision": record.decision.bundle_revision,
        "attestations": [e.attestation.to_dict() for e in record.evidence],
        "context": built_context(record.prepared.document),
    }
    return {**body, "seal": desk.seal_document(body)}


def load_record(desk: ControlDesk, document: object) -> GateDecision:
    """Check the seal, re-decide and replay every attestation through the policy."""
    if not isinstance(document, Mapping) or document.get("format") != RECORD_FORMAT:
        raise EvidenceRejectedError(f"not a {RECORD_FORMAT} document", "malformed_record")
    body = {k: v for k, v in document.items() if k != "seal"}
    if not desk.seal_document_holds(body, document.get("seal")):
        raise EvidenceRejectedError("the record was edited or sealed by another desk", "record_tampered")
    if body.get("bundle_revision") != desk.gate.bundle_revision:
        raise EvidenceRejectedError(
            f"the record was decided under bundle {body.get('bundle_revision')}, not {desk.gate.bundle_revision}",
            "bundle_changed",
        )
    return desk.reopen(replay_record(desk.gate, body), body.get("attestations") or [])


def replay_record(gate: Gate, document: Mapping[str, Any]) -> GateDecision:
    """A record document's decision re-decided with ``gate`` (its id, time and recorded facts; only
    the system's controls satisfied), unsealed: ``ControlDesk.reopen`` seals it and replays its
    evidence; the service keeps it as it is when it runs without a trust registry."""
    action = document["action"]
    prepared = gate.reprepare(
        action,
        at=document["evaluated_at"],
        decision_id=document["decision_id"],
        satisfied=gate.system_controls,
        facts=document.get("context"),
        redecision="record_reloaded",
    )
    decision, _ = gate.evaluate(prepared)
    decision = replace(decision, trace_id=document.get("trace_id"))
    return GateDecision(action, prepared, decision, inputs=(prepared.document,))
