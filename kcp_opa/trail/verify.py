"""Verify a ledger file: every line, the chain, each entry's writer signature, and anchors.

An anchor is (seq, entry_hash) from a signed checkpoint or from ``--expect-head``: the entry
with that seq must exist and carry that hash. A cut at an entry boundary, a re-chained
rewritten tail or a regenerated file all pass the chain check and fail this one.

The chain has no secret, so anyone can append a validly chained entry. A ledger whose header
names a writer key (``entry_auth {alg, kid}``) carries ``entry_signature`` on every entry: the
writer's signature over the entry (its seq and previous_hash included) without ``entry_hash``,
itself covered by ``entry_hash``. With the writer's keyring, an entry appended or changed
without the key is a *foreign entry*, reported with its line and seq; so is an entry signed by
any key but the one the header names (its kid and alg must be the header's).

Whether a ledger is bound is the auditor's expectation, never the file's say: the binding is
one header field, so whoever rewrites the entries can delete it too. With a keyring, a ledger
whose header names no writer fails (``unbound``) unless the caller allows it; ``writer`` names
the kid the header must declare.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeGuard

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Keyring, document_verifies
from kcp_opa.trail.frontier import TreeState, encode_root

GENESIS = "sha256:" + "0" * 64
HEADER_KEY = "kcp_opa_ledger"
AUTH_KEY = "entry_auth"
ENTRY_SIGNATURE = "entry_signature"


def entry_hash(entry: JsonObject) -> str:
    return canonical_hash({k: v for k, v in entry.items() if k != "entry_hash"})


def is_header(line: object) -> TypeGuard[dict[str, object]]:
    """The first line of a ledger written by this version: it identifies the file."""
    return (
        isinstance(line, dict)
        and line.get(HEADER_KEY) == 1
        and isinstance(line.get("ledger_id"), str)
        and "entry_hash" not in line
    )


def declared_writer(header: object) -> JsonObject | None:
    """The header's ``entry_auth {alg, kid}``: every entry of this ledger is signed by its writer."""
    auth = header.get(AUTH_KEY) if isinstance(header, dict) else None
    return auth if isinstance(auth, Mapping) else None


def binding_problem(declared: JsonObject | None, writer: str | None, alg: str | None = None) -> str | None:
    """Why the header does not bind the ledger to ``writer`` (any declared writer when None), or None.

    The one rule for "this is that writer's ledger": the auditor's verify, ``audit checkpoint``
    and the keyed writer itself all ask it.
    """
    if declared is None:
        return (
            "unbound: the header names no writer key (not started by a writer key, or its entry_auth or "
            "header was removed), so no entry can be authenticated"
        )
    kid, declared_alg = declared.get("kid"), declared.get("alg")
    if not isinstance(kid, str) or not isinstance(declared_alg, str):
        return "the header's entry_auth is not {alg, kid}: no entry can be authenticated"
    if writer is not None and kid != writer:
        return f"the header names writer {kid!r}, not {writer!r}"
    if alg is not None and declared_alg != alg:
        return f"the header names writer {kid!r} for {declared_alg}, not {alg}"
    return None


def foreign_entry(entry: JsonObject, declared: JsonObject | None, keyring: Keyring | None) -> str | None:
    """Why ``entry`` was not written by a holder of the writer's key, or None.

    Without ``keyring`` only the signature's presence is checked (its value cannot be).
    """
    if declared is None:
        return None
    seq = entry.get("seq")
    signature = entry.get(ENTRY_SIGNATURE)
    if not isinstance(signature, Mapping) or not all(
        isinstance(signature.get(k), str) for k in ("alg", "kid", "value")
    ):
        return f"foreign entry: seq {seq} carries no writer signature (appended without the writer's key)"
    kid, alg = signature["kid"], signature["alg"]
    if kid != declared.get("kid") or alg != declared.get("alg"):
        return (
            f"foreign entry: seq {seq} is signed by {kid!r} ({alg}), not by the header's writer "
            f"{declared.get('kid')!r} ({declared.get('alg')})"
        )
    if keyring is None:
        return None
    key = keyring.verifier(kid)
    if key is None or key.alg != alg:
        return f"foreign entry: seq {seq} is signed by {kid!r}, not a trusted writer key"
    body = {k: v for k, v in entry.items() if k != "entry_hash"}
    if not document_verifies(body, key, ENTRY_SIGNATURE):
        return f"foreign entry: seq {seq}: its writer signature does not verify (written without the writer's key)"
    return None


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
    writer: str | None = None
    authenticated: bool = False
    tree_root: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def head(self) -> str:
        return f"{self.head_seq}:{self.head_hash}"


