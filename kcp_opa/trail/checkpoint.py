"""Signed checkpoints of a ledger's head: (ledger_id, seq, entry_hash, time, tree_root), signed by a key.

A checkpoint kept off-box anchors the chain: ``audit verify --checkpoint FILE`` requires the
entry at the checkpoint's seq to carry its hash, so a later cut at an entry boundary, a
re-chained rewritten tail or a regenerated file is detected; ``tree_root`` (base64, written by
the ledger's own writer) is the RFC 9162 root of the Merkle tree over entries 1..seq, which
``audit verify`` recomputes. The signature (HMAC-SHA256 or
Ed25519, keys from the receipt keyring) covers the canonical JSON of the checkpoint with only
``signature.value`` removed, as receipts do. A checkpoints file is one JSON object or JSON Lines.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.documents import Fields, Signature, sign
from kcp_opa.core.errors import LedgerError, MalformedDocumentError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.core.signing import Keyring, Signer, document_verifies

CHECKPOINT_FORMAT = "kcp-opa-checkpoint/1"
MAX_CHECKPOINT_FILE = 16 * 1024 * 1024
CHECKPOINT_FIELDS = ("format", "ledger_id", "seq", "entry_hash", "time", "signature")
OPTIONAL_FIELDS = ("tree_root",)


@dataclass(frozen=True)
class Checkpoint:
    """A signed (ledger_id, seq, entry_hash, time, tree_root): read strictly, written in one place."""

    ledger_id: str | None
    seq: int
    entry_hash: str
    time: str
    signature: Signature
    tree_root: str | None = None

    @classmethod
    def from_dict(cls, raw: object) -> Checkpoint:
        fields = Fields(raw, "checkpoint", required=CHECKPOINT_FIELDS, optional=OPTIONAL_FIELDS)
        if fields.raw["format"] != CHECKPOINT_FORMAT:
            raise fields.error(f"format must be {CHECKPOINT_FORMAT}")
        return cls(
            ledger_id=fields.optional_text("ledger_id"),
            seq=fields.integer("seq", minimum=1),
            entry_hash=fields.text("entry_hash"),
            time=fields.text("time"),
            signature=fields.signature(),
            tree_root=fields.optional_text("tree_root"),
        )

    def to_dict(self) -> JsonDict:
        document: JsonDict = {
            "format": CHECKPOINT_FORMAT,
            "ledger_id": self.ledger_id,
            "seq": self.seq,
            "entry_hash": self.entry_hash,
            "time": self.time,
            "signature": self.signature.to_dict(),
        }
        if self.tree_root is not None:
            document["tree_root"] = self.tree_root
        return document

    def with_signature(self, signature: Signature) -> Checkpoint:
        return replace(self, signature=signature)

    @classmethod
    def sign(
        cls,
        ledger_id: str | None,
        seq: int,
        head_hash: str,
        key: Signer,
        *,
        now: dt.datetime | None = None,
        tree_root: str | None = None,
    ) -> Checkpoint:
        moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
        stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return sign(cls(ledger_id, seq, head_hash, stamp, Signature(key.alg, key.kid, ""), tree_root), key)

    def verify(self, keyring: Keyring) -> None:
        """The signature must verify under a trusted, non-retired kid of the same algorithm."""
        kid, alg = self.signature.kid, self.signature.alg
        key = keyring.verifier(kid)
        if key is None or key.alg != alg:
            raise LedgerError(f"checkpoint signer {kid!r} is not trusted for {alg}")
        if not document_verifies(self.to_dict(), key):
            raise LedgerError(f"checkpoint at seq {self.seq}: signature does not verify")


def read_checkpoint(raw: object, where: str = "checkpoint") -> Checkpoint:
    """One checkpoint from JSON; LedgerError (naming ``where``) when it is not one."""
    try:
        return Checkpoint.from_dict(raw)
    except MalformedDocumentError as exc:
        raise LedgerError(f"{where}: not a {CHECKPOINT_FORMAT} checkpoint ({exc})") from None


def read_checkpoints(path: Path) -> list[Checkpoint]:
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
    return [read_checkpoint(item, str(path)) for item in items]


def append_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Append one checkpoint line durably (no symlinks followed)."""
    document = checkpoint.to_dict()
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o640)
    try:
        os.write(fd, canonical_json(document) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
