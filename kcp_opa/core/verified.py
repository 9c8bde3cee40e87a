"""Signatures verified once: a bounded memo of the signatures that verified, by what they cover.

An attestation is offered to every decision it might speak for, and an Ed25519 verification
costs tens of microseconds each time; the answer for the same bytes, signature and key never
changes. So a signature that verified is remembered under the sha256 of the exact signed bytes,
the signature value and the verifying key's own material (an Ed25519 public key's raw bytes, a
digest of an HMAC secret), never under a key id or an issuer name: other bytes, another
signature or a rotated key under the same id miss the memo and are verified afresh. A key the
registry no longer lists is never looked up (the caller finds no key before it asks). Only
successes are remembered, so a failure is checked again every time; a key whose material this
module cannot read (an HSM, a retired key) is always verified directly.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping

from kcp_opa.core.frozen import frozen_copy
from kcp_opa.core.jsonread import JsonObject
from kcp_opa.core.keys import Ed25519Key, HmacKey, Verifier, signed_bytes

#: Distinct verified signatures kept: enough for every attestation a gate holds at once.
DEFAULT_CAPACITY = 4096
_HMAC_LABEL = b"kcp-opa verified-signatures hmac key\x00"


def key_material(verifier: Verifier) -> bytes | None:
    """What identifies ``verifier``'s key itself (not its name), or None to never remember for it."""
    if getattr(verifier, "retired", False):
        return None
    if type(verifier) is Ed25519Key:
        public = verifier.public_key or (verifier.private_key.public_key() if verifier.private_key else None)
        return None if public is None else b"Ed25519\x00" + public.public_bytes_raw()
    if type(verifier) is HmacKey:
        return b"HMAC-SHA256\x00" + hashlib.sha256(_HMAC_LABEL + verifier.secret).digest()
    return None


class VerifiedSignatures:
    """Thread-safe, least recently used first out, at most ``capacity`` entries."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity is at least 1")
        self.capacity = capacity
        self.hits = self.misses = 0
        self._held: OrderedDict[tuple[bytes, bytes, str], None] = OrderedDict()
        #: Documents this memo copied read-only itself (:meth:`own`): their signed bytes' digest by ``at``.
        self._owned: OrderedDict[int, tuple[object, dict[str, bytes]]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def own(self, document: object) -> object:
        """A read-only deep copy of ``document`` (kcp_opa.core.frozen) this memo knows by identity:
        nothing can change it, so its signed bytes are serialised and hashed once, not on every
        verification. What is no mapping is returned as it is."""
        if not isinstance(document, Mapping):
            return document
        copy = frozen_copy(dict(document))
        with self._lock:
            self._owned[id(copy)] = (copy, {})
            while len(self._owned) > self.capacity:
                self._owned.popitem(last=False)
        return copy

    def verifies(self, verifier: Verifier, message: bytes, value: str) -> bool:
        """``verifier.verify(message, value)``, answered from the memo when this exact triple verified before."""
        return self._verifies(verifier, value, lambda: message, None)

    def document_verifies(self, document: JsonObject, verifier: Verifier, at: str = "signature") -> bool:
        """As :func:`kcp_opa.core.keys.document_verifies`, through the memo."""
        signature = document.get(at)
        value = signature.get("value") if isinstance(signature, Mapping) else None
        if not isinstance(value, str):
            return False
        with self._lock:
            owned = self._owned.get(id(document))
        digests = owned[1] if owned is not None and owned[0] is document else None
        if digests is None:
            return self._verifies(verifier, value, lambda: signed_bytes(document, at), None)
        if at not in digests:
            digests[at] = hashlib.sha256(signed_bytes(document, at)).digest()
        return self._verifies(verifier, value, lambda: signed_bytes(document, at), digests[at])

    def _verifies(self, verifier: Verifier, value: str, message: Callable[[], bytes], digest: bytes | None) -> bool:
        material = key_material(verifier)
        if material is None:
            return verifier.verify(message(), value)
        signed = message() if digest is None else None
        entry = (material, digest if digest is not None else hashlib.sha256(signed or b"").digest(), value)
        with self._lock:
            if entry in self._held:
                self._held.move_to_end(entry)
                self.hits += 1
                return True
            self.misses += 1
        if not verifier.verify(signed if signed is not None else message(), value):
            return False
        with self._lock:
            self._held[entry] = None
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)
        return True
