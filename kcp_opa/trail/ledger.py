"""The append-only, hash-chained audit ledger (JSON Lines), safe across processes and crashes.

Each line is one entry; ``entry_hash`` is the sha256 of the entry's canonical JSON without
``entry_hash``, and ``previous_hash`` is the entry_hash of the line before it (the first entry
points at ``GENESIS``). Appends take an exclusive ``flock`` on the file, so several processes
extend one chain without interleaving or forking it. An entry is flushed and fsynced before
``append`` returns (``durability="fsync"``), or committed together with the other entries
waiting in this process (``"group"``: one fsync per batch, every caller still waits for it).
A crash mid-write leaves at most a torn last line without its newline: ``verify`` reports it,
and the next writer cuts it off before appending (it was never acknowledged).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.groupcommit import GroupCommit

GENESIS = "sha256:" + "0" * 64
_TAIL_CHUNK = 64 * 1024


def entry_hash(entry: Mapping[str, Any]) -> str:
    return canonical_hash({k: v for k, v in entry.items() if k != "entry_hash"})


class AuditLedger:
    """Append entries to one JSON Lines file; ``durability`` is "fsync" (default) or "group"."""

    def __init__(self, path: str | Path, *, durability: str = "fsync") -> None:
        if durability not in {"fsync", "group"}:
            raise ValueError("durability is 'fsync' or 'group'")
        self.path = Path(path)
        self.durability = durability
        self._lock = threading.Lock()
        self._group = GroupCommit(self._write_batch, max_batch=512)

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Chain and durably write one entry; returns it with seq, previous_hash and entry_hash.

        Raises :class:`LedgerError` if it is not on disk (the caller must fail closed).
        """
        if self.durability == "fsync":
            with self._lock:
                return self._write_batch([dict(entry)])[0]
        return self._group.submit(dict(entry))

    def _write_batch(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot open the audit ledger: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            previous, seq = _repair_and_tail(fd, self.path)
            lines = []
            written = []
            for entry in entries:
                seq += 1
                chained = {**entry, "seq": seq, "previous_hash": previous}
                chained["entry_hash"] = previous = entry_hash(chained)
                lines.append(canonical_json(chained) + b"\n")
                written.append(chained)
            data = b"".join(lines)
            view = memoryview(data)
            while view:
                count = os.write(fd, view)
                view = view[count:]
            os.fsync(fd)
            return written
        except OSError as exc:
            raise LedgerError(f"{self.path}: audit write failed: {exc.strerror or exc}") from None
        finally:
            os.close(fd)  # closing releases the flock


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


def _repair_and_tail(fd: int, path: Path) -> tuple[str, int]:
    """The last complete entry's hash and seq; a torn last line (no newline) is cut off first."""
    size = os.fstat(fd).st_size
    last = _last_newline(fd, size)
    if last != size - 1:
        os.ftruncate(fd, last + 1)  # never acknowledged: its writer died before the fsync returned
        os.fsync(fd)
        size = last + 1
    if size == 0:
        return GENESIS, 0
    begin = _last_newline(fd, size - 1) + 1
    line = os.pread(fd, size - 1 - begin, begin)
    try:
        entry = json.loads(line)
        return str(entry["entry_hash"]), int(entry["seq"])
    except (ValueError, KeyError, TypeError):
        raise LedgerError(f"{path}: the last entry is not a ledger entry; run `kcp-opa audit verify`") from None


@dataclass(frozen=True)
class LedgerProblem:
    line: int
    message: str


@dataclass(frozen=True)
class VerifyReport:
    entries: int
    problems: tuple[LedgerProblem, ...]
    torn_tail: bool

    @property
    def ok(self) -> bool:
        return not self.problems


def read_entries(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, entry) for every well-formed line; raises LedgerError on unreadable files."""
    try:
        with Path(path).open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if raw.endswith(b"\n"):
                    try:
                        yield number, json.loads(raw)
                    except ValueError:
                        continue
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None


def verify_ledger(path: str | Path) -> VerifyReport:
    """Check every line: well-formed, its own hash, its link to the line before, its sequence."""
    try:
        with Path(path).open("rb") as handle:
            return _verify_lines(handle)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None


def _verify_lines(handle: Iterator[bytes] | Any) -> VerifyReport:
    problems: list[LedgerProblem] = []
    previous, expected_seq, entries, torn = GENESIS, 1, 0, False
    for number, raw in enumerate(handle, start=1):
        problem = None
        if not raw.endswith(b"\n"):
            torn = True
            problem = "torn last line (a writer died mid-append; never acknowledged)"
        else:
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = None
            if not isinstance(entry, dict) or not isinstance(entry.get("entry_hash"), str):
                problem = "not a ledger entry (not JSON, or no entry_hash)"
            elif raw != canonical_json(entry) + b"\n":
                problem = "not in canonical form (the line was edited)"
            elif entry_hash(entry) != entry["entry_hash"]:
                problem = "entry_hash does not match the entry (content changed)"
            elif entry.get("previous_hash") != previous:
                problem = "previous_hash breaks the chain (a line was removed, added or moved)"
            elif entry.get("seq") != expected_seq:
                problem = f"seq {entry.get('seq')} where {expected_seq} was expected"
        if problem is not None:
            problems.append(LedgerProblem(number, problem))
            break
        previous, expected_seq, entries = entry["entry_hash"], expected_seq + 1, entries + 1
    return VerifyReport(entries, tuple(problems), torn)
