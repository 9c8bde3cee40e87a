"""The form a stated purpose is compared in: as a person reads it (docs/input-contract.md).

Shared by the action (``knowledge.purpose``) and the manifest (``not_for``) so both sides fold
the same way; regopy's ``lower`` is ASCII-only, so the gate never folds text itself. A spelling
that reads as a forbidden purpose must fold to it: compatibility forms (fullwidth letters,
ligatures), case, combining marks, invisible format characters (ZWJ, ZWSP, bidi), separator
variants and letters of other scripts that look like Latin ones (Unicode TR39 confusables,
Cyrillic ``\u0430`` for ``a``) are all folded away. Text that cannot be read as one spelling (mixed
scripts that do not map to Latin, a letter that reads as either ``I`` or ``l``, unassigned or
private-use characters, blank fillers) is refused with :class:`TextFoldError`.

The confusables come from the ``confusable-homoglyphs`` package's copy of Unicode's
confusables.txt and Scripts.txt, read from its package files (never from ``$CONFUSABLE_DATA``).
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from functools import cache, lru_cache
from importlib import resources

_DROPPED_IN_FOLD = frozenset({"Mn", "Me", "Cf"})
#: Dashes (Pd) and connectors (Pc, ``_`` and its look-alikes) read as a separator.
_SEPARATOR_CATEGORIES = frozenset({"Pd", "Pc"})
#: Symbols drawn as a dash: minus signs, the prolonged sound mark, box-drawing and heavy minus.
_DASH_LIKE = frozenset("\u2212\u2043\u23af\u2500\u2501\u2796\u30fc\uff70\U00010ead")
#: Runs of whitespace (TAB, CR, LF, NBSP...), hyphens, underscores, Unicode dashes and ASCII
#: punctuation (``training.``, ``(training)``, ``"training"``, ``ai/training``): one ``_``.
_SEPARATORS = re.compile(r"[\s_\-\u2010-\u2015\u2212\ufe58\ufe63\uff0d!-/:-@\[-`{-~]+")
#: Characters a fold never reads: unassigned, private use, surrogates, controls (but whitespace).
_UNREADABLE = frozenset({"Cn", "Co", "Cs", "Cc"})
#: Letters that show as blank space yet are no separator (Hangul fillers, the braille blank).
_BLANK_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
#: Scripts a word may mix (TR39 "highly restrictive"), besides Common and Inherited.
_SCRIPT_SETS = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
_NEUTRAL_SCRIPTS = frozenset({"COMMON", "INHERITED"})
_ASCII_LETTER = re.compile("[A-Za-z]")
#: Per-character answers kept: bounded, so a stream of distinct characters cannot grow memory.
_CHARS_CACHED = 4096


class TextFoldError(ValueError):
    """Text that cannot be read as one spelling; the message says why (ASCII only)."""


def fold_text(text: str) -> str:
    """The compared form; raises :class:`TextFoldError` for text that cannot be read as one spelling.

    NFKD; each non-ASCII letter that looks like Latin letters mapped to them (TR39 confusables,
    before and after case folding, so Greek ``\u039d`` reads ``N`` and Cyrillic ``\u0430`` reads ``a``;
    a Latin letter with a stroke, hook or small-capital form to its base letter); casefold,
    combining marks and format characters (zero-width, bidi) dropped, NFC; then every run of
    separators (whitespace, ``-``, ``_``, dashes, punctuation) one ``_``, none at either end.

    ``TRAİNING``, ``Trai\u0307ning``, ``train\u200bing``, fullwidth ``\uff54\uff52\uff41\uff49\uff4e\uff49\uff4e\uff47``
    and ``tr\u0430ining`` (Cyrillic ``\u0430``) fold to ``training``; ``AI training``,
    ``ai-training``, ``AI_Training``, ``ai\u2013training`` and ``ai training\\n`` to ``ai_training``.
    """
    if text.isascii():  # the common case: no compatibility form, mark or look-alike to fold
        return _SEPARATORS.sub("_", text.casefold()).strip("_")
    plain = _unmarked(text)
    folded = _as_latin(unicodedata.normalize("NFC", _unmarked(_as_latin(plain).casefold())))
    _check_one_reading(plain, folded)
    # Punctuation left once look-alikes are mapped (curly quotes, the middle dot, brackets) parts
    # words as ASCII punctuation does; mapped last, so a mark that looks like a letter reads as one.
    folded = "".join("_" if not c.isascii() and unicodedata.category(c)[0] == "P" else c for c in folded)
    return _SEPARATORS.sub("_", folded).strip("_")


def _unmarked(text: str) -> str:
    """NFKD; marks and format characters dropped, dashes and connectors ``-``; refuses the unreadable."""
    decomposed = unicodedata.normalize("NFKD", text)
    table = {ord(char): _plain(char) for char in set(decomposed) if not char.isascii()}
    return decomposed.translate(table) if table else decomposed


@lru_cache(maxsize=_CHARS_CACHED)
def _plain(char: str) -> str:
    category = unicodedata.category(char)
    if char in _BLANK_FILLERS or (category in _UNREADABLE and not char.isspace()):
        raise TextFoldError(f"character {_named(char)} cannot be read as a letter")
    if category in _DROPPED_IN_FOLD:
        return ""
    return "-" if category in _SEPARATOR_CATEGORIES or char in _DASH_LIKE else char


def _as_latin(text: str) -> str:
    table = {ord(char): _reading(char) for char in set(text) if not char.isascii()}
    return text.translate(table) if table else text


def _check_one_reading(plain: str, folded: str) -> None:
    """Refuse a string mixing scripts that do not map to one, or holding an I-or-l look-alike."""
    if _ASCII_LETTER.search(folded):
        either = sorted(set(plain) & _i_or_l())
        if either:
            raise TextFoldError(f"character {_named(either[0])} reads as either I or l")
    if _one_script(_scripts(plain)):
        return
    after = _scripts(folded)
    if not _one_script(after):
        raise TextFoldError(f"mixes the scripts {', '.join(sorted(after))}, which do not map to one")


def _one_script(scripts: set[str]) -> bool:
    return len(scripts) <= 1 or any(scripts <= allowed for allowed in _SCRIPT_SETS)


def _scripts(text: str) -> set[str]:
    found = {_script(char) for char in set(text) if not char.isascii()}
    found.discard("")
    if _ASCII_LETTER.search(text):
        found.add("LATIN")
    return found


@lru_cache(maxsize=_CHARS_CACHED)
def _script(char: str) -> str:
    """The script of a letter (Scripts.txt); ``""`` for Common, Inherited and what is no letter."""
    if not char.isalpha():
        return ""
    starts, ranges, names = _script_ranges()
    code = ord(char)
    index = bisect.bisect_right(starts, code) - 1
    if index < 0 or ranges[index][1] < code:
        return "UNKNOWN"
    name = names[ranges[index][2]]
    return "" if name in _NEUTRAL_SCRIPTS else name


#: ``LATIN SMALL LETTER O WITH STROKE``, ``LATIN LETTER SMALL CAPITAL R``: the base letter a person reads.
_LATIN_VARIANT = re.compile(r"LATIN (?:SMALL |CAPITAL )?LETTER (?:SMALL CAPITAL )?([A-Z])(?: WITH .+)?")


@lru_cache(maxsize=_CHARS_CACHED)
def _reading(char: str) -> str:
    """The ASCII letters ``char`` reads as, or ``char`` itself.

    Its TR39 prototype (confusables.txt), where a prototype of ``l`` stays ``l`` for a lower-case
    letter only: a capital (Greek ``\u0399``) reads as ``I``, so ``i``; a caseless one (``\u01c0``, Arabic
    alef) reads as either and is kept (:func:`_i_or_l`). A non-ASCII Latin letter left over
    reads as its base letter (``ø`` as ``o``, small capital ``ʀ`` as ``r``).
    """
    if char.isascii():
        return char
    prototype = _prototypes().get(char)
    if prototype == "l" and unicodedata.category(char) != "Ll":
        return "i" if unicodedata.category(char) in ("Lu", "Lt") else char
    if prototype is not None:  # Cyrillic ``т`` -> small capital ``ᴛ`` -> ``t``; a pair's other side is no help
        read = "".join(part if part.isascii() else _latin_base(part) for part in prototype)
        if read.isascii():
            return read
    return _latin_base(char)


def _latin_base(char: str) -> str:
    match = _LATIN_VARIANT.fullmatch(unicodedata.name(char, ""))
    return match.group(1).lower() if match is not None else char


@cache
def _i_or_l() -> frozenset[str]:
    return frozenset(
        char
        for char, prototype in _prototypes().items()
        if prototype == "l" and unicodedata.category(char) not in ("Ll", "Lu", "Lt")
    )


@cache
def _prototypes() -> dict[str, str]:
    """Non-ASCII character -> its TR39 prototype (confusables.txt).

    The package lists each pair both ways: a look-alike lists its one prototype, a prototype all
    its look-alikes, so a prototype with one look-alike maps to it; :func:`_reading` uses a
    mapping only where it ends in ASCII letters.
    """
    raw = json.loads(resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    found: dict[str, str] = {}
    for char, entries in raw.items():
        if len(char) != 1 or char.isascii() or len(entries) != 1:
            continue  # a prototype lists its look-alikes; a look-alike lists its one prototype
        found[char] = str(entries[0]["c"]).strip("\u200e\u200f")
    return found


@cache
def _script_ranges() -> tuple[list[int], list[list[int]], list[str]]:
    raw = json.loads(resources.files("confusable_homoglyphs").joinpath("categories.json").read_text("utf-8"))
    ranges: list[list[int]] = raw["code_points_ranges"]
    return [r[0] for r in ranges], ranges, list(raw["iso_15924_aliases"])


def _named(char: str) -> str:
    code = ord(char)
    return f"U+{code:04X} ({unicodedata.name(char, 'unnamed')})"
