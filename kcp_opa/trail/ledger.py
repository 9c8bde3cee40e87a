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

The chain itself (header, seq, signing, checkpoints, admission) is ``kcp_opa.trail.chain``'s;
this module keeps it in a file. A writer with a key (``checkpoint_key``) binds the ledger to
it: the header names the key, every entry is signed, and the writer extends or checkpoints
only a file whose entries it can authenticate (verified in full against its last checkpoint on
its first write; the last entry checked as its own before every batch and checkpoint).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Key
from kcp_opa.stores.storedtypes import LedgerSnapshot
from kcp_opa.trail.chain import Batch, Chain, Genesis, Head, parse
from kcp_opa.trail.checkpoint import Checkpoint, append_checkpoint, read_checkpoints
from kcp_opa.trail.frontier import TreeState, encode_root
from kcp_opa.trail.verify import GENESIS, LedgerProblem, VerifyReport, entry_hash, is_header, verify_ledger

__all__ = ["GENESIS", "AuditLedger", "LedgerProblem", "VerifyReport", "entry_hash", "read_entries", "verify_ledger"]

_TAIL_CHUNK = 64 * 1024
TREE_EVERY = 256
_log = structlog.get_logger(__name__)


def checkpoint_path(path: Path) -> Path:
    """Where a ledger's own signed checkpoints go (export them off-box to anchor the chain)."""
    return path.with_name(path.name + ".checkpoints")


def tree_path(path: Path) -> Path:
    """Where the writer keeps the Merkle tree's right edge at the head (derived; recomputed when stale)."""
    return path.with_name(path.name + ".tree")


def kept_tree_root(path: Path) -> dict[int, str]:
    """{seq: root} of the tree state the writer keeps beside a ledger file, for `audit verify` to recompute."""
    try:
        state = TreeState.parse(tree_path(path).read_bytes().partition(b"\n")[0])
    except OSError:
        return {}
    return {} if state is None or state.seq == 0 else {state.seq: encode_root(state.root)}


class FileChain:
    """A chain in one JSON Lines file: an exclusive ``flock`` per batch, a torn tail cut, a failed batch cut back."""

    kind = "ledger file"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        self._end = self._kept_end = (-1, 0)  # (seq, offset its entry ends at): this process's last, the kept one's

    def extend(self, genesis: Genesis | None, build: Callable[[Head], Batch]) -> Batch | None:
        """Under the file's lock: read the end, write and fsync the batch, then its checkpoint.

        A checkpoint that starts the chain or closes it must be written (else the batch is cut
        back); a periodic one that fails is logged, never un-acknowledging entries already durable.
        """
        fd = self._open()
        start = -1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            found = _prepare(fd, self.path, genesis)
            if found is None:
                return None
            start, head = found
            batch = build(replace(head, kept_tree=self._kept_tree, lines_after=lambda seq: self._lines_after(fd, seq)))
            lines = [genesis.line + b"\n"] if head.created and genesis is not None else []
            lines.extend(line + b"\n" for _, line in batch.entries)
            written = b"".join(lines)
            view = memoryview(written)
            while view:
                count = os.write(fd, view)
                view = view[count:]
            if lines:
                os.fsync(fd)
            if batch.checkpoint is not None:
                self._keep(batch.checkpoint, required=head.created or not batch.entries)
            if batch.tree is not None:
                self._end = (batch.tree.seq, start + len(written))
                due = head.seq // TREE_EVERY != batch.tree.seq // TREE_EVERY
                if due or batch.checkpoint is not None or not batch.entries:
                    self._keep_tree(batch.tree, start + len(written))
        except OSError as exc:
            _rollback(fd, start)
            raise LedgerError(f"{self.path}: audit write failed: {exc.strerror or exc}") from None
        except BaseException:
            _rollback(fd, start)
            raise
        finally:
            os.close(fd)  # closing releases the flock
        return batch

    def last_checkpoint(self) -> Checkpoint:
        """The last line of ``<ledger>.checkpoints``: without it a cut of the ledger would pass, so it is refused."""
        path = checkpoint_path(self.path)
        try:
            return read_checkpoints(path)[-1]
        except LedgerError as exc:
            raise LedgerError(
                f"{self.path}: this keyed ledger has entries but no readable checkpoint ({exc}); its cut "
                f"could not be detected: restore {path.name} or start a new ledger file"
            ) from None

    @contextlib.contextmanager
    def readable(self) -> Iterator[Path]:
        yield self.path  # read under the writer's lock: appends add only whole lines after it

    def place(self, line: int) -> str:
        return f"{self.path}:{line}"

    def _keep(self, checkpoint: Checkpoint, *, required: bool) -> None:
        try:
            append_checkpoint(checkpoint_path(self.path), checkpoint)
        except OSError as exc:
            if required:
                raise
            _log.warning("ledger_checkpoint_not_written", path=str(self.path), error=exc.strerror or str(exc))

    def _kept_tree(self) -> TreeState | None:
        """The state in ``<ledger>.tree`` (its first line); the second line is the offset its entry ends at."""
        try:
            state, _, offset = tree_path(self.path).read_bytes().partition(b"\n")
        except OSError:
            return None
        kept = TreeState.parse(state)
        if kept is not None and offset.strip().isdigit():
            self._kept_end = (kept.seq, int(offset))
        return kept

    def _lines_after(self, fd: int, seq: int) -> Iterator[bytes]:
        """Read from where entry ``seq`` ends when this process knows it, else from the file's start."""
        known = dict((self._end, self._kept_end))
        return _lines_after(fd, seq, known.get(seq, 0))

    def _keep_tree(self, tree: TreeState, end: int) -> None:
        """Written after the batch is durable, without an fsync: a state lost in a crash is recomputed.

        Kept every ``TREE_EVERY`` entries, at checkpoints and on close (not per batch: a second
        file written per fsync would cost the journal); a restart replays at most the entries since.
        """
        try:
            fd = os.open(tree_path(self.path), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
            try:
                data = tree.line() + b"\n%d\n" % end
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        except OSError as exc:
            _log.warning("ledger_tree_not_written", path=str(self.path), error=exc.strerror or str(exc))

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


class AuditLedger(Chain):
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
        self.path = Path(path)
        super().__init__(
            FileChain(self.path),
            durability=durability,
            checkpoint_key=checkpoint_key,
            checkpoint_every=checkpoint_every,
        )

    def healthy(self) -> bool:
        """Whether the file (or the directory it will be made in) is writable."""
        if self.path.exists():
            return os.access(self.path, os.W_OK)
        return os.access(self.path.parent if self.path.parent.exists() else Path.cwd(), os.W_OK)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LedgerSnapshot | None]:
        """The file itself (None before it exists): appends only add whole lines after what is read."""
        yield LedgerSnapshot(self.path, str(self.path), self.path.name) if self.path.exists() else None


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


