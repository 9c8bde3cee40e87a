"""A witness: cosigns a log's checkpoint only when it extends the last one it cosigned for that log.

The state file keeps, per origin, the size and root of the largest checkpoint the witness has
cosigned. A new checkpoint must carry the log's valid signature; it is then cosigned
(c2sp.org/tlog-cosignature, timestamped Ed25519) only if it is the same tree, or a larger one
with a consistency proof from the kept one. A checkpoint of the same size with another root (a
fork) or a smaller size (a shrinking log) is refused and reported, whatever proof comes with
it; so is one of the same size and root whose extension lines differ (another consume index
for the same tree, ``kcp_opa.trail.consumes``: two views of which receipts were consumed). The
first checkpoint seen for an origin is taken on first use. The state is written, 0600
and all or nothing, before the cosignature is handed out, under an exclusive lock, so two runs
never cosign two views.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.files import replace_atomically
from kcp_opa.core.strictjson import loads
from kcp_opa.trail.note import (
    ED25519_COSIGNATURE,
    Checkpoint,
    Note,
    NoteError,
    NoteSigner,
    NoteVerifier,
    open_checkpoint,
)
from kcp_opa.trail.proofs import verify_consistency_document

STATE_FORMAT = "kcp-opa-witness-state/1"


class WitnessRefusal(NoteError):
    """The witness will not cosign: a fork, a shrinking log, or no valid proof (one line, reported)."""


@dataclass(frozen=True)
class Seen:
    """What the witness last cosigned for one log."""

    size: int
    root: bytes
    #: sha256 (hex) of the checkpoint's extension lines, as cosigned ("" in a state written before).
    extensions: str = ""


@dataclass(frozen=True)
class Cosigned:
    """A cosigning's outcome: the checkpoint with the cosignature added, and what the witness had seen."""

    note: Note
    origin: str
    size: int
    previous: Seen | None


def _read_state(path: Path) -> dict[str, Seen]:
    if not path.exists():
        return {}
    try:
        document: object = loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # ValueError: json.JSONDecodeError, StrictJSONError
        raise NoteError(f"{path}: cannot read the witness state: {exc}") from None
    logs = document.get("logs") if isinstance(document, Mapping) else None
    if not isinstance(document, Mapping) or document.get("format") != STATE_FORMAT or not isinstance(logs, Mapping):
        raise NoteError(f"{path}: not a witness state file ({STATE_FORMAT}); refusing to overwrite it")
    seen = {}
    for origin, entry in logs.items():
        try:
            root = base64.b64decode(entry["root"], validate=True)
            seen[origin] = Seen(int(entry["size"]), root, str(entry.get("extensions", "")))
        except (KeyError, TypeError, ValueError):
            raise NoteError(f"{path}: the entry for {origin} is damaged; restore the state file") from None
    return seen


def _write_state(path: Path, seen: Mapping[str, Seen]) -> None:
    logs = {
        o: {"size": s.size, "root": base64.b64encode(s.root).decode("ascii"), "extensions": s.extensions}
        for o, s in sorted(seen.items())
    }
    replace_atomically(path, canonical_json({"format": STATE_FORMAT, "logs": logs}) + b"\n")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Witness:
    """Cosigns checkpoints of the logs whose keys it is given, keeping its state in ``state``."""

    def __init__(self, state: Path, signer: NoteSigner, logs: Mapping[str, NoteVerifier]) -> None:
        if signer.kind != ED25519_COSIGNATURE:
            raise NoteError("a witness signs cosignatures (type 0x04)")
        self.state, self.signer, self.logs = state, signer, logs

    @staticmethod
    def read_state(state: Path) -> dict[str, Seen]:
        """What the witness last cosigned, per origin (empty before its first cosignature)."""
        return _read_state(state)

    def cosign(self, data: bytes, proof: object | None, now: int | None = None) -> Cosigned:
        """The checkpoint in ``data`` with this witness's cosignature, or :class:`WitnessRefusal`."""
        note = Note.parse(data)
        origin = note.text.split("\n", 1)[0]
        log = self.logs.get(origin)
        if log is None:
            raise WitnessRefusal(f"no log key is configured for {origin!r}; give the log's verifier key")
        checkpoint = open_checkpoint(data, log).checkpoint
        with _locked(self.state):
            seen = _read_state(self.state)
            previous = seen.get(origin)
            extensions = hashlib.sha256("\n".join(checkpoint.extensions).encode("utf-8")).hexdigest()
            if previous is not None:
                self._check_extends(origin, previous, checkpoint.size, checkpoint.root, proof)
                if checkpoint.size == previous.size and previous.extensions not in ("", extensions):
                    raise WitnessRefusal(
                        f"{origin}: fork: the tree of {checkpoint.size} entries with other extension lines (another"
                        " consume index) than the one cosigned"
                    )
            seen[origin] = Seen(checkpoint.size, checkpoint.root, extensions)
            _write_state(self.state, seen)
        stamp = int(time.time()) if now is None else now
        cosigned = note.with_signature(self.signer.sign(note.text, stamp))
        return Cosigned(cosigned, origin, checkpoint.size, previous)

    @staticmethod
    def _check_extends(origin: str, previous: Seen, size: int, root: bytes, proof: object | None) -> None:
        if size < previous.size:
            raise WitnessRefusal(
                f"{origin}: the log shrank from {previous.size} to {size} entries; not cosigning (a rewritten history)"
            )
        if size == previous.size:
            if root != previous.root:
                raise WitnessRefusal(
                    f"{origin}: fork: a second tree of {size} entries with another root than the one cosigned"
                )
            return
        if proof is None:
            raise WitnessRefusal(
                f"{origin}: a consistency proof from size {previous.size} to {size} is needed"
                f" (kcp-opa audit prove-consistency)"
            )
        old, new = Checkpoint(origin, previous.size, previous.root), Checkpoint(origin, size, root)
        try:
            verify_consistency_document(proof, old, new)
        except NoteError as exc:
            raise WitnessRefusal(f"{origin}: fork: not cosigning: {exc}") from None
