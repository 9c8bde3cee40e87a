"""C2SP signed notes and checkpoints: the spec's own example, Go's sumdb/note output, and an independent reader.

``_SpecReader`` below is written from c2sp.org/signed-note, tlog-checkpoint and
tlog-cosignature alone and imports nothing of kcp_opa: it parses the checkpoints this project
writes, recomputes the key IDs and verifies the Ed25519 signatures and cosignatures itself.
"""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kcp_opa.core.signing import Ed25519Key, generate_ed25519, hmac_key
from kcp_opa.trail.merkle import leaf_hash
from kcp_opa.trail.note import (
    ED25519_COSIGNATURE,
    Checkpoint,
    Note,
    NoteError,
    NoteSigner,
    NoteVerifier,
    open_checkpoint,
)

#: c2sp.org/signed-note, "Verifier keys", Example (C2SP/C2SP commit 5ba5ee8).
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3"
    "mFXmRKuwHjG1Yu72IneyaQM=\n"
)


class _SpecReader:
    """A checkpoint reader from the C2SP texts alone (no kcp_opa import)."""

    def __init__(self, vkey: str) -> None:
        name, key_hex, material = vkey.split("+", 2)
        raw = base64.b64decode(material)
        self.name, self.key_id, self.kind, self.public = name, bytes.fromhex(key_hex), raw[0], raw[1:]
        assert hashlib.sha256(name.encode() + b"\n" + raw[:1] + self.public).digest()[:4] == self.key_id

    @staticmethod
    def split(note: bytes) -> tuple[str, list[tuple[str, bytes]]]:
        text = note.decode("utf-8")
        body, _, signatures = text.rpartition("\n\n")
        lines = []
        for line in signatures.split("\n")[:-1]:
            assert line.startswith("\u2014 ")
            name, encoded = line[2:].split(" ")
            lines.append((name, base64.b64decode(encoded, validate=True)))
        return body + "\n", lines

    def verify(self, note: bytes) -> int | None:
        """True-ish: 0 for a verified log signature, the time for a cosignature; None when absent or bad."""
        body, lines = self.split(note)
        for name, raw in lines:
            if name != self.name or raw[:4] != self.key_id:
                continue
            signature, message, stamp = raw[4:], body.encode(), 0
            if self.kind == 0x04:
                (stamp,) = struct.unpack(">Q", raw[4:12])
                signature, message = raw[12:], f"cosignature/v1\ntime {stamp}\n".encode() + body.encode()
            try:
                Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
            except InvalidSignature:
                return None
            return stamp
        return None

    @staticmethod
    def checkpoint(note: bytes) -> tuple[str, int, bytes, list[str]]:
        body, _ = _SpecReader.split(note)
        origin, size, root, *rest = body.split("\n")[:-1]
        return origin, int(size), base64.b64decode(root), rest


def test_the_spec_example_note_verifies() -> None:
    verifier = NoteVerifier.from_vkey(SPEC_VKEY)
    assert verifier.vkey() == SPEC_VKEY
    note = Note.parse(SPEC_NOTE.encode())
    assert note.text == "This is an example message.\n" and note.encode() == SPEC_NOTE.encode()
    signature = verifier.signed(note)
    assert signature is not None and verifier.verifies(note.text, signature) == 0
    assert verifier.verifies("This is an example message!\n", signature) is None


def _log() -> NoteSigner:
    return NoteSigner("example.org/log", generate_ed25519("writer"))


def test_an_independent_reader_reads_our_checkpoints_and_cosignatures() -> None:
    log = _log()
    witness = NoteSigner("witness.example/w1", generate_ed25519("w1"), ED25519_COSIGNATURE)
    checkpoint = Checkpoint("example.org/log", 12, hashlib.sha256(b"root").digest(), ("extension line",))
    note = Note(checkpoint.text(), (log.sign(checkpoint.text()),))
    cosigned = note.with_signature(witness.sign(note.text, 1_700_000_000)).encode()

    assert _SpecReader.checkpoint(cosigned) == ("example.org/log", 12, checkpoint.root, ["extension line"])
    assert _SpecReader(log.verifier().vkey()).verify(cosigned) == 0
    assert _SpecReader(witness.verifier().vkey()).verify(cosigned) == 1_700_000_000
    public = log.key.public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)  # type: ignore[attr-defined]
    assert log.verifier().public == public
    opened = open_checkpoint(cosigned, log.verifier(), [witness.verifier()], 1)
    assert opened.checkpoint == checkpoint and opened.cosigned == {"witness.example/w1": 1_700_000_000}


