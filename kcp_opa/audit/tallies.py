"""The parts of a ledger's count that need more than one entry to get right.

A refusal is one event however many layers record it: the executor or the control desk writes
its ``failure`` entry, and the service that refuses the call writes one more naming it
(``refusal_seq``); the second adds who called which tool, it is not a second refusal. A
re-decision (an entry with ``redecision``: at a control answer, a record reloaded, a receipt
issued or verified, an execution) is linked to the decision it re-decides
(``original_decision_id``) and counted as such, never as a decision of its own. The policy
versions are the bundle revisions the entries name (``bundles``), each from the entry that
first named it to the one that last did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

#: What each re-decision step means, as the report says it.
REDECISION_STEPS = {
    "control_answer": "a control answered",
    "record_reloaded": "a decision record read back from the store and re-decided (each later step on a store)",
    "receipt_issue": "a receipt issued",
    "receipt_verification": "a receipt verified",
    "execution": "an execution",
}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def decision_model(entry: Mapping[str, Any]) -> str:
    """The model a decision entry records: the gate's ``model_id`` fact (the trust registry's, in the
    archived input's context) before the model the action states; "(none)" when neither says."""
    fact = _mapping(_mapping(_mapping(_mapping(entry.get("input")).get("context")).get("facts")).get("model_id"))
    known = fact.get("value")
    if isinstance(known, str) and known:
        return known
    stated = entry.get("model")
    return str(stated) if stated else "(none)"


def redecision_of(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    """The decision a decision entry re-decides and the step, or None for an original decision."""
    step, original = entry.get("redecision"), entry.get("original_decision_id")
    if isinstance(step, str) and step and isinstance(original, str) and original:
        return original, step
    return None


class Refusals:
    """Refusals by code, each once: a ``failure`` entry naming an earlier one (``refusal_seq``) adds its
    tool and principal to that refusal's row instead of counting again."""

    def __init__(self) -> None:
        self.by_code: Counter[str] = Counter()
        self.rows: list[dict[str, Any]] = []
        self._by_seq: dict[int, dict[str, Any]] = {}

    def add(self, row: dict[str, Any], entry: Mapping[str, Any]) -> bool:
        """Count ``row`` (the failure entry's row); False when it only named an earlier refusal."""
        earlier = self._by_seq.get(entry["refusal_seq"]) if isinstance(entry.get("refusal_seq"), int) else None
        if earlier is not None:
            earlier["tool"] = str(entry.get("tool") or "")
            earlier["principal"] = row["principal"] or earlier["principal"]
            return False
        self.by_code[row["code"]] += 1
        self.rows.append(row)
        if isinstance(entry.get("seq"), int):
            self._by_seq[entry["seq"]] = row
        return True


class PolicyTimeline:
    """Each bundle revision the ledger's entries name: first and last seen (seq, time), its sha256 and
    signer, how many entries name it and how many of them are decisions (originals and re-decisions)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}

    def add(self, entry: Mapping[str, Any]) -> None:
        for named in _mapping(entry.get("bundles")).values():
            revision = _mapping(named).get("revision")
            if not isinstance(revision, str) or not revision:
                continue
            seen = {"seq": entry.get("seq"), "timestamp": str(entry.get("timestamp") or "")}
            row = self._rows.setdefault(
                revision,
                {
                    "revision": revision,
                    "sha256": str(_mapping(named).get("sha256") or ""),
                    "keyid": str(_mapping(named).get("keyid") or ""),
                    "first_seen": seen,
                    "entries": 0,
                    "decision_entries": 0,
                },
            )
            row["last_seen"] = seen
            row["entries"] += 1
            row["decision_entries"] += 1 if entry.get("type") == "decision" else 0

    def rows(self) -> list[dict[str, Any]]:
        """One row per revision, in the order the ledger first named them."""
        return sorted(self._rows.values(), key=lambda row: row["first_seen"]["seq"] or 0)
