"""The one string contract for everything the policies read: actions, manifests, matrices, registries.

Both engines must read every string byte for byte alike (docs/input-contract.md). Two paths
carry strings into Rego, with different hazards, measured on regopy beside OPA:

- the input (the action), handed over through rego-cpp's C API: NUL cuts a string there and a
  string wrapped in ``"`` is read as the text inside (engine-findings items 23, 24);
- the data document (manifests, matrix, registry compiled into the bundle), handed over as JSON
  text: every character JSON escapes (``"``, ``\\`` and U+0000-U+001F, TAB, CR and LF included)
  keeps its escape inside the string, so ``"x\\n"`` is four characters to regopy, one ``\\n``
  never equals the input's, and ``count``, ``==``, ``in``, object keys and messages all differ
  (engine-findings item 2; ``tests/adversarial/test_declaration_attacks.py`` measures each).

What the policies match, index, sort or hash must also be an :data:`IDENTIFIER`: every allowed
character sorts above ``"`` (regopy compares strings with their closing quote, item 25).
The action checker (``kcp_opa.decide.action``) and the declaration checker
(``kcp_opa.declare.declstrings``) both take their rules from here.
"""

from __future__ import annotations

import re

#: Never in any string or key: C0 controls but TAB, LF and CR, DEL, C1 controls, lone surrogates.
FORBIDDEN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")

#: Never in a string that reaches the bundle's data: what JSON escapes (regopy keeps the escape).
DATA_ESCAPED = re.compile('["\\\\\x00-\x1f]')

#: ASCII letters, digits and ``_ . : / @ + ~ = # * -``: sorts alike, needs no JSON escape.
IDENTIFIER = re.compile(r"[A-Za-z0-9_.:/@+~=#*-]+")

IDENTIFIER_RULE = "letters, digits and _ . : / @ + ~ = # * - only"

#: Where an action holds identifiers (``*`` is any array index): what policies match, index,
#: hash, sort or put in messages. A gate fact stated at one of these paths is held to it too.
ACTION_IDENTIFIER_PATHS = (
    "/action_id",
    "/idempotency_key",
    "/tenant_id",
    "/subject_id",
    "/agent_id",
    "/action_type",
    "/requested_action",
    "/target/type",
    "/target/tenant_id",
    "/target/country",
    "/target/region",
    "/authorization_context/requested_by",
    "/authorization_context/agent_scope/*",
    "/authorization_context/actor_role",
    "/authorization_context/principal_scopes/*",
    "/knowledge/project",
    "/knowledge/unit",
    "/knowledge/fields_read/*",
    "/runtime/deployment_region",
    "/runtime/model/id",
    "/delegation_chain/*/agent_id",
    "/delegation_chain/*/capabilities/*",
)
_ACTION_IDENTIFIER_PATH = re.compile(
    "^(?:" + "|".join(re.escape(p).replace(r"\*", "[0-9]+") for p in ACTION_IDENTIFIER_PATHS) + ")$"
)


def is_action_identifier_path(path: str) -> bool:
    """True for ``/runtime/deployment_region``, ``/authorization_context/agent_scope/0`` and the like."""
    return _ACTION_IDENTIFIER_PATH.match(path) is not None


def char_name(char: str) -> str:
    """``U+0000 "\\x00"``: the code point and an ASCII-only escaped form, safe to print and log."""
    code = ord(char)
    if 0x21 <= code <= 0x7E and char not in '"\\':
        shown = char
    else:
        shown = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return f'U+{code:04X} "{shown}"'


QUOTE_WRAPPED_RULE = (
    'a string may not both start and end with U+0022 """: regopy reads it as the string inside the quotes'
)


def quote_wrapped(text: str) -> bool:
    """True for ``'"x"'``, which rego-cpp's input API reads as ``x``."""
    return len(text) > 1 and text[0] == text[-1] == '"'


def forbidden_char(text: str) -> str | None:
    """The first character no string may hold, or None."""
    match = FORBIDDEN_TEXT.search(text)
    return None if match is None else match.group()


def data_escaped_char(text: str) -> str | None:
    """The first character regopy's data path reads escaped, or None."""
    match = DATA_ESCAPED.search(text)
    return None if match is None else match.group()


def identifier_problem(text: str) -> str | None:
    """Why ``text`` is no identifier (``character U+0020 " "`` or ``an empty string``), or None."""
    if IDENTIFIER.fullmatch(text):
        return None
    bad = next((c for c in text if not IDENTIFIER.fullmatch(c)), None)
    return f"character {char_name(bad)}" if bad is not None else "an empty string"


def data_text_problem(text: str) -> str | None:
    """Why ``text`` cannot reach the bundle's data intact on both engines, or None."""
    bad = forbidden_char(text) or data_escaped_char(text)
    if bad is not None:
        return (
            f"character {char_name(bad)} is not allowed in a string the policies read: quotes, backslashes "
            "and control characters (TAB, CR and LF too) reach regopy escaped, so it would decide differently "
            "from OPA"
        )
    return None
