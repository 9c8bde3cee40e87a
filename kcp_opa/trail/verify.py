"""Verify a ledger file: every line, the chain, and (optionally) anchors the chain must contain.

An anchor is (seq, entry_hash) from a signed checkpoint or from ``--expect-head``: the entry
with that seq must exist and carry that hash. A cut at an entry boundary, a re-chained
rewritten tail or a regenerated file all pass the chain check and fail this one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError

GENESIS = "sha256:" + "0" * 64
HEADER_KEY = "kcp_opa_ledger"


def entry_hash(entry: Mapping[str, Any]) -> str:
    return canonical_hash({k: v for k, v in entry.items() if k != "entry_hash"})


def is_header(line: Any) -> bool:
    """The first line of a ledger written by this version: it identifies the file."""
    return (
        isinstance(line, dict)
        and line.get(HEADER_KEY) == 1
        and isinstance(line.get("ledger_id"), str)
        and "entry_hash" not in line
    )


@dataclass(frozen=True)
class LedgerProblem:
    line: int
    message: str


@dataclass(frozen=True)
class VerifyReport:
    entries: int
    problems: tuple[LedgerProblem, ...]
    torn_tail: bool
    head_seq: int = 0
    head_hash: str = GENESIS
    ledger_id: str | None = None
    headed: bool = False
    anchors: tuple[tuple[int, str], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def head(self) -> str:
        return f"{self.head_seq}:{self.head_hash}"


def verify_ledger(
    path: str | Path, *, anchors: Iterable[tuple[int, str]] = (), ledger_id: str | None = None
) -> VerifyReport:
    """Check every line, its hash, link and seq; then that every anchor is in the chain.

    ``ledger_id`` (from a checkpoint) must match the header's. A file without entries is a
    problem (there is nothing to trust), not an empty success.
    """
    try:
        with Path(path).open("rb") as handle:
            return _verify_lines(handle, dict(anchors), ledger_id)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None


def _verify_lines(handle: BinaryIO, anchors: dict[int, str], expected_id: str | None) -> VerifyReport:
    problems: list[LedgerProblem] = []
    previous, expected_seq, entries, torn = GENESIS, 1, 0, False
    ledger_id: str | None = None
    headed = False
    number = 0
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
            if number == 1 and is_header(entry) and raw == canonical_json(entry) + b"\n":
                headed, ledger_id, previous = True, entry["ledger_id"], canonical_hash(entry)
                continue
            problem = _line_problem(raw, entry, previous, expected_seq)
            if problem is None and anchors.get(expected_seq, entry["entry_hash"]) != entry["entry_hash"]:
                problem = f"seq {expected_seq} differs from the anchored checkpoint (rewritten or regenerated)"
        if problem is not None:
            problems.append(LedgerProblem(number, problem))
            break
        previous, expected_seq, entries = entry["entry_hash"], expected_seq + 1, entries + 1
    if not problems:
        problems.extend(_end_problems(number, entries, anchors, ledger_id, expected_id, headed))
    return VerifyReport(entries, tuple(problems), torn, entries, previous, ledger_id, headed, tuple(anchors.items()))


def _line_problem(raw: bytes, entry: Any, previous: str, expected_seq: int) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("entry_hash"), str):
        return "not a ledger entry (not JSON, or no entry_hash)"
    if raw != canonical_json(entry) + b"\n":
        return "not in canonical form (the line was edited)"
    if entry_hash(entry) != entry["entry_hash"]:
        return "entry_hash does not match the entry (content changed)"
    if entry.get("previous_hash") != previous:
        return "previous_hash breaks the chain (a line was removed, added or moved)"
    if entry.get("seq") != expected_seq:
        return f"seq {entry.get('seq')} where {expected_seq} was expected"
    return None


def _end_problems(
    lines: int, entries: int, anchors: dict[int, str], ledger_id: str | None, expected_id: str | None, headed: bool
) -> list[LedgerProblem]:
    out = []
    if entries == 0:
        out.append(LedgerProblem(lines, "no entries: an empty ledger proves nothing"))
    beyond = [seq for seq in anchors if seq > entries]
    if beyond:
        out.append(
            LedgerProblem(lines, f"truncated: the chain ends at seq {entries} but seq {max(beyond)} was anchored")
        )
    if expected_id is not None and expected_id != ledger_id:
        found = ledger_id if headed else "none (headerless)"
        out.append(LedgerProblem(1, f"ledger_id {found} is not the checkpoint's {expected_id} (another file)"))
    return out
