"""The case-, mark- and separator-insensitive text form policies compare (docs/input-contract.md).

Shared by the action (``knowledge.purpose``) and the manifest (``not_for``) so both sides fold
the same way; regopy's ``lower`` is ASCII-only, so the gate never folds text itself.
"""

from __future__ import annotations

import re
import unicodedata

_DROPPED_IN_FOLD = frozenset({"Mn", "Me", "Cf"})
#: Runs of whitespace (TAB, CR, LF, NBSP...), hyphens, underscores and Unicode dashes: one ``_``.
_SEPARATORS = re.compile(r"[\s_\-\u2010-\u2015\u2212\ufe58\ufe63\uff0d]+")


def fold_text(text: str) -> str:
    """NFKD, casefold, combining marks and format characters (zero-width, bidi) dropped, NFC, then
    every run of separators (whitespace, ``-``, ``_``, dashes) one ``_``, none at either end.

    ``TRAİNING``, ``Trai\u0307ning`` and ``train\u200bing`` fold to ``training``; ``AI training``,
    ``ai-training``, ``AI_Training`` and ``ai training\\n`` to ``ai_training``.
    """
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    kept = "".join(char for char in decomposed if unicodedata.category(char) not in _DROPPED_IN_FOLD)
    return _SEPARATORS.sub("_", unicodedata.normalize("NFC", kept)).strip("_")
