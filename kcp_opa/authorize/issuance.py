"""The library's receipt entry point: a receipt only for a decision the gate's desk sealed.

A decision document is data anyone can write; naming registered approvers in it proves nothing.
So :func:`issue_receipt` takes what the service holds: a :class:`GateDecision` together with the
:class:`ControlDesk` that sealed it, whose seal is checked and whose verdict is re-derived from
the verified attestations before anything is signed (``ControlDesk.issue``). Another gate's
decision document goes through ``issue_for_foreign_decision`` (its signature is verified).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.documents import Receipt
from kcp_opa.core.errors import EvidenceRejectedError, ReceiptIssueError
from kcp_opa.core.signing import Signer
from kcp_opa.decide.action import action_hash


def issue_receipt(
    decision: object,
    action: object,
    key: Signer,
    *,
    desk: ControlDesk | None = None,
    ttl_seconds: int | None = None,
    now: dt.datetime | None = None,
) -> Receipt:
    """Sign a receipt for ``action`` under ``decision``, a record ``desk`` sealed.

    Refused with ``unauthenticated_decision`` for anything else (a mapping, a record without its
    desk), with ``record_tampered`` for a record that desk did not hand out as it is, and with
    ``action_mismatch`` when ``action`` is not the record's; then every check of the contract.
    """
    if not isinstance(decision, GateDecision) or desk is None:
        raise ReceiptIssueError(
            "a receipt is issued only for a decision the gate's desk sealed (a GateDecision and the"
            " ControlDesk that made it); a decision document is not authenticated (another gate's"
            " signed decision: issue_for_foreign_decision)",
            "unauthenticated_decision",
        )
    try:
        desk.check_seal(decision)
    except EvidenceRejectedError as exc:
        raise ReceiptIssueError(str(exc), exc.code) from None
    if not isinstance(action, Mapping) or action_hash(action) != decision.decision.action_hash:
        raise ReceiptIssueError("the decision is for another action (action hash differs)", "action_mismatch")
    return desk.issue(decision, key, ttl_seconds=ttl_seconds, now=now)