def _prepare(fd: int, path: Path, genesis: Genesis | None) -> tuple[int, Head] | None:
    """Check the file is a ledger, cut a torn tail (headed files only) and read the head.

    Returns (offset the batch starts at, the head); None for an empty file and no ``genesis``.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        if genesis is None:
            return None
        parsed = json.loads(genesis.line)
        return 0, _head(parsed, genesis.ledger_id, 0, genesis.head_hash, None, created=True)
    first = os.pread(fd, _TAIL_CHUNK, 0)
    end = first.find(b"\n")
    head = parse(first[:end]) if end >= 0 else None
    headed = is_header(head)
    legacy = isinstance(head, dict) and head.get("seq") == 1 and head.get("previous_hash") == GENESIS
    if end < 0 and size < 160 and first.startswith(b'{"created_at":"'):
        os.ftruncate(fd, 0)  # only a torn header: the first batch never completed
        os.fsync(fd)
        return _prepare(fd, path, genesis)
    if not headed and not legacy:
        raise LedgerError(f"{path}: not a kcp-opa audit ledger (no ledger header); refusing to write to it")
    last = _last_newline(fd, size)
    if last != size - 1:
        if not headed:
            raise LedgerError(f"{path}: torn last line in a headerless ledger; repair it by hand after `audit verify`")
        os.ftruncate(fd, last + 1)  # never acknowledged: its writer died before the fsync returned
        os.fsync(fd)
        size = last + 1
    ledger_id = str(head["ledger_id"]) if is_header(head) else None
    if headed and size == end + 1:
        return size, _head(head, ledger_id, 0, canonical_hash(head), None)
    begin = _last_newline(fd, size - 1) + 1
    entry = parse(os.pread(fd, size - 1 - begin, begin))
    try:
        if not isinstance(entry, dict):
            raise TypeError
        seq, entry_hash = int(entry["seq"]), str(entry["entry_hash"])
    except (KeyError, TypeError, ValueError):
        raise LedgerError(f"{path}: the last entry is not a ledger entry; run `kcp-opa audit verify`") from None
    return size, _head(head, ledger_id, seq, entry_hash, entry)


def _head(
    header: object,
    ledger_id: str | None,
    seq: int,
    head_hash: str,
    last: JsonObject | None,
    *,
    created: bool = False,
) -> Head:
    """A file is read from its end: whether it still holds an entry is known for its last entry only."""

    def holds(wanted: int, entry_hash: str) -> bool:
        return wanted != seq or (last is not None and last.get("entry_hash") == entry_hash)

    return Head(header, ledger_id, seq, head_hash, last, created, holds)


def _lines_after(fd: int, seq: int, offset: int) -> Iterator[bytes]:
    """The stored bytes of the entries after ``seq``, reading from ``offset`` (0: the whole file)."""
    with os.fdopen(os.dup(fd), "rb") as handle:
        handle.seek(offset)
        for raw in handle:
            entry = parse(raw) if raw.endswith(b"\n") else None
            found = entry.get("seq") if isinstance(entry, dict) and not is_header(entry) else None
            if isinstance(found, int) and found > seq:
                yield raw[:-1]


def read_entries(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, entry) for every well-formed entry line (the header is skipped)."""
    try:
        with Path(path).open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if raw.endswith(b"\n"):
                    entry = parse(raw)
                    if isinstance(entry, dict) and not (number == 1 and is_header(entry)):
                        yield number, entry
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None