def test_unknown_signatures_are_ignored_and_a_bad_known_one_rejects() -> None:
    log, stranger = _log(), NoteSigner("example.org/other", generate_ed25519("x"))
    text = Checkpoint("example.org/log", 1, bytes(32)).text()
    good = Note(text, (stranger.sign(text), log.sign(text)))
    assert open_checkpoint(good.encode(), log.verifier()).checkpoint.size == 1
    forged = log.sign(text.replace("\n1\n", "\n2\n"))
    with pytest.raises(NoteError, match="does not verify"):
        open_checkpoint(Note(text, (forged,)).encode(), log.verifier())
    with pytest.raises(NoteError, match="not signed by the log key"):
        open_checkpoint(Note(text, (stranger.sign(text),)).encode(), log.verifier())


@pytest.mark.parametrize(
    "data",
    [
        b"no blank line\n\xe2\x80\x94 a AAAAAAA=\n",
        "o\n1\nAAAA\n\n— a AAAAAAA=".encode(),  # no final newline
        "o\t\n\n— a AAAAAAAA\n".encode(),  # a tab
        "o\n\n— a !!!!\n".encode(),
        b"o\n\n- a AAAAAAAA\n",  # a hyphen, not an em dash
        "o\n\n— a+b AAAAAAAA\n".encode(),
        b"\xff\n\n",
    ],
)
def test_malformed_notes_are_refused(data: bytes) -> None:
    with pytest.raises(NoteError):
        Note.parse(data)


@pytest.mark.parametrize("text", ["o\n01\n" + "A" * 43 + "=\n", "o\n1\nAAAA\n", "o\n-1\n" + "A" * 43 + "=\n", "o\n1\n"])
def test_malformed_checkpoints_are_refused(text: str) -> None:
    with pytest.raises(NoteError):
        Checkpoint.from_text(text)


def test_only_ed25519_keys_sign_notes() -> None:
    with pytest.raises(NoteError, match="Ed25519"):
        NoteSigner("example.org/log", hmac_key("h", b"s" * 32)).verifier()


def test_a_vkey_whose_id_does_not_match_its_key_is_refused() -> None:
    name, _, material = SPEC_VKEY.split("+", 2)
    with pytest.raises(NoteError, match="key ID"):
        NoteVerifier.from_vkey(f"{name}+00000000+{material}")


#: golang.org/x/mod sumdb/note example_test.go (ExampleSign) and sumdb/tlog note_test.go
#: (TestFormatTree), commit fe2ec04: Go's signer key, text, and the exact note it writes.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_NOTE = (
    GO_TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotp"
    + "RZb6KE6RyyBwJnAM=\n"
)


def test_our_signature_is_byte_for_byte_gos_sumdb_note() -> None:
    """Ed25519 is deterministic: the same key and text must give Go's note exactly."""
    _, _, name, _, material = GO_SKEY.split("+", 4)
    private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(material)[1:])
    signer = NoteSigner(name, Ed25519Key("go", private_key=private, public_key=private.public_key()))
    assert signer.verifier().vkey() == GO_VKEY
    assert Note(GO_TEXT, (signer.sign(GO_TEXT),)).encode() == GO_NOTE.encode()


def test_a_checkpoint_body_is_gos_tree_format() -> None:
    golden = "go.sum database tree\n123456789012\nTszzRgjTG6xce+z2AG31kAXYKBgQVtCSCE40HmuwBb0=\n"
    assert Checkpoint("go.sum database tree", 123456789012, leaf_hash(b"hello world")).text() == golden
    assert Checkpoint.from_text(golden).size == 123456789012
