"""The append-only, hash-chained audit ledger (JSON Lines), safe across processes and crashes.

Line 1 is a header (``{"kcp_opa_ledger": 1, "ledger_id": ..., "created_at": ...}``) that marks
the file as a ledger; every further line is one entry. ``entry_hash`` is the sha256 of the
entry's canonical JSON without ``entry_hash``, and ``previous_hash`` is the entry_hash of the
entry before it (the first entry points at the header's canonical hash, so the header is
chained too; in a headerless ledger from before headers existed, at ``GENESIS``). Appends take an exclusive ``flock`` on
the file, so several processes extend one chain without interleaving or forking it. An entry is
flushed and fsynced before ``append`` returns (``durability="fsync"``), or committed together
with the other entries waiting in this process (``"group"``: one fsync per batch, every caller
still waits for it). A batch whose write or fsync fails is cut back to the offset it started
at, so no entry that a caller saw fail stays behind. A crash mid-write leaves at most a torn
last line: ``verify`` reports it, and the next writer cuts it off before appending.

The writer never follows a symlink (``O_NOFOLLOW``) and writes only to an empty file, a file
with the header, or a headerless ledger written before headers existed (its first line is a
genesis entry). It repairs (cuts) a torn tail only in a file with the header: it never
truncates a file it cannot prove is a ledger. Signed checkpoints of the head anchor the chain
against truncation and regeneration (``kcp_opa.trail.checkpoint``).

A writer with a key (``checkpoint_key``) binds the ledger to it: the header it creates names the
key (``entry_auth``), every entry it writes carries ``entry_signature``, and it extends or
checkpoints only a file whose entries it can authenticate. On its first write it verifies the
whole file against its own last checkpoint; before every batch and every checkpoint it checks
that the last entry is its own. A validly chained entry appended without the key is refused
(the writer neither extends nor signs past it) and reported by ``audit verify --keyring``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import stat
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import KeyringError, LedgerError
from kcp_opa.core.groupcommit import GroupCommit
from kcp_opa.core.signing import Key, Keyring, sign_document
from kcp_opa.stores.records import LedgerSnapshot
from kcp_opa.trail.checkpoint import Checkpoint, append_checkpoint, read_checkpoints
from kcp_opa.trail.record import LedgerEntry
from kcp_opa.trail.verify import (
    AUTH_KEY,
    ENTRY_SIGNATURE,
    GENESIS,
    HEADER_KEY,
    LedgerProblem,
    VerifyReport,
    binding_problem,
    declared_writer,
    entry_hash,
    foreign_entry,
    is_header,
    verify_ledger,
)

__all__ = ["GENESIS", "AuditLedger", "LedgerProblem", "VerifyReport", "entry_hash", "read_entries", "verify_ledger"]

_TAIL_CHUNK = 64 * 1024
_log = structlog.get_logger(__name__)


def checkpoint_path(path: Path) -> Path:
    """Where a ledger's own signed checkpoints go (export them off-box to anchor the chain)."""
    return path.with_name(path.name + ".checkpoints")


