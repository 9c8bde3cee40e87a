"""A case that holds only its decision: each entry with an RFC 9162 inclusion proof to a C2SP checkpoint.

A chain case ships the ledger from seq 1 (every other decision's archived inputs with it). A
proof case (``audit case --proofs``) writes ``entries/<seq>.json`` and ``proofs/<seq>.json`` for
the decision's own entries only, and ``checkpoint.note``: the signed tree checkpoint (with any
witness cosignatures it carries) they are proven against, and ``keys/log.vkey``, the log's
verifier key. Its size is the decision's, whatever the ledger's.

What proofs show and what they do not: each entry is, byte for byte, the entry at its seq in
the tree the log (and its witnesses) signed; an entry edited, moved, or proven against another
tree size fails. That the case holds *every* entry of the decision is not shown (that needs the
prefix): verify says so on the ``entries`` line rather than "none left out".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kcp_opa.audit.auditor import entry_decision_id
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.signing import Keyring
from kcp_opa.trail.ledger import read_entries
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.note import (
    ED25519_COSIGNATURE,
    ED25519_NOTE,
    Checkpoint,
    Note,
    NoteError,
    NoteSigner,
    NoteVerifier,
    open_checkpoint,
)
from kcp_opa.trail.proofs import inclusion_document, verify_inclusion_document

TREE_CHECKPOINT = "checkpoint.note"
LOG_KEY = "keys/log.vkey"
ANCHOR = "tree"  # case.json's "anchor" in a proof case
_Entry = TypeVar("_Entry", bound=JsonObject)


def entry_file(seq: int) -> str:
    return f"entries/{seq:06d}.json"


def proof_file(seq: int) -> str:
    return f"proofs/{seq:06d}.json"


def is_case_entry(entry: JsonObject, decision_id: str, receipt_ids: set[str]) -> bool:
    if entry_decision_id(entry) == decision_id:
        return True
    return entry.get("type") in {"intent", "execution", "failure"} and entry.get("receipt_id") in receipt_ids


def of_decision(entries: Sequence[_Entry], decision_id: str) -> list[_Entry]:
    """A decision's entries: its own, the receipts issued on it, and their intents, executions, failures."""
    receipts = {
        str(e["receipt_id"])
        for e in entries
        if e.get("type") == "receipt" and entry_decision_id(e) == decision_id and e.get("receipt_id")
    }
    return [e for e in entries if is_case_entry(e, decision_id, receipts)]


def decision_seqs(ledger: Path, decision_id: str) -> list[int]:
    """The seqs of a decision's entries (``of_decision``)."""
    return [int(e["seq"]) for e in of_decision([entry for _, entry in read_entries(ledger)], decision_id)]


def pretty(value: object) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def proof_files(
    ledger: Path,
    seqs: Sequence[int],
    keyring: Keyring | None,
    tree_checkpoint: Path | None,
    log_key: str | None,
) -> tuple[dict[str, bytes], Checkpoint]:
    """The entry, proof, checkpoint and log-key files of a proof case, and the checkpoint they prove to.

    The checkpoint is ``tree_checkpoint`` (as held: cosignatures kept), verified under
    ``log_key``; or, without it, one of the whole tree signed now by ``keyring``'s signing key."""
    tree = LedgerTree.read(ledger, keep=frozenset(seqs))
    if tree_checkpoint is not None:
        if log_key is None:
            raise LedgerError("--tree-checkpoint needs --log-key VKEY (from `audit tree-key`) to verify it")
        try:
            log = _vkey(log_key, ED25519_NOTE, "--log-key")
        except (OSError, ValueError) as exc:
            raise LedgerError(f"--log-key: {exc}") from None
        data = tree_checkpoint.read_bytes()
        try:
            checkpoint = open_checkpoint(data, log).checkpoint
        except NoteError as exc:
            raise LedgerError(f"{tree_checkpoint}: {exc}") from None
        note = Note.parse(data)
    else:
        if keyring is None:
            raise LedgerError("nothing anchors the proofs: add --keyring RING (to sign the tree) or --tree-checkpoint")
        signer = NoteSigner(tree.origin, keyring.signer())
        note, log = tree.signed_checkpoint(signer), signer.verifier()
        checkpoint = tree.checkpoint()
    if checkpoint.size < max(seqs):
        later = f"the decision's last entry is seq {max(seqs)}; give a newer --tree-checkpoint"
        raise LedgerError(f"the tree checkpoint covers {checkpoint.size} entries: {later}")
    files = {TREE_CHECKPOINT: note.encode(), LOG_KEY: (log.vkey() + "\n").encode("ascii")}
    for seq in seqs:
        document = inclusion_document(tree, seq, checkpoint)
        files[entry_file(seq)] = pretty(document["entry"])
        files[proof_file(seq)] = pretty(document)
    return files, checkpoint


class ProofCase(Protocol):
    """What the proof checks read of a case (casecheck's reader; a Protocol keeps the import one-way)."""

    root: Path
    document: dict[str, Any]
    decision_id: str
    tree_pins: TreePins

    def json(self, name: str) -> Any: ...


