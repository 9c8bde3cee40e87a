"""Attacks on "receipt R was consumed at most once up to checkpoint C", checked without the log.

A tree checkpoint signs the consume index (each consumed receipt and the seqs of its intent
entries) beside the tree head. The auditor holds a consume proof, the checkpoint and the log
key, never the ledger (``audit verify-consumed``); a monitor holds the ledger too (``audit
verify-consumes``). The attacks: a second consume of the same receipt written into the ledger
(caught offline: the index lists both); the same consume hidden from the proof, or the index
leaf edited (caught offline); a second leaf for the receipt put beside the first in a
dishonestly signed index (caught offline: the leaves must be strictly sorted); a consume hidden
from a dishonestly signed index (not visible offline, which is what the auditor trusts the log
for: caught by the monitor); a proof against another checkpoint (caught offline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.consumeproofs import prove_consumed
from kcp_opa.trail.consumes import ConsumeIndex, consumed_document, index_leaf
from kcp_opa.trail.ledger import AuditLedger
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.merkle import MerkleTree
from kcp_opa.trail.note import Checkpoint, Note, NoteSigner
from kcp_opa.trail.proofs import inclusion_document

WRITER = generate_ed25519("consume-writer")


def _written(path: Path, twice: bool = False) -> Path:
    """Decisions, receipts consumed once (with outcomes) and, with ``twice``, rcpt_b consumed a second time."""
    ledger = AuditLedger(path, checkpoint_key=WRITER)
    for n in range(12):
        ledger.append({"type": "decision", "decision_id": f"dec_{n}"})
        if n % 3 == 0:
            receipt = f"rcpt_{'abcd'[n // 3]}"
            ledger.append({"type": "receipt", "decision_id": f"dec_{n}", "receipt_id": receipt})
            ledger.append({"type": "intent", "decision_id": f"dec_{n}", "receipt_id": receipt, "idempotency_key": n})
            ledger.append({"type": "execution", "receipt_id": receipt, "outcome": "succeeded"})
    if twice:  # the same receipt consumed again: the side effect would run twice
        ledger.append({"type": "intent", "decision_id": "dec_3", "receipt_id": "rcpt_b", "idempotency_key": 99})
        ledger.append({"type": "execution", "receipt_id": "rcpt_b", "outcome": "succeeded"})
    return path


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    ring = tmp_path / "writer.json"
    ring.write_text(json.dumps(Keyring({WRITER.kid: WRITER}, WRITER.kid).to_file_dict(include_private=True)))
    ring.chmod(0o600)
    public = tmp_path / "writer-public.json"
    public.write_text(json.dumps(Keyring({WRITER.kid: WRITER}).public().to_file_dict(include_private=False)))
    return {"ring": ring, "public": public}


def _checkpoint(ledger: Path, keys: dict[str, Any], name: str = "checkpoint.note") -> tuple[Path, str]:
    note = ledger.with_name(name)
    made = run_cli("audit", "tree-checkpoint", str(ledger), "--keyring", str(keys["ring"]), "-o", str(note))
    assert made.returncode == 0, made.stderr
    vkey = run_cli("audit", "tree-key", str(ledger), "--keyring", str(keys["ring"]))
    return note, vkey.stdout.strip()


def _prove(ledger: Path, receipt: str, note: Path) -> dict[str, Any]:
    made = run_cli("audit", "prove-consumed", str(ledger), receipt, "--checkpoint", str(note))
    assert made.returncode == 0, made.stderr
    proof: dict[str, Any] = json.loads(made.stdout)
    return proof


def _verify(tmp: Path, proof: dict[str, Any], receipt: str, note: Path, vkey: str, keys: dict[str, Any]) -> Any:
    path = tmp / "consume-proof.json"
    path.write_text(json.dumps(proof))
    writer = ["--keyring", str(keys["public"]), "--writer", WRITER.kid]
    where = ["--checkpoint", str(note), "--log-key", vkey]
    return run_cli("audit", "verify-consumed", str(path), receipt, *where, *writer)


def test_a_receipt_consumed_once_is_proven_with_its_outcome(tmp_path: Path, keys: dict[str, Any]) -> None:
    ledger = _written(tmp_path / "ledger.jsonl")
    note, vkey = _checkpoint(ledger, keys)
    for receipt in ("rcpt_a", "rcpt_b", "rcpt_d"):
        done = _verify(tmp_path, _prove(ledger, receipt, note), receipt, note, vkey, keys)
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)
        assert shown["consumed"] == 1 and shown["outcomes"][0]["outcome"] == "succeeded"
    never = _verify(tmp_path, _prove(ledger, "rcpt_zzz", note), "rcpt_zzz", note, vkey, keys)
    assert never.returncode == 0 and json.loads(never.stdout)["consumed"] == 0
    monitor = run_cli("audit", "verify-consumes", str(ledger), "--checkpoint", str(note), "--log-key", vkey)
    assert monitor.returncode == 0 and json.loads(monitor.stdout)["receipts_consumed"] == 4


def test_a_second_consume_of_the_same_receipt_is_caught_offline(tmp_path: Path, keys: dict[str, Any]) -> None:
    ledger = _written(tmp_path / "ledger.jsonl", twice=True)
    note, vkey = _checkpoint(ledger, keys)
    proof = _prove(ledger, "rcpt_b", note)
    done = _verify(tmp_path, proof, "rcpt_b", note, vkey, keys)
    assert done.returncode == 1 and "receipt rcpt_b was consumed 2 times" in done.stderr, done.stderr
    # hiding the second consume in the proof: the index leaf still names both
    hidden = json.loads(json.dumps(proof))
    second = max(p["seq"] for p in hidden["entries"] if p["entry"]["type"] == "intent")
    hidden["entries"] = [p for p in hidden["entries"] if p["seq"] != second]
    done = _verify(tmp_path, hidden, "rcpt_b", note, vkey, keys)
    assert done.returncode == 1 and "the index names consumes at seqs" in done.stderr, done.stderr
    # editing the index leaf to name one consume: it is no longer the signed index's leaf
    for item in hidden["index"]:
        if item["leaf"]["receipt_id"] == "rcpt_b":
            item["leaf"]["seqs"] = item["leaf"]["seqs"][:1]
    done = _verify(tmp_path, hidden, "rcpt_b", note, vkey, keys)
    assert done.returncode == 1 and "is not in the consume index the checkpoint signs" in done.stderr, done.stderr
    # leaving out a neighbour: another leaf for rcpt_b could stand beside it
    _written(tmp_path / "once.jsonl")
    once_note, once_key = _checkpoint(tmp_path / "once.jsonl", keys, "once.note")
    alone = _prove(tmp_path / "once.jsonl", "rcpt_b", once_note)
    alone["index"] = [item for item in alone["index"] if item["leaf"]["receipt_id"] == "rcpt_b"]
    done = _verify(tmp_path, alone, "rcpt_b", once_note, once_key, keys)
    assert done.returncode == 1 and "do not close around rcpt_b" in done.stderr, done.stderr
    monitor = run_cli("audit", "verify-consumes", str(ledger), "--checkpoint", str(note), "--log-key", vkey)
    assert monitor.returncode == 1 and "rcpt_b (seqs" in monitor.stderr, monitor.stderr


def _dishonest(ledger: Path, consumes: dict[str, list[int]]) -> tuple[LedgerTree, Path]:
    """A checkpoint the log key signs over the true tree head but a consume index of the signer's choosing."""
    tree = LedgerTree.read(ledger, receipt="rcpt_b")
    tree.consumes = consumes
    note = ledger.with_name("dishonest.note")
    note.write_bytes(tree.signed_checkpoint(NoteSigner(tree.origin, WRITER)).encode())
    return tree, note


