"""Which signed checkpoint anchors a case, and the keys that verify it.

Gather and ``audit case verify --checkpoint FILE`` must agree: verify fails a case cut before
the newest checkpoint FILE holds for the ledger (a case cut before a later execution), so
gather, given the same FILE, anchors at that newest checkpoint. The case then reaches the
head the auditor knows, and verify with the same file passes. The newest checkpoint must
verify and sign the ledger's own entry at its seq; anything else is a one-line refusal naming
what to bring, never a silently older anchor.

Without checkpoint files the keyring's signing key signs a checkpoint of the head now. The
public keys written into the case come from ``--keyring``, or else from the receipt keyring
when it holds the checkpoint's signer (a gate that signs receipts and checkpoints with one
keyring); ``--keyring`` is needed only when neither can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kcp_opa.core.errors import KeyringError, LedgerError
from kcp_opa.core.signing import Keyring
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoints


def _newest(ledger_id: str | None, given: Sequence[Path]) -> Checkpoint:
    mine = [c for path in given for c in read_checkpoints(path) if c.ledger_id == ledger_id]
    if not mine:
        names = ", ".join(str(path) for path in given)
        raise LedgerError(f"{names}: no checkpoint of ledger {ledger_id}; give a checkpoint of this ledger")
    return max(mine, key=lambda c: c.seq)


def _verifying_keyring(checkpoint: Checkpoint, keyrings: Sequence[Keyring | None]) -> Keyring:
    kid = checkpoint.signature.kid
    for keyring in keyrings:
        if keyring is not None and keyring.verifier(kid) is not None:
            try:
                checkpoint.verify(keyring)
            except LedgerError as exc:
                raise LedgerError(f"{exc} under the key {kid!r} you gave: give the checkpoint's own key") from None
            return keyring
    raise LedgerError(f"the checkpoint at seq {checkpoint.seq} is signed by {kid!r}: add --keyring RING with its key")


def anchor_checkpoint(
    ledger: Path,
    head: tuple[str | None, int, str],
    last_seq: int,
    entry_hashes: Mapping[int, str],
    given: Sequence[Path],
    keyring: Keyring | None,
    receipt_keyring: Keyring | None = None,
) -> tuple[Checkpoint, Keyring]:
    """The checkpoint that anchors a case whose last entry is ``last_seq``, and a keyring verifying it.

    ``head`` is the verified ledger's (ledger_id, head seq, head hash); ``entry_hashes`` its
    entry hash by seq."""
    ledger_id, head_seq, head_hash = head
    if not given:
        if keyring is None:
            raise LedgerError("nothing anchors the case: add --keyring RING (to sign the head) or --checkpoint FILE")
        try:
            return Checkpoint.sign(ledger_id, head_seq, head_hash, keyring.signer()), keyring
        except KeyringError as exc:
            cannot = f"--keyring cannot sign a checkpoint of the head ({exc})"
            raise LedgerError(f"{cannot}: add a signing key, or give --checkpoint FILE") from None
    newest = _newest(ledger_id, given)
    if newest.seq < last_seq:
        later = f"the decision's last entry is seq {last_seq}; give a newer --checkpoint, or none to sign the head"
        raise LedgerError(f"your newest checkpoint is at seq {newest.seq}: {later}")
    if newest.seq > head_seq:
        reach = f"gather from a copy of the ledger that reaches your checkpoint at seq {newest.seq}"
        raise LedgerError(f"{ledger} ends at seq {head_seq}: {reach}")
    if entry_hashes.get(newest.seq) != newest.entry_hash:
        raise LedgerError(f"{ledger}: seq {newest.seq} is not the entry your checkpoint signed (rewritten after it)")
    return newest, _verifying_keyring(newest, (keyring, receipt_keyring))
