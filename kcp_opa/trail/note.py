"""C2SP signed notes, tree checkpoints and witness cosignatures (c2sp.org/signed-note,
tlog-checkpoint, tlog-cosignature), so Go's ``sumdb/note`` and the transparency-dev tools read them.

A note is text ending in a newline, a blank line, then lines ``— <key name> base64(key ID ||
signature)``. The key ID is ``SHA-256(name || 0x0A || type || public key)[:4]``: type 0x01 for
an Ed25519 signature over the text, 0x04 for a timestamped Ed25519 cosignature over
``cosignature/v1\\ntime <t>\\n`` and the text. A checkpoint's text is the log's origin, the tree
size, the base64 root hash and optional extension lines. Keys travel as verifier keys
(``name+hex(key ID)+base64(type || public key)``). Signing goes through the project's
:class:`~kcp_opa.core.keys.Key` (memory or HSM), Ed25519 only: the format has no HMAC.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.keys import ED25519, ED25519_SIGNATURE_BYTES, Key, strict_b64url
from kcp_opa.trail.merkle import HASH_BYTES

ED25519_NOTE = 0x01
ED25519_COSIGNATURE = 0x04
COSIGNATURE_HEADER = "cosignature/v1\n"
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
_DASH = "\u2014 "
_NAME = re.compile(r"[^\s+]+")
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


class NoteError(KcpOpaError):
    """A note, checkpoint, key or signature that is malformed or does not verify (one line: what to fix)."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{what} is not standard base64") from None
    if _b64(raw) != text:
        raise NoteError(f"{what} is not in canonical base64")
    return raw


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")
    return name


def key_id(name: str, kind: int, public: bytes) -> bytes:
    """The 4-byte key ID of c2sp.org/signed-note: SHA-256(name || 0x0A || type || public key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([kind]) + public).digest()[:4]


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the key's name, its 4-byte ID, and the signature bytes after it."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        return f"{_DASH}{self.name} {_b64(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """A signed note: ``text`` (ending in a newline) and its signature lines, in order."""

    text: str
    signatures: tuple[NoteSignature, ...]

    @classmethod
    def parse(cls, data: bytes) -> Note:
        """Strict: UTF-8, no control characters but newline, text split from signatures at the last blank line."""
        if len(data) > MAX_NOTE_BYTES:
            raise NoteError(f"a note is at most {MAX_NOTE_BYTES} bytes")
        try:
            whole = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("a note is UTF-8 text") from None
        if _CONTROL.search(whole):
            raise NoteError("a note holds no control characters but newlines (no tabs, no CR)")
        split = whole.rfind("\n\n")
        if split < 0 or not whole.endswith("\n"):
            raise NoteError("not a signed note: text, a blank line, then signature lines each ending in a newline")
        text, lines = whole[: split + 1], whole[split + 2 :].split("\n")[:-1]
        if not lines:
            raise NoteError("the note has no signature lines")
        if len(lines) > MAX_SIGNATURES:
            raise NoteError(f"the note has {len(lines)} signatures; at most {MAX_SIGNATURES} are read")
        return cls(text, tuple(_signature_line(line) for line in lines))

    def encode(self) -> bytes:
        return (self.text + "\n" + "".join(s.line() for s in self.signatures)).encode("utf-8")

    def with_signature(self, signature: NoteSignature) -> Note:
        """The note with one more signature (one replaced when the same key signed before)."""
        kept = tuple(s for s in self.signatures if (s.name, s.key_id) != (signature.name, signature.key_id))
        return Note(self.text, (*kept, signature))


def _signature_line(line: str) -> NoteSignature:
    if not line.startswith(_DASH):
        raise NoteError(f"signature line {line[:40]!r} does not start with an em dash and a space")
    name, space, encoded = line[len(_DASH) :].partition(" ")
    if not space or " " in encoded:
        raise NoteError(f"signature line {line[:40]!r} is not '— <name> <base64>'")
    raw = _unb64(encoded, f"the signature of {name[:40]!r}")
    if len(raw) < 5:
        raise NoteError(f"the signature of {name[:40]!r} is shorter than a key ID and a signature")
    return NoteSignature(_check_name(name), raw[:4], raw[4:])


@dataclass(frozen=True)
class Checkpoint:
    """A tree head as c2sp.org/tlog-checkpoint writes it: origin, size, root hash, extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or _CONTROL.search(self.origin):
            raise NoteError("a checkpoint origin is one non-empty line")
        if self.size < 0 or len(self.root) != HASH_BYTES:
            raise NoteError("a checkpoint holds a tree size >= 0 and a 32-byte root hash")
        if any(not line or "\n" in line for line in self.extensions):
            raise NoteError("checkpoint extension lines are non-empty single lines")

    def text(self) -> str:
        return "".join(f"{line}\n" for line in (self.origin, str(self.size), _b64(self.root), *self.extensions))

    @classmethod
    def from_text(cls, text: str) -> Checkpoint:
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise NoteError("a checkpoint's text is at least three lines: origin, tree size, root hash")
        origin, size, root, *extensions = lines[:-1]
        if not _SIZE.fullmatch(size):
            raise NoteError(f"checkpoint tree size {size[:40]!r} is not a decimal without leading zeros")
        hashed = _unb64(root, "the checkpoint root hash")
        if len(hashed) != HASH_BYTES:
            raise NoteError(f"the checkpoint root hash is {len(hashed)} bytes, not {HASH_BYTES}")
        return cls(origin, int(size), hashed, tuple(extensions))