class TreePins:
    """The log key and witness keys the auditor holds apart from the case, and how many must cosign."""

    def __init__(self, log_key: str | None = None, witness_keys: Sequence[str] = (), witnesses: int = 0) -> None:
        self.log_key, self.witness_keys, self.witnesses = log_key, tuple(witness_keys), witnesses


def _vkey(value: str, kind: int, what: str) -> NoteVerifier:
    """A verifier key given as ``NAME+ID+KEY`` or as a file holding one, of the ``kind`` wanted."""
    text = Path(value).read_text(encoding="utf-8") if "+" not in value or Path(value).is_file() else value
    verifier = NoteVerifier.from_vkey(text)
    if verifier.kind != kind:
        raise ValueError(f"{what} {verifier.name} is not a {'log' if kind == ED25519_NOTE else 'witness'} key")
    return verifier


def tree_checkpoint(case: ProofCase) -> tuple[bool | None, str]:
    """The checkpoint's log signature (pinned or the case's key) and the witness cosignatures required."""
    pins = case.tree_pins
    log = _vkey(pins.log_key or str(case.root / LOG_KEY), ED25519_NOTE, "the log key")
    witnesses = [_vkey(k, ED25519_COSIGNATURE, "--witness-key") for k in pins.witness_keys]
    if pins.witnesses > len(witnesses):
        raise ValueError(f"--witnesses {pins.witnesses} needs at least {pins.witnesses} --witness-key")
    verified = open_checkpoint((case.root / TREE_CHECKPOINT).read_bytes(), log, witnesses, pins.witnesses)
    checkpoint = verified.checkpoint
    ledger_id = case.document.get("ledger_id")
    if case.document.get("checkpoint_seq") != checkpoint.size:
        raise ValueError(f"case.json names tree size {case.document.get('checkpoint_seq')}, not {checkpoint.size}")
    if ledger_id is not None and checkpoint.origin != f"kcp-opa/{ledger_id}":
        raise ValueError(f"the checkpoint is of {checkpoint.origin}, not of ledger {ledger_id}")
    cosigned = f"; cosigned by {', '.join(sorted(verified.cosigned))}" if verified.cosigned else ""
    said = f"tree of {checkpoint.size} entries signed by {log.name}{cosigned}"
    if pins.log_key is None:
        return None, f"not pinned: {said}, under the case's own log key (--log-key to prove it)"
    return True, f"{said}, verified with the pinned log key"


def checkpoint_of(case: ProofCase) -> Checkpoint:
    return Checkpoint.from_text(Note.parse((case.root / TREE_CHECKPOINT).read_bytes()).text)


def proven_entries(case: ProofCase) -> list[dict[str, Any]]:
    """The case's entries in seq order, each once its inclusion proof verifies against the checkpoint.

    The directories must hold exactly the seqs case.json lists: an unlisted file is refused."""
    seqs = [int(s) for s in case.document["seqs"]]
    for folder, name in (("entries", entry_file), ("proofs", proof_file)):
        held = {p.name for p in (case.root / folder).iterdir()} if (case.root / folder).is_dir() else set()
        listed = {name(s).split("/")[1] for s in seqs}
        if held != listed:
            raise ValueError(f"{folder}/ holds {sorted(held - listed) or 'none'} beyond, or lacks, the listed seqs")
    checkpoint, entries = checkpoint_of(case), []
    for seq in seqs:
        try:
            entry = dict(verify_inclusion_document(case.json(proof_file(seq)), checkpoint))
        except NoteError as exc:
            raise ValueError(f"seq {seq}: {exc}") from None
        if entry.get("seq") != seq or canonical_json(case.json(entry_file(seq))) != canonical_json(entry):
            raise ValueError(f"{entry_file(seq)} is not the entry its proof proves at seq {seq}")
        entries.append(entry)
    return entries


def proofs(case: ProofCase, belongs: Callable[[JsonObject, str, set[str]], bool]) -> str:
    """Each entry proven, and each one of this decision (``belongs(entry, decision_id, receipt_ids)``)."""
    entries = proven_entries(case)
    receipts = {
        str(e["receipt_id"])
        for e in entries
        if e.get("type") == "receipt" and e.get("decision_id") == case.decision_id and e.get("receipt_id")
    }
    for entry in entries:
        if not belongs(entry, case.decision_id, receipts):
            raise ValueError(f"seq {entry['seq']} is not an entry of decision {case.decision_id}: another's data")
    size = checkpoint_of(case).size
    return f"{len(entries)} entries proven by inclusion in the tree of {size}; every one is of {case.decision_id}"


def entries_line(case: ProofCase) -> tuple[bool | None, str]:
    """A proof case cannot show that no entry was left out: said, never passed as "none left out"."""
    return None, (
        f"{len(case.document['seqs'])} entries listed; a proof case does not show that none was left out"
        " (a chain case does: gather without --proofs)"
    )