def verify_ledger(
    path: str | Path,
    *,
    anchors: Iterable[tuple[int, str]] = (),
    ledger_id: str | None = None,
    keyring: Keyring | None = None,
    writer: str | None = None,
    allow_unbound: bool = False,
    tree_roots: Mapping[int, str] | None = None,
) -> VerifyReport:
    """Check every line, its hash, link, seq and writer signature; then that every anchor is in the chain.

    ``ledger_id`` (from a checkpoint) must match the header's. A file without entries is a
    problem (there is nothing to trust), not an empty success. ``keyring`` holds the writer's
    verification keys; without it the writer signatures of an authenticated ledger are not
    checked (``authenticated`` is then False). With ``keyring`` or ``writer`` (the kid the auditor
    expects, held apart from the file) the header must name a writer, that one if given: an
    unbound ledger fails unless ``allow_unbound`` (then only the chain is checked). The Merkle
    tree over the entries is recomputed from scratch as they are read (``tree_root``, base64):
    each of ``tree_roots`` (seq -> root, from checkpoints or the writer's kept state) must be
    its root after that seq.
    """
    bound = writer is not None or (keyring is not None and not allow_unbound)
    try:
        with Path(path).open("rb") as handle:
            return _verify_lines(handle, dict(anchors), ledger_id, keyring, writer, bound, dict(tree_roots or {}))
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None


def _verify_lines(
    handle: BinaryIO,
    anchors: dict[int, str],
    expected_id: str | None,
    keyring: Keyring | None,
    writer: str | None,
    bound: bool,
    tree_roots: dict[int, str],
) -> VerifyReport:
    problems: list[LedgerProblem] = []
    tree = TreeState.empty(GENESIS)
    previous, expected_seq, entries, torn = GENESIS, 1, 0, False
    ledger_id: str | None = None
    declared: JsonObject | None = None
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
                headed, ledger_id, previous = True, str(entry["ledger_id"]), canonical_hash(entry)
                declared = declared_writer(entry)
                continue
            problem = _line_problem(raw, entry, previous, expected_seq)
            if problem is None and anchors.get(expected_seq, entry["entry_hash"]) != entry["entry_hash"]:
                problem = f"seq {expected_seq} differs from the anchored checkpoint (rewritten or regenerated)"
            if problem is None:
                problem = foreign_entry(entry, declared, keyring)
            if problem is None:
                tree = tree.extended(raw[:-1], entry["entry_hash"])
                if tree_roots.get(tree.seq, encode_root(tree.root)) != encode_root(tree.root):
                    problem = f"the Merkle tree of seq 1..{tree.seq} recomputed is not the root kept for it"
        if problem is not None:
            problems.append(LedgerProblem(number, problem))
            break
        previous, expected_seq, entries = entry["entry_hash"], expected_seq + 1, entries + 1
    if not problems:
        problems.extend(_end_problems(number, entries, {**tree_roots, **anchors}, ledger_id, expected_id, headed))
    unbound = binding_problem(declared, writer) if bound else None
    if unbound is not None:
        problems.insert(0, LedgerProblem(1, unbound))
    writer = str(declared.get("kid")) if declared is not None else None
    authenticated = declared is not None and keyring is not None and not problems
    return VerifyReport(
        entries,
        tuple(problems),
        torn,
        entries,
        previous,
        ledger_id,
        headed,
        tuple(anchors.items()),
        writer,
        authenticated,
        encode_root(tree.root) if entries else None,
    )


def _line_problem(raw: bytes, entry: object, previous: str, expected_seq: int) -> str | None:
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
