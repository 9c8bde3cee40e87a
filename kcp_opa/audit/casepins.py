"""The case checks that hold only against what the auditor brings: a newer anchor, a receipt key.

A case is cut at its checkpoint: "none" holds only up to that seq, so a newer checkpoint or the
expected head (``--checkpoint``, ``--expect-head``) makes a case cut before a later execution
fail. A receipt verified with the key the case itself carries proves nothing about its issuer:
without ``--receipt-keyring`` the check is a warning, never a pass; either way its fields must
equal what the ledger's receipt entry recorded when it was issued.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kcp_opa.audit import case as layout
from kcp_opa.authorize.documents import Receipt
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.signing import load_keyring
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoints


class CaseFile(Protocol):
    """What these checks read of a case directory (casecheck's reader; a Protocol keeps the import one-way)."""

    root: Path
    keyring_pin: Path | None
    decision_id: str

    @property
    def pins(self) -> Pins: ...

    def json(self, name: str) -> Any: ...

    def cut(self) -> str: ...

    def checkpoint(self) -> Checkpoint: ...

    def chain(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]: ...

    def case_entries(self) -> list[dict[str, Any]]: ...

    def decisions(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Pins:
    """What the auditor holds apart from the case besides the registry and checkpoint keys."""

    receipt_keyring: Path | None = None
    checkpoint: Path | None = None  # a newer signed checkpoint of the same ledger
    expect_head: int | None = None  # the head seq the auditor knows the ledger reached


def anchor(case: CaseFile) -> tuple[bool | None, str]:
    """A newer off-box anchor: the case must reach it, and its chain must hold the anchored entry."""
    checkpoint, pins = case.checkpoint(), case.pins
    seq = checkpoint.seq
    if pins.checkpoint is None and pins.expect_head is None:
        later = "--checkpoint or --expect-head to check what came later"
        return None, f"not anchored: the case shows the ledger {case.cut()}; {later}"
    if pins.expect_head is not None and seq < pins.expect_head:
        again = "gather the case again from the ledger that reaches it"
        raise ValueError(f"the case is cut at seq {seq}, before the head seq {pins.expect_head} you expect; {again}")
    held = ""
    if pins.checkpoint is not None:
        keyring = load_keyring(case.keyring_pin or case.root / layout.CHECKPOINT_KEYS)
        mine = [c for c in read_checkpoints(pins.checkpoint) if c.ledger_id == checkpoint.ledger_id]
        if not mine:
            raise ValueError(f"{pins.checkpoint} holds no checkpoint of ledger {checkpoint.ledger_id}")
        newest = max(mine, key=lambda c: c.seq)
        newest.verify(keyring)
        if newest.seq > seq:
            later = f"your checkpoint is at seq {newest.seq}: later entries are missing"
            again = f"gather the case again with --checkpoint {pins.checkpoint} to anchor it there"
            raise ValueError(f"the case is cut at seq {seq}; {later}; {again}")
        at = {int(e["seq"]): e for e in case.chain()[1]}.get(newest.seq)
        if at is None or at.get("entry_hash") != newest.entry_hash:
            raise ValueError(f"the chain's seq {newest.seq} is not the entry your checkpoint signed")
        held = f"; your checkpoint at seq {newest.seq} ({newest.time}) is in the chain"
    head = f"; the head you expect (seq {pins.expect_head}) is reached" if pins.expect_head is not None else ""
    return True, f"the case reaches seq {seq}{held}{head}"


#: What the ledger's receipt entry records of the receipt it issued (controls.py, ``issue``).
_CHAINED_RECEIPT_FIELDS = ("decision_id", "action_hash", "issued_at", "expires_at", "approver_ids")


def receipt(case: CaseFile) -> tuple[bool | None, str]:
    entries = [e for e in case.case_entries() if e.get("type") == "receipt"]
    issued = [e for e in entries if "issued_at" in e]  # the issue entry, not a later "consumed" one
    if not (case.root / layout.RECEIPT).exists():
        if not issued:
            return None, f"no receipt was issued for this decision {case.cut()}"
        ids = ", ".join(str(e.get("receipt_id")) for e in issued)
        return None, f"the ledger records {ids} (id, kid, validity); no receipt file in the case to verify"
    raw = case.json(layout.RECEIPT)
    final = case.decisions()[-1]
    pin = case.pins.receipt_keyring
    issued_at = Receipt.from_dict(raw).issued_at  # strictly read before its time is used
    doc = verify_receipt(
        raw,
        final["input"]["action"],
        keyring=load_keyring(pin or case.root / layout.RECEIPT_KEYS),
        policy_versions={str((final.get("labels") or {}).get("policy_version"))},
        nonce_store=None,
        now=dt.datetime.fromisoformat(issued_at.replace("Z", "+00:00")),
    ).receipt
    if doc.decision_id != case.decision_id:
        raise ValueError("the receipt is for another decision")
    chained = [e for e in issued if e.get("receipt_id") == doc.receipt_id]
    if len(chained) != 1:
        raise ValueError("the receipt is not the one the ledger recorded for this decision")
    entry, written = chained[0], doc.to_dict()
    for name in _CHAINED_RECEIPT_FIELDS:
        if canonical_json(written[name]) != canonical_json(entry.get(name)):
            raise ValueError(f"the receipt's {name} differs from the chained receipt entry (seq {entry['seq']})")
    if (entry.get("signature") or {}) != {"alg": doc.signature.alg, "kid": doc.signature.kid}:
        raise ValueError(f"the receipt's signing key differs from the chained receipt entry (seq {entry['seq']})")
    same = f"{doc.receipt_id} verifies and its {', '.join(_CHAINED_RECEIPT_FIELDS)} equal the chained entry"
    if pin is None:
        return None, f"not pinned: {same}, under the case's own key (--receipt-keyring to prove the signature)"
    return True, f"{same}; signature verified with the pinned receipt keyring"
