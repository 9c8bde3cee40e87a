"""Signed checkpoints of a ledger's head: (ledger_id, seq, entry_hash, time), signed by a key.

A checkpoint kept off-box anchors the chain: ``audit verify --checkpoint FILE`` requires the
entry at the checkpoint's seq to carry its hash, so a later cut at an entry boundary, a
re-chained rewritten tail or a regenerated file is detected. The signature (HMAC-SHA256 or
Ed25519, keys from the receipt keyring) covers the canonical JSON of the checkpoint with only
``signature.value`` removed, as receipts do. A checkpoints file is one JSON object or JSON Lines.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.signing import Keyring, Signer, document_verifies, sign_document, signed_bytes

CHECKPOINT_FORMAT = "kcp-opa-checkpoint/1"
MAX_CHECKPOINT_FILE = 16 * 1024 * 1024


#: What a checkpoint's signature covers (the checkpoint with only ``signature.value`` removed).
checkpoint_bytes = signed_bytes


def make_checkpoint(
    ledger_id: str | None, seq: int, head_hash: str, key: Signer, *, now: dt.datetime | None = None
) -> dict[str, Any]:
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    checkpoint: dict[str, Any] = {
        "format": CHECKPOINT_FORMAT,
        "ledger_id": ledger_id,
        "seq": seq,
        "entry_hash": head_hash,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    return sign_document(checkpoint, key)


def append_checkpoint(path: Path, checkpoint: Mapping[str, Any]) -> None:
    """Append one checkpoint line durably (no symlinks followed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o640)
    try:
        os.write(fd, canonical_json(checkpoint) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoints(path: Path) -> list[dict[str, Any]]:
    """Every checkpoint in a file (one JSON object, or one per line); LedgerError if malformed."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CHECKPOINT_FILE + 1)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the checkpoint: {exc.strerror or exc}") from None
    if len(raw) > MAX_CHECKPOINT_FILE:
        raise LedgerError(f"{path}: checkpoint file larger than {MAX_CHECKPOINT_FILE >> 20} MiB")
    try:
        text = raw.decode("utf-8")
        items = [json.loads(text)] if text.lstrip().startswith("{") and "\n{" not in text.strip() else []
        if not items:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        raise LedgerError(f"{path}: not a checkpoint (JSON object or JSON Lines)") from None
    if not items:
        raise LedgerError(f"{path}: holds no checkpoint")
    return [_shape(item, path) for item in items]


def _shape(item: Any, path: Path) -> dict[str, Any]:
    ok = (
        isinstance(item, dict)
        and item.get("format") == CHECKPOINT_FORMAT
        and isinstance(item.get("seq"), int)
        and not isinstance(item.get("seq"), bool)
        and item["seq"] >= 1
        and isinstance(item.get("entry_hash"), str)
        and isinstance(item.get("signature"), dict)
        and (item.get("ledger_id") is None or isinstance(item.get("ledger_id"), str))
    )
    if not ok:
        raise LedgerError(f"{path}: not a {CHECKPOINT_FORMAT} checkpoint")
    return dict(item)


def verify_checkpoint(checkpoint: Mapping[str, Any], keyring: Keyring) -> None:
    """The signature must verify under a trusted, non-retired kid of the same algorithm."""
    signature = checkpoint.get("signature")
    signature = signature if isinstance(signature, Mapping) else {}
    kid, alg, value = signature.get("kid"), signature.get("alg"), signature.get("value")
    key = keyring.verifier(kid) if isinstance(kid, str) else None
    if key is None or key.alg != alg:
        raise LedgerError(f"checkpoint signer {kid!r} is not trusted for {alg}")
    if not isinstance(value, str) or not document_verifies(checkpoint, key):
        raise LedgerError(f"checkpoint at seq {checkpoint.get('seq')}: signature does not verify")
