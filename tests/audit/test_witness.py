"""The witness's bookkeeping: its state file, what it cosigns again, and what it will not read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kcp_opa.audit.witness import Witness, WitnessRefusal
from kcp_opa.core.signing import generate_ed25519
from kcp_opa.trail.merkle import MerkleTree
from kcp_opa.trail.note import ED25519_COSIGNATURE, Checkpoint, Note, NoteError, NoteSigner, open_checkpoint

LOG = NoteSigner("example.org/log", generate_ed25519("writer"))
W1 = NoteSigner("witness.example/w1", generate_ed25519("w1"), ED25519_COSIGNATURE)
TREE = MerkleTree.of(f"entry {n}".encode() for n in range(20))


def _checkpoint(size: int, origin: str = "example.org/log", signer: NoteSigner = LOG) -> bytes:
    text = Checkpoint(origin, size, TREE.root(size)).text()
    return Note(text, (signer.sign(text),)).encode()


def _witness(tmp_path: Path) -> Witness:
    return Witness(tmp_path / "state" / "w1.json", W1, {LOG.name: LOG.verifier()})


def test_the_state_is_private_and_names_the_last_cosigned_tree(tmp_path: Path) -> None:
    witness = _witness(tmp_path)
    done = witness.cosign(_checkpoint(8), None, now=1_800_000_000)
    assert done.previous is None and done.size == 8
    state = tmp_path / "state" / "w1.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert Witness.read_state(state)[LOG.name].root == TREE.root(8)
    opened = open_checkpoint(done.note.encode(), LOG.verifier(), [W1.verifier()], 1)
    assert opened.cosigned == {W1.name: 1_800_000_000}


def test_the_same_tree_is_cosigned_again_with_a_fresh_time(tmp_path: Path) -> None:
    witness = _witness(tmp_path)
    witness.cosign(_checkpoint(8), None, now=1)
    again = witness.cosign(_checkpoint(8), None, now=2)
    assert again.previous is not None and again.previous.size == 8
    assert open_checkpoint(again.note.encode(), LOG.verifier(), [W1.verifier()], 1).cosigned == {W1.name: 2}


def test_a_refusal_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    witness = _witness(tmp_path)
    witness.cosign(_checkpoint(8), None)
    before = (tmp_path / "state" / "w1.json").read_bytes()
    with pytest.raises(WitnessRefusal, match="consistency proof from size 8 to 12"):
        witness.cosign(_checkpoint(12), None)
    with pytest.raises(WitnessRefusal, match="fork"):
        witness.cosign(_checkpoint(12), {"format": "kcp-opa-consistency-proof/1", "origin": LOG.name})
    assert (tmp_path / "state" / "w1.json").read_bytes() == before


def test_an_unknown_log_or_a_bad_log_signature_is_not_cosigned(tmp_path: Path) -> None:
    witness = _witness(tmp_path)
    with pytest.raises(WitnessRefusal, match="no log key is configured"):
        witness.cosign(_checkpoint(8, origin="example.org/other"), None)
    impostor = NoteSigner(LOG.name, generate_ed25519("impostor"))
    with pytest.raises(NoteError, match="not signed by the log key"):
        witness.cosign(_checkpoint(8, signer=impostor), None)
    assert not (tmp_path / "state" / "w1.json").exists()


def test_a_state_file_it_did_not_write_is_never_overwritten(tmp_path: Path) -> None:
    state = tmp_path / "state" / "w1.json"
    state.parent.mkdir()
    state.write_text('{"something": "else"}')
    with pytest.raises(NoteError, match="not a witness state file"):
        _witness(tmp_path).cosign(_checkpoint(8), None)
    assert state.read_text() == '{"something": "else"}'
