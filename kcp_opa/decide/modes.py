"""Enforcement modes: ``enforce`` (the default) and ``log_only``, and how a gate moves between them.

In ``log_only`` every decision is still computed and archived exactly as it would be; the
decision says ``mode: log_only`` and ``enforced: false``, so the caller knows it was not
enforced. Nothing else changes: receipts still need an APPROVED decision and the executor still
needs a receipt. A mode change is a ledger entry (``mode_change``, who and who approved) and is
refused when it cannot be recorded. With ``second_approval`` leaving ``enforce`` takes two
distinct principals: the first request is held as pending (15 minutes), a second principal
asking for the same mode completes it, so one credential cannot switch enforcement off.
Returning to ``enforce`` needs one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.principalids import canonical_id
from kcp_opa.trail.entries import AuditTrail

ENFORCE, LOG_ONLY = "enforce", "log_only"
MODES = (ENFORCE, LOG_ONLY)
PENDING_SECONDS = 15 * 60


class ModeChangeError(CodedError):
    """A mode change that may not happen (unknown mode, unrecorded, or a second principal missing)."""

    code = "mode_change_refused"


@dataclass(frozen=True)
class _Pending:
    mode: str
    by: str
    at: float


class ModeSwitch:
    """A gate's mode, changed only through :meth:`request`, every change in the ledger."""

    def __init__(self, mode: str = ENFORCE, *, second_approval: bool = False) -> None:
        if mode not in MODES:
            raise ModeChangeError(f"mode {mode!r}: the modes are {', '.join(MODES)}", "mode_unknown")
        self.mode = mode
        self.second_approval = second_approval
        self._pending: _Pending | None = None
        self._lock = threading.Lock()

    def request(self, mode: str, by: str, audit: AuditTrail | None) -> JsonDict:
        """Ask for ``mode`` as principal ``by``: applied (and recorded), or held for a second principal."""
        if mode not in MODES:
            raise ModeChangeError(f"mode {mode!r}: the modes are {', '.join(MODES)}", "mode_unknown")
        who = canonical_id(by)
        if not who:
            raise ModeChangeError("a mode change names who asks for it", "mode_change_refused")
        if audit is None:
            raise ModeChangeError("a mode change must be recorded: this gate has no ledger", "audit_unavailable")
        with self._lock:
            if mode == self.mode:
                self._pending = None
                return {"mode": self.mode, "changed": False}
            approver = None
            if mode != ENFORCE and self.second_approval:
                pending = self._pending
                fresh = pending is not None and time.monotonic() - pending.at < PENDING_SECONDS
                if pending is None or not fresh or pending.mode != mode or pending.by == who:
                    self._pending = _Pending(mode, who, time.monotonic())
                    return {"mode": self.mode, "changed": False, "pending": mode, "requested_by": who,
                            "needs": "a second principal asking for the same mode"}  # fmt: skip
                approver, who = who, pending.by
            previous = self.mode
            audit.event("mode_change", None, None, **{"from": previous}, to=mode, by=who, approved_by=approver)
            self.mode, self._pending = mode, None
        return {"mode": mode, "changed": True, "from": previous, "by": who, "approved_by": approver}

    def status(self) -> JsonDict:
        pending = self._pending
        return {
            "mode": self.mode,
            "second_approval": self.second_approval,
            "pending": None if pending is None else {"mode": pending.mode, "requested_by": pending.by},
        }