def test_a_duplicate_leaf_in_a_signed_index_is_caught_offline(tmp_path: Path, keys: dict[str, Any]) -> None:
    """The signer splits rcpt_b's two consumes into two leaves of its index; the neighbourhood shows both."""
    ledger = _written(tmp_path / "ledger.jsonl", twice=True)
    tree = LedgerTree.read(ledger, receipt="rcpt_b")
    first, second = tree.consumes["rcpt_b"]
    index = ConsumeIndex(tree.consumes, tree.tree.size)
    at = index.receipts.index("rcpt_b")
    index.receipts[at : at + 1] = ["rcpt_b", "rcpt_b"]
    index.leaves[at : at + 1] = [index_leaf("rcpt_b", [first]), index_leaf("rcpt_b", [second])]
    index.tree = MerkleTree.of(index.leaves)
    head = tree.checkpoint()
    signed = Checkpoint(head.origin, head.size, head.root, (index.extension(),))
    note = tmp_path / "dishonest.note"
    note.write_bytes(Note(signed.text(), (NoteSigner(tree.origin, WRITER).sign(signed.text()),)).encode())
    entries = [inclusion_document(tree, seq, signed) for seq in sorted(tree.kept)]
    shown = [e for e in entries if e["entry"]["type"] != "intent" or e["seq"] == first]
    proof = consumed_document(head.origin, head.size, "rcpt_b", index, shown)
    _, vkey = _checkpoint(ledger, keys)
    done = _verify(tmp_path, proof, "rcpt_b", note, vkey, keys)
    assert done.returncode == 1 and "not strictly sorted" in done.stderr, done.stderr