class AuditLedger:
    """Append entries to one JSON Lines file; ``durability`` is "fsync" (default) or "group".

    With ``checkpoint_key`` (the writer's key), every entry is signed, and a signed checkpoint
    of the head is appended to ``<ledger>.checkpoints`` every ``checkpoint_every`` entries and
    on :meth:`close`; only entries this key wrote are extended and checkpointed.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        durability: str = "fsync",
        checkpoint_key: Key | None = None,
        checkpoint_every: int = 1000,
    ) -> None:
        if durability not in {"fsync", "group"}:
            raise ValueError("durability is 'fsync' or 'group'")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every is at least 1")
        self.path = Path(path)
        self.durability = durability
        self.checkpoint_key = checkpoint_key
        self.checkpoint_every = checkpoint_every
        self._trusted = Keyring({checkpoint_key.kid: checkpoint_key}) if checkpoint_key is not None else None
        self._verified = False
        self._head: tuple[str | None, int, str] | None = None  # (ledger_id, seq, hash) this writer last wrote
        self._marked: tuple[str | None, int, str] | None = None  # the head of its last checkpoint
        self._last_checkpoint: Checkpoint | None = None
        self._lock = threading.Lock()
        self._group = GroupCommit(self._write_batch, max_batch=512)

    @property
    def location(self) -> str:
        """The ledger file (the ``LedgerStore`` protocol's location)."""
        return str(self.path)

    def healthy(self) -> bool:
        """Whether the file (or the directory it will be made in) is writable."""
        if self.path.exists():
            return os.access(self.path, os.W_OK)
        return os.access(self.path.parent if self.path.parent.exists() else Path.cwd(), os.W_OK)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LedgerSnapshot | None]:
        """The file itself (None before it exists): appends only add whole lines after what is read."""
        yield LedgerSnapshot(self.path, str(self.path), self.path.name) if self.path.exists() else None

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Chain and durably write one entry; returns it with seq, previous_hash and entry_hash.

        Raises :class:`LedgerError` if it is not on disk (the caller must fail closed).
        """
        if self.durability == "fsync":
            with self._lock:
                return self._write_batch([dict(entry)])[0]
        return self._group.submit(dict(entry))

    def close(self) -> dict[str, Any] | None:
        """Write a signed checkpoint of the current head (if a key is set); returns its wire form."""
        if self.checkpoint_key is None:
            return None
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _, ledger_id, previous, seq, header, head, last = _prepare(fd, self.path, self.checkpoint_key)
            self._admit(head, last, seq, created=bool(header))
            if seq == 0:
                return None
            if self._marked == (ledger_id, seq, previous) and self._last_checkpoint is not None:
                return self._last_checkpoint.to_dict()  # this head is checkpointed already
            return self._checkpoint(ledger_id, seq, previous).to_dict()
        finally:
            os.close(fd)

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, flags, 0o640)
        except OSError as exc:
            reason = "it is a symlink (never followed)" if self.path.is_symlink() else (exc.strerror or str(exc))
            raise LedgerError(f"{self.path}: cannot open the audit ledger: {reason}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise LedgerError(f"{self.path}: the audit ledger is not a regular file")
        return fd

    def _write_batch(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        fd = self._open()
        start = -1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            start, ledger_id, previous, seq, header, head, last = _prepare(fd, self.path, self.checkpoint_key)
            self._admit(head, last, seq, created=bool(header))
            lines = [header] if header else []
            written = []
            sign = self._sign if self.checkpoint_key is not None else None
            for entry in entries:
                seq += 1
                chained, line = LedgerEntry.written(entry, seq, previous, sign)
                previous, document = chained.entry_hash, chained.to_dict()
                lines.append(line + b"\n")
                written.append(document)
            view = memoryview(b"".join(lines))
            while view:
                count = os.write(fd, view)
                view = view[count:]
            os.fsync(fd)
            if header and self.checkpoint_key is not None and written:
                # a new keyed ledger is never without a checkpoint: a later cut is then always seen
                self._checkpoint(ledger_id, seq, previous)
        except OSError as exc:
            _rollback(fd, start)
            raise LedgerError(f"{self.path}: audit write failed: {exc.strerror or exc}") from None
        except BaseException:
            _rollback(fd, start)
            raise
        finally:
            os.close(fd)  # closing releases the flock
        if written:
            self._head = (ledger_id, seq, previous)
        if not header:
            self._maybe_checkpoint(ledger_id, written)
        return written

    def _checkpoint(self, ledger_id: str | None, seq: int, head_hash: str) -> Checkpoint:
        """Sign and append a checkpoint of (seq, head_hash); LedgerError or OSError if it is not written."""
        assert self.checkpoint_key is not None
        try:
            checkpoint = Checkpoint.sign(ledger_id, seq, head_hash, self.checkpoint_key)
        except KeyringError as exc:
            raise LedgerError(f"{self.path}: cannot sign the checkpoint: {exc}") from None
        append_checkpoint(checkpoint_path(self.path), checkpoint)
        self._marked, self._last_checkpoint = (ledger_id, seq, head_hash), checkpoint
        return checkpoint

    def _sign(self, entry: dict[str, Any]) -> dict[str, Any]:
        if self.checkpoint_key is None:
            return entry
        try:
            return sign_document(entry, self.checkpoint_key, ENTRY_SIGNATURE)
        except KeyringError as exc:  # an HSM that does not answer: the entry is not written
            raise LedgerError(f"{self.path}: cannot sign the entry: {exc}") from None

    def _admit(self, head: Any, last: Any, seq: int, *, created: bool) -> None:
        """A keyed writer extends and signs only its own ledger: its header, its entries, its cut.

        The first time, the whole file is verified against this writer's last checkpoint (a
        file with entries and no checkpoint is refused: its cut could not be seen); every time,
        the last entry must carry this writer's signature and the chain must still reach the
        head this writer last wrote.
        """
        if self._trusted is None or self.checkpoint_key is None or created:
            self._verified = self._verified or created
            return
        key = self.checkpoint_key
        unbound = binding_problem(declared_writer(head), key.kid, key.alg)
        if unbound is not None:
            raise LedgerError(f"{self.path}: {unbound}; a keyed writer starts its own ledger file")
        problem = foreign_entry(last, declared_writer(head), self._trusted) if seq else None
        if problem is not None:
            raise LedgerError(
                f"{self.path}: {problem}; refusing to extend or checkpoint it (run `kcp-opa audit verify`)"
            )
        self._check_not_cut(head, last, seq)
        if not self._verified and seq:
            anchors, ledger_id = self._own_anchor()
            report = verify_ledger(
                self.path, anchors=anchors, ledger_id=ledger_id, keyring=self._trusted, writer=key.kid
            )
            if not report.ok:
                found = report.problems[0]
                raise LedgerError(f"{self.path}:{found.line}: {found.message}; refusing to extend or checkpoint it")
        self._verified = True

    def _check_not_cut(self, head: Any, last: Any, seq: int) -> None:
        """The head this writer last wrote to this ledger is still in it (a cut under a running writer)."""
        mine = self._head
        if mine is None or not isinstance(head, dict) or head.get("ledger_id") != mine[0]:
            return
        _, own_seq, own_hash = mine
        if seq < own_seq or (seq == own_seq and isinstance(last, dict) and last.get("entry_hash") != own_hash):
            raise LedgerError(
                f"{self.path}: the chain ends at seq {seq} but this writer wrote seq {own_seq}: the ledger was "
                "cut or rewritten; refusing to extend or checkpoint it (run `kcp-opa audit verify`)"
            )

    def _own_anchor(self) -> tuple[list[tuple[int, str]], str | None]:
        """The last checkpoint this writer left, verified with its key.

        Called only for a file with entries: no checkpoint file means it was deleted (or never
        written), and a cut of the ledger would then pass, so the file is refused.
        """
        path = checkpoint_path(self.path)
        if self._trusted is None:
            return [], None
        try:
            last = read_checkpoints(path)[-1]
        except LedgerError as exc:
            raise LedgerError(
                f"{self.path}: this keyed ledger has entries but no readable checkpoint ({exc}); its cut "
                f"could not be detected: restore {path.name} or start a new ledger file"
            ) from None
        last.verify(self._trusted)
        return [(last.seq, last.entry_hash)], last.ledger_id

    def _maybe_checkpoint(self, ledger_id: str | None, written: list[dict[str, Any]]) -> None:
        if self.checkpoint_key is None or not written:
            return
        first, last = written[0]["seq"], written[-1]["seq"]
        if (first - 1) // self.checkpoint_every == last // self.checkpoint_every:
            return
        try:
            self._checkpoint(ledger_id, last, written[-1]["entry_hash"])
        except (OSError, LedgerError) as exc:  # the entries are durable: report, never un-acknowledge them
            _log.warning("ledger_checkpoint_not_written", path=str(self.path), error=str(exc))


def _rollback(fd: int, start: int) -> None:
    """Cut a failed batch back to where it started: no entry its callers saw fail survives."""
    if start < 0:
        return
    try:
        if os.fstat(fd).st_size > start:
            os.ftruncate(fd, start)
            os.fsync(fd)
    except OSError as exc:  # pragma: no cover - the file is then torn; verify and the next writer see it
        _log.error("ledger_rollback_failed", error=str(exc))


def header_line(key: Key | None = None) -> bytes:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    header: dict[str, Any] = {HEADER_KEY: 1, "ledger_id": uuid.uuid4().hex, "created_at": stamp}
    if key is not None:
        header[AUTH_KEY] = {"alg": key.alg, "kid": key.kid}
    return canonical_json(header) + b"\n"


def _last_newline(fd: int, end: int) -> int:
    """Offset of the last newline before ``end``, or -1."""
    position = end
    while position > 0:
        start = max(0, position - _TAIL_CHUNK)
        found = os.pread(fd, position - start, start).rfind(b"\n")
        if found >= 0:
            return start + found
        position = start
    return -1


def _parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _prepare(fd: int, path: Path, key: Key | None = None) -> tuple[int, str | None, str, int, bytes, Any, Any]:
    """Check the file is a ledger, cut a torn tail (headed files only) and read the head.

    Returns (offset the batch starts at, ledger_id, last entry hash, last seq, header to write,
    the first line, the last entry or None).
    """
    size = os.fstat(fd).st_size
    if size == 0:
        header = header_line(key)
        parsed = json.loads(header)
        return 0, str(parsed["ledger_id"]), canonical_hash(parsed), 0, header, parsed, None
    first = os.pread(fd, _TAIL_CHUNK, 0)
    end = first.find(b"\n")
    head: Any = _parse(first[:end]) if end >= 0 else None
    headed = is_header(head)
    legacy = isinstance(head, dict) and head.get("seq") == 1 and head.get("previous_hash") == GENESIS
    if end < 0 and size < 160 and header_line().startswith(first[:15]) and first.startswith(b'{"created_at":"'):
        os.ftruncate(fd, 0)  # only a torn header: the first batch never completed
        os.fsync(fd)
        return _prepare(fd, path, key)
    if not headed and not legacy:
        raise LedgerError(f"{path}: not a kcp-opa audit ledger (no ledger header); refusing to write to it")
    last = _last_newline(fd, size)
    if last != size - 1:
        if not headed:
            raise LedgerError(f"{path}: torn last line in a headerless ledger; repair it by hand after `audit verify`")
        os.ftruncate(fd, last + 1)  # never acknowledged: its writer died before the fsync returned
        os.fsync(fd)
        size = last + 1
    ledger_id = str(head["ledger_id"]) if headed else None
    if headed and size == end + 1:
        return size, ledger_id, canonical_hash(head), 0, b"", head, None
    begin = _last_newline(fd, size - 1) + 1
    entry = _parse(os.pread(fd, size - 1 - begin, begin))
    try:
        return size, ledger_id, str(entry["entry_hash"]), int(entry["seq"]), b"", head, entry
    except (KeyError, TypeError, ValueError):
        raise LedgerError(f"{path}: the last entry is not a ledger entry; run `kcp-opa audit verify`") from None


def read_entries(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, entry) for every well-formed entry line (the header is skipped)."""
    try:
        with Path(path).open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if raw.endswith(b"\n"):
                    entry = _parse(raw)
                    if isinstance(entry, dict) and not (number == 1 and is_header(entry)):
                        yield number, entry
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None