def cosigned_message(text: str, timestamp: int) -> bytes:
    """What a tlog-cosignature/v1 signature covers: the header, the time line, the checkpoint text."""
    return f"{COSIGNATURE_HEADER}time {timestamp}\n{text}".encode()


@dataclass(frozen=True)
class NoteVerifier:
    """A verifier key: a name, a signature type (0x01 note, 0x04 cosignature) and an Ed25519 public key."""

    name: str
    kind: int
    public: bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.kind not in (ED25519_NOTE, ED25519_COSIGNATURE) or len(self.public) != 32:
            raise NoteError(f"verifier key {self.name}: only Ed25519 keys of type 0x01 or 0x04 are read")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.kind, self.public)

    def vkey(self) -> str:
        """``name+hex(key ID)+base64(type || public key)``: how the key is handed to a verifier."""
        return f"{self.name}+{self.key_id.hex()}+{_b64(bytes([self.kind]) + self.public)}"

    @classmethod
    def from_vkey(cls, text: str) -> NoteVerifier:
        parts = text.strip().split("+", 2)
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
            raise NoteError("a verifier key is NAME+<8 hex key ID>+<base64 type and public key>")
        material = _unb64(parts[2], f"verifier key {parts[0][:40]}")
        if not material:
            raise NoteError(f"verifier key {parts[0][:40]} holds no key")
        verifier = cls(parts[0], material[0], material[1:])
        if verifier.key_id.hex() != parts[1]:
            raise NoteError(f"verifier key {verifier.name}: key ID {parts[1]} is not the one its key gives")
        return verifier

    def signed(self, note: Note) -> NoteSignature | None:
        """This key's signature in ``note`` (name and key ID both match), or None."""
        found = [s for s in note.signatures if s.name == self.name and s.key_id == self.key_id]
        if len(found) > 1:
            raise NoteError(f"the note carries two signatures by {self.name}")
        return found[0] if found else None

    def verifies(self, text: str, signature: NoteSignature) -> int | None:
        """The signature holds: 0 for a note signature, the timestamp for a cosignature; else None."""
        raw, timestamp, message = signature.signature, 0, text.encode("utf-8")
        if self.kind == ED25519_COSIGNATURE:
            if len(raw) != 8 + ED25519_SIGNATURE_BYTES:
                return None
            (timestamp,) = struct.unpack(">Q", raw[:8])
            if timestamp >= 1 << 63:
                return None
            raw, message = raw[8:], cosigned_message(text, timestamp)
        if len(raw) != ED25519_SIGNATURE_BYTES:
            return None
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(raw, message)
        except InvalidSignature:
            return None
        return timestamp


