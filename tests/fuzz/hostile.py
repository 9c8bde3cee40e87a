"""The hostile string alphabet: what an adversarial agent puts in an action's strings."""

from __future__ import annotations

import draws as st

#: Characters that broke or may break one engine: JSON syntax, the allowed controls, non-ASCII
#: case pairs whose lower/upper/casefold differ by library, zero-width and bidi controls,
#: combining marks, an astral character, and the two characters that sort below regopy's
#: closing quote (space and "!").
HOSTILE_CHARS = (
    '"\\/{}[]:,\t\n\r !#'
    "İıßΣσςǅKÅſﬁ"  # noqa: RUF001 - Turkish dotted/dotless i, sharp s, sigma forms, titlecase, Kelvin, Angstrom, long s, ligature
    "\u200b\u200c\u200d\u2060\ufeff"  # zero-width
    "\u202a\u202b\u202e\u2066\u2069\u200e\u200f"  # bidi
    "\u0301\u0307\u0338"  # combining marks
    "é\u00a0\u2028\u2029😀"
    "aAzZ09_-."
)


def _contract(text: str) -> str:
    """The action contract refuses a string wrapped in double quotes; keep the rest of it."""
    return text + "." if len(text) > 1 and text[0] == text[-1] == '"' else text


hostile_text = st.one_of(
    st.text(alphabet=HOSTILE_CHARS, max_size=24),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\t\n\r"), max_size=24),
    st.builds(lambda c, n: c * n, st.sampled_from(HOSTILE_CHARS), st.integers(500, 4000)),
).map(_contract)
