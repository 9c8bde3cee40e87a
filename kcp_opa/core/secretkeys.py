"""Is this object key the name of a secret? The detector every action key goes through.

An agent that puts ``db_password`` or ``apiKey`` into an action sends a secret to the gate, the
ledger and every approver; only references may travel. A key is normalised before matching:
Unicode NFKC (full-width letters U+FF41.. are ASCII), zero-width and soft-hyphen
characters removed (``pass\\u200bword``), camelCase split, case folded, separators (``_ - . :
/`` and spaces) dropped. It is secret-bearing when the compact form contains one of
``STRONG`` or ends with one of ``SUFFIXES`` (so ``authorization`` and ``proxy_authorization``
are refused, ``authorization_context`` is not; ``session`` is, ``session_id`` is not).
"""

from __future__ import annotations

import re
import unicodedata

#: Refused wherever they appear in the compact key (``password_hash``, ``x_api_key``).
STRONG = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "privatekey",
    "apikey",
    "accesstoken",
    "refreshtoken",
    "credential",
    "rawdocument",
    "biometrictemplate",
)
#: Refused when the compact key ends with them (``db_pwd``, ``bearer_token``, ``set_cookie``).
SUFFIXES = ("pwd", "token", "authorization", "cookie", "session", "auth", "bearer", "signingkey", "apitoken")

_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e\u034f"), None)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s_\-.:/]+")


def compact(key: str) -> str:
    """The normalised form matched against the lists (see the module docstring)."""
    text = unicodedata.normalize("NFKC", key).translate(_INVISIBLE)
    text = _CAMEL.sub("_", text).casefold()
    return _SEPARATORS.sub("", text)


def secret_name(key: str) -> str | None:
    """The credential name ``key`` matches, or None for an ordinary key."""
    form = compact(key)
    for name in STRONG:
        if name in form:
            return name
    for name in SUFFIXES:
        if form.endswith(name):
            return name
    return None
