"""A gate or attested fact obeys the contract of the action path where it would be stated.

Both engines must read a fact alike, as they must the action (docs/input-contract.md): a
``deployment_region`` of ``'"EU"'`` reaches regopy as ``EU`` (rego-cpp's input API reads a
quote-wrapped string as the text inside) and OPA as ``"EU"``, so a residency rule held on one
engine and not on the other. So every fact, from any source (the gate's configuration, a trust
registry, an attestation, a host's own source), is held to the action-intent schema at its
stated path (``FactSpec.stated_path``) and to the string contract (kcp_opa/core/strings.py):
no quote-wrapped string, no control character, an identifier where the action's path is one.
Configuration refuses such a value at load (:class:`GateFactError`); the context stage drops
one that arrives at decision time and records it in ``input.context.facts_refused``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from jsonschema import Draft202012Validator

from kcp_opa.context.facts import FACTS
from kcp_opa.core import strings
from kcp_opa.core.errors import CodedError
from kcp_opa.core.jsonread import JsonObject, mapping


class GateFactError(CodedError):
    """A configured gate fact that breaks the contract (exit 2; one line naming the fact and why)."""

    code = "gate_fact"


#: Answers of :func:`fact_problem` for plain values: the same few facts reach every decision,
#: and the schema check is the context stage's dearest step. Bounded; a pure function's memo.
_ANSWERS: dict[tuple[object, ...], str | None] = {}
_ANSWERS_HELD = 4096
_SCALARS = (str, bool, int, type(None))


def _memo_key(name: str, value: object) -> tuple[object, ...] | None:
    """The exact type with the value (``True`` is not ``1``, a tuple is not a list); None: not memoised."""
    if type(value) in _SCALARS:
        return (name, type(value), value)
    if type(value) is list and all(type(item) is str for item in value):
        return (name, list, *value)
    return None


def fact_problem(name: str, value: object) -> str | None:
    """Why ``value`` may not stand as fact ``name`` (the schema and string contract of its stated path), or None."""
    key = _memo_key(name, value)
    if key is None:
        return _fact_problem(name, value)
    try:
        return _ANSWERS[key]
    except KeyError:
        pass
    answer = _fact_problem(name, value)
    if len(_ANSWERS) >= _ANSWERS_HELD:
        _ANSWERS.clear()  # a host cycling through values: start over rather than grow
    _ANSWERS[key] = answer
    return answer


def _fact_problem(name: str, value: object) -> str | None:
    spec = FACTS.get(name)
    if spec is None:
        return f"{name!r} is not a fact the gate builds"
    path = "/" + "/".join(spec.stated_path)
    for where, text in _strings(value, path):
        problem = _text_problem(text, where)
        if problem is not None:
            return problem
    error = next(iter(_validator(spec.stated_path).iter_errors(value)), None)
    if error is not None:
        return f"{error.message} (the action-intent schema at {path})"
    return None


def check_fact(name: str, value: object, where: str) -> None:
    """Raise :class:`GateFactError` (``where`` names the setting) unless the value is a valid fact."""
    problem = fact_problem(name, value)
    if problem is not None:
        raise GateFactError(f"{where}: {name} {_shown(value)}: {problem}")


def _text_problem(text: str, path: str) -> str | None:
    if strings.quote_wrapped(text):
        return strings.QUOTE_WRAPPED_RULE
    bad = strings.forbidden_char(text)
    if bad is not None:
        return f"character {strings.char_name(bad)} is not allowed in a string the policies read"
    if strings.is_action_identifier_path(path):
        why = strings.identifier_problem(text)
        if why is not None:
            return f"{why} is not allowed in an identifier ({strings.IDENTIFIER_RULE}), as at {path} in an action"
    return None


def _strings(value: object, path: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, list | tuple):
        return [(f"{path}/{index}", item) for index, item in enumerate(value) if isinstance(item, str)]
    return []


@cache
def _validator(stated_path: tuple[str, ...]) -> Draft202012Validator:
    """The action-intent schema's rule for the value at ``stated_path`` (its ``$defs`` kept)."""
    root: JsonObject = json.loads(
        resources.files("kcp_opa.schemas").joinpath("action-intent.schema.json").read_text("utf-8")
    )
    node: JsonObject = root
    for part in stated_path:
        properties = mapping(node.get("properties"))
        node = mapping(properties[part] if part in properties else node.get("additionalProperties"))
    return Draft202012Validator({**node, "$defs": root["$defs"]})


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 80 else text[:77] + "..."
