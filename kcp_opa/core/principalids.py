"""Canonical principal ids: the one normalisation every identity comparison goes through.

An approver check that compares raw strings lets ``User_001``, ``"user_001 "``, a zero-width
space or full-width digits pass as someone other than ``user_001``. Ids are therefore NFKC
normalised, casefolded and trimmed, and ids that still carry invisible, bidirectional or
non-ASCII look-alike characters are refused outright rather than guessed at.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from kcp_opa.core.errors import CodedError

#: After normalisation an id is plain ASCII: letters, digits and ``. _ - @ : /``.
_ALLOWED = re.compile(r"^[a-z0-9][a-z0-9._@:/-]{0,127}$")


class IdentityError(CodedError):
    """A principal id that cannot be made canonical (invisible, bidi or look-alike characters)."""

    code = "non_canonical_id"

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"principal id {value!r}: {reason}")


def _suspicious(char: str) -> str | None:
    category = unicodedata.category(char)
    if category in {"Cf", "Cc", "Co", "Cs", "Cn"}:
        return f"invisible or control character U+{ord(char):04X}"
    if unicodedata.bidirectional(char) in {"RLE", "LRE", "RLO", "LRO", "PDF", "RLI", "LRI", "FSI", "PDI"}:
        return f"bidirectional control U+{ord(char):04X}"
    return None


def canonical_id(value: str) -> str:
    """The canonical form of a principal id; raises :class:`IdentityError` when there is none.

    NFKC folds compatibility forms (full-width digits become ASCII), casefold folds case, and
    surrounding whitespace goes. Anything outside ASCII that survives (Cyrillic ``U+0430`` for Latin
    ``a``, zero-width joiners, bidi overrides) is refused: a registry id is an identifier, not
    prose, so refusing is safer than mapping look-alikes.
    """
    if not isinstance(value, str):
        raise IdentityError(repr(value), "a principal id is a string")
    return _canonical(value)


@lru_cache(maxsize=8192)
def _canonical(value: str) -> str:
    """:func:`canonical_id` of a string (the same ids recur on every decision; a refusal is not kept)."""
    for char in value:
        reason = _suspicious(char)
        if reason is not None:
            raise IdentityError(value, reason)
    folded = unicodedata.normalize("NFKC", value).casefold().strip()
    if not _ALLOWED.match(folded):
        raise IdentityError(
            value, "after NFKC, casefold and trim it must be ASCII letters, digits and . _ - @ : / (at most 128)"
        )
    return folded


def canonical_or_empty(value: object) -> str:
    """The canonical id of ``value``, or "" when it is not a string or cannot be made canonical."""
    try:
        return canonical_id(value) if isinstance(value, str) else ""
    except IdentityError:
        return ""
