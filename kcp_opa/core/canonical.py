"""The one canonical JSON encoding (KYA-CJ-1) and the ``sha256:`` references built on it.

Bundle files, action hashes, receipt signatures and ledger entries all hash these bytes:
sorted keys, compact separators, UTF-8 without \\u escapes (regopy keeps escapes raw), no NaN.
"""

from __future__ import annotations

import hashlib
import json

#: ``json.dumps`` with these options builds an encoder per call; one built once encodes the same
#: bytes (``dumps`` is exactly ``JSONEncoder(**options).encode``), and encoding keeps no state.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: object) -> bytes:
    return _ENCODER.encode(value).encode("utf-8")


def canonical_hash(value: object) -> str:
    """``sha256:`` + hex digest of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()
