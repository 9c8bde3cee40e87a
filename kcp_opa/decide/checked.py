"""The proof that an action was checked: what :func:`kcp_opa.decide.action.check_action` returns.

A :class:`CheckedAction` carries the read-only copy of the action taken in the walk that checked
it, that copy's canonical JSON (KYA-CJ-1) and hash, and what the input reads of it (the trace id,
the folded purpose). The gate, the executor and the service take it instead of a mapping and
trust it without walking it again: nothing in it can change after the check (the copy is frozen,
the object has no setters), and only ``check_action`` makes one. No value is ever taken for a
checked action: a dict, a read-only mapping or a copy of a checked one handed where a checked
action is expected is checked again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import NoReturn

from kcp_opa.core.frozen import FrozenObject
from kcp_opa.core.jsonread import mapping, text


class CheckedRoot(FrozenObject):
    """The top of a checked action's read-only copy, holding its proof: a record that keeps only
    the mapping (a control record, a receipt's action) is not walked or hashed again. Only the
    proof whose own ``mapping`` is this very object counts (:func:`proof_of`)."""

    __slots__ = ("proof",)
    proof: CheckedAction


def proof_of(value: object) -> CheckedAction | None:
    """The checked action ``value`` is the read-only copy of, or None (then it must be checked)."""
    if type(value) is CheckedAction:
        return value
    if type(value) is CheckedRoot:
        proof = getattr(value, "proof", None)
        if type(proof) is CheckedAction and proof.mapping is value:
            return proof
    return None


class CheckedAction:
    """A checked action: ``mapping`` (read-only), ``canonical`` (its bytes) and ``hash`` (``sha256:``)."""

    __slots__ = ("canonical", "folded", "folded_refused", "hash", "mapping", "trace_id")
    mapping: CheckedRoot
    canonical: bytes
    hash: str
    #: The W3C trace id of ``trace.traceparent`` (None when absent or invalid).
    trace_id: str | None
    #: ``input.context.folded`` and ``folded_refused`` (kcp_opa.decide.action.folded_strings).
    folded: Mapping[str, str]
    folded_refused: Mapping[str, str]

    def __init__(self, *_: object, **__: object) -> None:
        raise TypeError("a CheckedAction comes from check_action(), never from its constructor")

    @classmethod
    def _from_check(
        cls,
        mapping: CheckedRoot,
        canonical: bytes,
        *,
        trace_id: str | None,
        folded: Mapping[str, str],
        folded_refused: Mapping[str, str],
    ) -> CheckedAction:
        """For ``check_action`` alone: the action it has just checked (its frozen copy and bytes)."""
        made = object.__new__(cls)
        fields = {
            "mapping": mapping,
            "canonical": canonical,
            "hash": "sha256:" + hashlib.sha256(canonical).hexdigest(),
            "trace_id": trace_id,
            "folded": dict(folded),
            "folded_refused": dict(folded_refused),
        }
        for name, value in fields.items():
            object.__setattr__(made, name, value)
        mapping.proof = made
        return made

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("a CheckedAction is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("a CheckedAction is read-only")

    def __copy__(self) -> CheckedAction:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> CheckedAction:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError("a CheckedAction is not pickled: send its canonical bytes and check them again")

    def __repr__(self) -> str:
        return f"CheckedAction({self.hash})"

    def get(self, key: str, default: object = None) -> object:
        """A top-level field of the action (read-only)."""
        return self.mapping.get(key, default)

    @property
    def action_id(self) -> str | None:
        return text(self.mapping.get("action_id"))

    @property
    def agent_id(self) -> str | None:
        return text(self.mapping.get("agent_id"))

    @property
    def tenant_id(self) -> str | None:
        return text(self.mapping.get("tenant_id"))

    @property
    def unit(self) -> tuple[str, str] | None:
        """``(project, unit)`` the action reads, when it names both."""
        knowledge = mapping(self.mapping.get("knowledge"))
        project, unit = knowledge.get("project"), knowledge.get("unit")
        return (project, unit) if isinstance(project, str) and isinstance(unit, str) else None