def public_key_bytes(key: Key) -> bytes:
    """The raw Ed25519 public key of a signing key (memory or HSM); refused for anything else."""
    public = key.public() if key.alg == ED25519 else None
    held = getattr(public, "public_key", None)
    if not isinstance(held, Ed25519PublicKey):
        raise NoteError(f"key {key.kid} is not an Ed25519 key with a public half: C2SP notes are signed with Ed25519")
    return held.public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class NoteSigner:
    """Signs notes (type 0x01) or cosigns checkpoints (type 0x04) as ``name`` with a project key."""

    name: str
    key: Key
    kind: int = ED25519_NOTE

    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, self.kind, public_key_bytes(self.key))

    def sign(self, text: str, timestamp: int | None = None) -> NoteSignature:
        """A note signature over ``text``; a cosignature (``timestamp`` required) for type 0x04."""
        verifier = self.verifier()
        if self.kind == ED25519_COSIGNATURE:
            if timestamp is None or not 0 <= timestamp < 1 << 63:
                raise NoteError("a cosignature needs a POSIX timestamp")
            raw = strict_b64url(self.key.sign(cosigned_message(text, timestamp)))
            prefix = struct.pack(">Q", timestamp)
        else:
            raw, prefix = strict_b64url(self.key.sign(text.encode("utf-8"))), b""
        if raw is None or len(raw) != ED25519_SIGNATURE_BYTES:
            raise NoteError(f"key {self.key.kid} did not give an Ed25519 signature")
        return NoteSignature(self.name, verifier.key_id, prefix + raw)


@dataclass(frozen=True)
class Verified:
    """A checkpoint whose log signature verified, and the witnesses whose cosignatures did (name -> time)."""

    checkpoint: Checkpoint
    note: Note
    cosigned: dict[str, int]


def open_checkpoint(
    data: bytes, log: NoteVerifier, witnesses: Sequence[NoteVerifier] = (), required: int = 0
) -> Verified:
    """The checkpoint in ``data``, once the log's signature and ``required`` witness cosignatures verify.

    Per c2sp.org/signed-note, signatures by unknown keys are ignored, and one by a known key
    that fails rejects the whole note.
    """
    if log.kind != ED25519_NOTE:
        raise NoteError(f"the log key {log.name} is a cosignature key (type 0x04), not a log's note key")
    note = Note.parse(data)
    checkpoint = Checkpoint.from_text(note.text)
    own = log.signed(note)
    if own is None:
        raise NoteError(f"the checkpoint is not signed by the log key {log.name}+{log.key_id.hex()}")
    if log.verifies(note.text, own) is None:
        raise NoteError(f"the log signature by {log.name} does not verify: the checkpoint was altered")
    if checkpoint.origin != log.name:
        raise NoteError(f"the checkpoint's origin {checkpoint.origin!r} is not the log key's name {log.name!r}")
    cosigned: dict[str, int] = {}
    for witness in witnesses:
        signature = witness.signed(note)
        if signature is None:
            continue
        timestamp = witness.verifies(note.text, signature)
        if timestamp is None or witness.kind != ED25519_COSIGNATURE:
            raise NoteError(f"the cosignature by witness {witness.name} does not verify")
        cosigned[witness.name] = timestamp
    if len(cosigned) < required:
        raise NoteError(
            f"the checkpoint carries {len(cosigned)} valid witness cosignature(s) of the {required} required"
            f" (from {', '.join(w.name for w in witnesses) or 'no witness key given'})"
        )
    return Verified(checkpoint, note, cosigned)