def test_a_consume_hidden_from_a_signed_index_is_caught_by_the_monitor(tmp_path: Path, keys: dict[str, Any]) -> None:
    """What an auditor without the log trusts the log for: the index is built from every entry."""
    ledger = _written(tmp_path / "ledger.jsonl", twice=True)
    honest = LedgerTree.read(ledger, receipt="rcpt_b")
    first, second = honest.consumes["rcpt_b"]
    tree, note = _dishonest(ledger, {**honest.consumes, "rcpt_b": [first]})
    tree.kept = {seq: line for seq, line in tree.kept.items() if seq != second}
    proof = prove_consumed(tree, "rcpt_b", tree.checkpoint())
    _, vkey = _checkpoint(ledger, keys)
    offline = _verify(tmp_path, proof, "rcpt_b", note, vkey, keys)
    assert offline.returncode == 0  # the signed index is the log's claim: offline, it is believed
    monitor = run_cli("audit", "verify-consumes", str(ledger), "--checkpoint", str(note), "--log-key", vkey)
    assert monitor.returncode == 1 and "a consume was hidden, added or changed" in monitor.stderr, monitor.stderr
    refused = run_cli("audit", "prove-consumed", str(ledger), "rcpt_b", "--checkpoint", str(note))
    assert refused.returncode == 1 and "not proving against it" in refused.stderr


def test_a_proof_against_another_checkpoint_fails(tmp_path: Path, keys: dict[str, Any]) -> None:
    ledger = _written(tmp_path / "ledger.jsonl")
    note, vkey = _checkpoint(ledger, keys)
    proof = _prove(ledger, "rcpt_a", note)
    AuditLedger(ledger, checkpoint_key=WRITER).append({"type": "decision", "decision_id": "dec_later"})
    later, _ = _checkpoint(ledger, keys, "later.note")
    done = _verify(tmp_path, proof, "rcpt_a", later, vkey, keys)
    assert done.returncode == 1 and "not for the checkpoint's tree" in done.stderr, done.stderr
    done = _verify(tmp_path, proof, "rcpt_b", note, vkey, keys)  # another receipt's proof
    assert done.returncode == 1 and "the proof is for receipt 'rcpt_a'" in done.stderr, done.stderr
