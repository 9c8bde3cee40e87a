"""The parties of an action, as canonical ids: who may not attest a control for it.

Separation of duties is the policy's (``data.kcp.controls.verdict``); this only names the
parties the same way for every comparison, and refuses an id that cannot be made canonical.
"""

from __future__ import annotations

from typing import Any

from kcp_opa.core.errors import EvidenceRejectedError
from kcp_opa.core.jsonread import JsonObject, mapping, objects
from kcp_opa.core.principalids import IdentityError, canonical_id


def parties(action: JsonObject) -> list[str]:
    """Canonical ids of the subject, the agent, the requester and every agent of the delegation chain.

    An id that cannot be made canonical refuses the evidence (it could hide a party).
    """
    requester = mapping(action.get("authorization_context")).get("requested_by")
    raw: list[Any] = [action.get("subject_id"), action.get("agent_id"), requester]
    raw += [hop.get("agent_id") for hop in objects(action.get("delegation_chain"))]
    ids = []
    for value in raw:
        if value is None:
            continue
        try:
            ids.append(canonical_id(value))
        except IdentityError as exc:
            raise EvidenceRejectedError(f"the action names a party that cannot be compared: {exc}", exc.code) from None
    return sorted(set(ids))
