"""The case- and mark-insensitive text form policies compare (docs/input-contract.md).

Shared by the action (``knowledge.purpose``) and the manifest (``not_for``) so both sides fold
the same way; regopy's ``lower`` is ASCII-only, so the gate never folds text itself.
"""

from __future__ import annotations

import unicodedata

_DROPPED_IN_FOLD = frozenset({"Mn", "Me", "Cf"})


def fold_text(text: str) -> str:
    """NFKD, casefold, then combining marks and format characters (zero-width, bidi) dropped, then NFC.

    ``TRAİNING``, ``Trai\u0307ning`` and ``train\u200bing`` all fold to ``training``.
    """
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    kept = "".join(char for char in decomposed if unicodedata.category(char) not in _DROPPED_IN_FOLD)
    return unicodedata.normalize("NFC", kept)
