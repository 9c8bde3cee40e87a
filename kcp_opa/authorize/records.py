"""Control records as files: what ``kcp-opa controls`` keeps between commands, sealed by the desk.

A record file holds only what cannot be recomputed: the frozen action, the decision id and
time, the trace id, the bundle revision and the signed attestations, plus an HMAC seal with the
desk's key. Loading checks the seal, re-decides with the bundle and replays every attestation
through signature verification and the control policy, so an edited file is refused and
nothing in it is taken on its word.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kcp_opa.authorize.attestations import verify_attestation
from kcp_opa.authorize.controls import ControlDesk, ControlEvidence, GateDecision
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import EvidenceRejectedError
from kcp_opa.decide.gateinput import build_input, built_context

RECORD_FORMAT = "kcp-opa/control-record"


def _mac(desk: ControlDesk, body: Mapping[str, Any]) -> str:
    return hmac.new(desk._seal_key, canonical_json(body), hashlib.sha256).hexdigest()


def export_record(desk: ControlDesk, record: GateDecision) -> dict[str, Any]:
    """The record as a sealed JSON document (refused by ``load_record`` once edited)."""
    desk.check_seal(record)
    body: dict[str, Any] = {
        "format": RECORD_FORMAT,
        "action": dict(record.action),
        "decision_id": record.decision.decision_id,
        "evaluated_at": record.decision.evaluated_at,
        "trace_id": record.decision.trace_id,
        "bundle_revision": record.decision.bundle_revision,
        "attestations": [e.attestation.to_dict() for e in record.evidence],
        "context": built_context(record.prepared.document),
    }
    return {**body, "seal": _mac(desk, body)}


def load_record(desk: ControlDesk, document: Any) -> GateDecision:
    """Check the seal, re-decide and replay every attestation through the policy."""
    if not isinstance(document, Mapping) or document.get("format") != RECORD_FORMAT:
        raise EvidenceRejectedError(f"not a {RECORD_FORMAT} document", "malformed_record")
    body = {k: v for k, v in document.items() if k != "seal"}
    seal = document.get("seal")
    if not isinstance(seal, str) or not hmac.compare_digest(seal, _mac(desk, body)):
        raise EvidenceRejectedError("the record was edited or sealed by another desk", "record_tampered")
    if body.get("bundle_revision") != desk.gate.bundle_revision:
        raise EvidenceRejectedError(
            f"the record was decided under bundle {body.get('bundle_revision')}, not {desk.gate.bundle_revision}",
            "bundle_changed",
        )
    action = body["action"]
    prepared = desk.gate._seal(
        build_input(
            action,
            now=body["evaluated_at"],
            satisfied_controls=desk.gate.system_controls,
            bundle_revision=desk.gate.bundle_revision,
            decision_id=body["decision_id"],
            built=body.get("context") if isinstance(body.get("context"), Mapping) else {},
        )
    )
    decision, _ = desk.gate.evaluate(prepared)
    decision = replace(decision, trace_id=body.get("trace_id"))
    record = desk._sealed(GateDecision(action, prepared, decision, (), desk.receipt_ttl_seconds, (prepared.document,)))
    accepted: list[ControlEvidence] = []
    satisfied: list[str] = []
    for raw in body.get("attestations") or []:
        item, satisfied = desk._judge(record, accepted, verify_attestation(raw, desk.registry, desk.keyring))
        accepted.append(item)
    return desk._rederive(replace(record, evidence=tuple(accepted)), satisfied) if accepted else record
