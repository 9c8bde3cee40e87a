"""One ledger entry as a typed document: the chain fields, the writer signature, and the event.

Both ledger backends build entries through :meth:`LedgerEntry.chained` and read the entry they
extend through :meth:`LedgerEntry.from_dict`, so the shape a writer trusts is checked in one
place. :meth:`LedgerEntry.to_dict` gives back exactly the mapping that was hashed (the event's
fields beside ``seq``, ``previous_hash``, ``entry_signature`` and ``entry_hash``), so its
canonical JSON is the line's bytes: typing the entry changes no byte of any ledger.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import LedgerError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.trail.verify import ENTRY_SIGNATURE

_CHAIN = frozenset({"seq", "previous_hash", "entry_hash", ENTRY_SIGNATURE})
_HASH = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class LedgerEntry:
    """An entry: ``event`` (what was recorded) chained at ``seq`` after ``previous_hash``."""

    seq: int
    previous_hash: str
    entry_hash: str
    event: JsonObject
    signature: Mapping[str, str] | None = None

    @classmethod
    def chained(
        cls,
        event: JsonObject,
        seq: int,
        previous_hash: str,
        sign: Callable[[JsonDict], JsonDict] | None = None,
    ) -> LedgerEntry:
        """The entry for ``event`` at ``seq``: signed by ``sign`` (the writer key) if given, then hashed."""
        return cls.written(event, seq, previous_hash, sign)[0]

    @classmethod
    def written(
        cls,
        event: JsonObject,
        seq: int,
        previous_hash: str,
        sign: Callable[[JsonDict], JsonDict] | None = None,
    ) -> tuple[LedgerEntry, bytes]:
        """:meth:`chained`, with the entry's canonical JSON (the ledger line, without its newline).

        The entry is serialised once: as the members sorted before ``entry_hash`` and those
        after it (KYA-CJ-1 sorts keys), joined without it for the hash and around it for the line.
        """
        body: JsonDict = {k: v for k, v in event.items() if k not in _CHAIN}
        body.update(seq=seq, previous_hash=previous_hash)
        if sign is not None:
            body = sign(body)
        before = canonical_json({k: v for k, v in body.items() if k < "entry_hash"})[1:-1]
        after = canonical_json({k: v for k, v in body.items() if k > "entry_hash"})[1:-1]
        digest = "sha256:" + hashlib.sha256(_object(before, after)).hexdigest()
        line = _object(before, b'"entry_hash":' + canonical_json(digest), after)
        return cls.from_dict({**body, "entry_hash": digest}), line

    @classmethod
    def from_dict(cls, document: object) -> LedgerEntry:
        """Strict: a mapping with an int seq >= 1, sha256 hashes, and a writer signature of strings if any."""
        if not isinstance(document, Mapping):
            raise LedgerError("not a ledger entry (not a JSON object)")
        seq = document.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise LedgerError(f"not a ledger entry: seq {seq!r} is not a positive integer")
        hashes = [document.get(name) for name in ("previous_hash", "entry_hash")]
        if not all(isinstance(value, str) and _HASH.fullmatch(value) for value in hashes):
            raise LedgerError(f"not a ledger entry: seq {seq} has no sha256 previous_hash and entry_hash")
        signature = document.get(ENTRY_SIGNATURE)
        if signature is not None and not (
            isinstance(signature, Mapping) and all(isinstance(v, str) for v in signature.values())
        ):
            raise LedgerError(f"not a ledger entry: seq {seq}'s entry_signature is not an object of strings")
        event = MappingProxyType({k: v for k, v in document.items() if k not in _CHAIN})
        return cls(seq, str(hashes[0]), str(hashes[1]), event, None if signature is None else dict(signature))

    def to_dict(self) -> JsonDict:
        """The entry as written: the event, the chain fields, the signature (when signed)."""
        out: JsonDict = {**self.event, "seq": self.seq, "previous_hash": self.previous_hash}
        if self.signature is not None:
            out[ENTRY_SIGNATURE] = dict(self.signature)
        out["entry_hash"] = self.entry_hash
        return out

    def hash_holds(self) -> bool:
        """Whether ``entry_hash`` is the hash of the rest of the entry (nothing was changed)."""
        body = self.to_dict()
        del body["entry_hash"]
        return canonical_hash(body) == self.entry_hash


def _object(*members: bytes) -> bytes:
    """A canonical JSON object from runs of its members, in order (an empty run adds nothing)."""
    return b"{" + b",".join(run for run in members if run) + b"}"
