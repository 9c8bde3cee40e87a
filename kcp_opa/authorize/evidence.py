"""Signed control results as an issuer writes them: the status vocabulary and ``evidence_for``.

Below ``controls`` (which judges them): an issuer's tool, a demo or a test signs results for a
record it holds without needing the desk.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

from kcp_opa.authorize.attestations import sign_attestation
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.signing import Signer
from kcp_opa.models.decision import Decision


class EvidenceStatus(enum.StrEnum):
    PASSED = "PASSED"
    FAILED = "FAILED"


class Decided(Protocol):
    """What evidence is bound to: a record's decision (its id and action hash)."""

    @property
    def decision(self) -> Decision: ...


def evidence_for(
    record: Decided,
    controls: Sequence[str],
    *,
    issuer: str,
    key: Signer,
    actor_id: str,
    completed_at: str,
    reference: str,
    status: EvidenceStatus | str = EvidenceStatus.PASSED,
) -> list[JsonDict]:
    """Attestations for ``controls`` bound to ``record``, signed as ``issuer`` (for issuers' tools and demos)."""
    return [
        sign_attestation(
            {
                "control": control,
                "status": EvidenceStatus(status).value,
                "actor_id": actor_id,
                "evidence_reference": reference,
                "completed_at": completed_at,
                "decision_id": record.decision.decision_id,
                "action_hash": record.decision.action_hash,
            },
            issuer,
            key,
        )
        for control in controls
    ]
