"""The parts of a ledger's count that need more than one entry to get right.

A refusal is one event however many layers record it: the executor or the control desk writes
its ``failure`` entry, and the service that refuses the call writes one more naming it
(``refusal_seq``); the second adds who called which tool, it is not a second refusal. A
re-decision (an entry with ``redecision``: at a control answer, a record reloaded, a receipt
issued or verified, an execution) is linked to the decision it re-decides
(``original_decision_id``) and counted as such, never as a decision of its own. The policy
versions are the bundle revisions the entries name (``bundles``), each from the entry that
first named it to the one that last did. An execution intent is open until a later entry resolves it.
"""

from __future__ import annotations

from collections import Counter
from typing import NotRequired, TypedDict

from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, mapping

#: What each re-decision step means, as the report says it.
REDECISION_STEPS = {
    "control_answer": "a control answered",
    "record_reloaded": "a decision record read back from the store and re-decided (each later step on a store)",
    "receipt_issue": "a receipt issued",
    "receipt_verification": "a receipt verified",
    "execution": "an execution",
}


def decision_model(entry: JsonObject) -> str:
    """The model a decision entry records: the gate's ``model_id`` fact (the trust registry's, in the
    archived input's context) before the model the action states; "(none)" when neither says."""
    fact = mapping(mapping(mapping(mapping(entry.get("input")).get("context")).get("facts")).get("model_id"))
    known = fact.get("value")
    if isinstance(known, str) and known:
        return known
    stated = entry.get("model")
    return str(stated) if stated else "(none)"


def redecision_of(entry: JsonObject) -> tuple[str, str] | None:
    """The decision a decision entry re-decides and the step, or None for an original decision."""
    step, original = entry.get("redecision"), entry.get("original_decision_id")
    if isinstance(step, str) and step and isinstance(original, str) and original:
        return original, step
    return None


class RefusalRow(TypedDict):
    seq: object
    code: str
    principal: str
    decision_id: str
    message: str
    timestamp: str
    tool: NotRequired[str]  # the tool the service refused, from a later entry naming this refusal


class Refusals:
    """Refusals by code, each once: a ``failure`` entry naming an earlier one (``refusal_seq``) adds its
    tool and principal to that refusal's row instead of counting again."""

    def __init__(self) -> None:
        self.by_code: Counter[str] = Counter()
        self.rows: list[RefusalRow] = []
        self._by_seq: dict[int, RefusalRow] = {}

    def add(self, row: RefusalRow, entry: JsonObject) -> bool:
        """Count ``row`` (the failure entry's row); False when it only named an earlier refusal."""
        named, seq = entry.get("refusal_seq"), entry.get("seq")
        earlier = self._by_seq.get(named) if isinstance(named, int) else None
        if earlier is not None:
            earlier["tool"] = str(entry.get("tool") or "")
            earlier["principal"] = row["principal"] or earlier["principal"]
            return False
        self.by_code[row["code"]] += 1
        self.rows.append(row)
        if isinstance(seq, int):
            self._by_seq[seq] = row
        return True


class Seen(TypedDict):
    seq: object
    timestamp: str


class TimelineRow(TypedDict):
    revision: str
    sha256: str
    keyid: str
    first_seen: Seen
    entries: int
    decision_entries: int
    last_seen: NotRequired[Seen]  # set with the first entry, moved by each later one


class PolicyTimeline:
    """Each bundle revision the ledger's entries name: first and last seen (seq, time), its sha256 and
    signer, how many entries name it and how many of them are decisions (originals and re-decisions)."""

    def __init__(self) -> None:
        self._rows: dict[str, TimelineRow] = {}

    def add(self, entry: JsonObject) -> None:
        for named in mapping(entry.get("bundles")).values():
            revision = mapping(named).get("revision")
            if not isinstance(revision, str) or not revision:
                continue
            seen: Seen = {"seq": entry.get("seq"), "timestamp": str(entry.get("timestamp") or "")}
            row = self._rows.setdefault(
                revision,
                {
                    "revision": revision,
                    "sha256": str(mapping(named).get("sha256") or ""),
                    "keyid": str(mapping(named).get("keyid") or ""),
                    "first_seen": seen,
                    "entries": 0,
                    "decision_entries": 0,
                },
            )
            row["last_seen"] = seen
            row["entries"] += 1
            row["decision_entries"] += 1 if entry.get("type") == "decision" else 0

    def rows(self) -> list[TimelineRow]:
        """One row per revision, in the order the ledger first named them."""
        return sorted(self._rows.values(), key=lambda row: integer(row["first_seen"]["seq"]) or 0)


class OpenIntents:
    """Execution intents without an outcome: an entry naming the intent's seq (``intent_seq``), or a
    reconciliation of its idempotency key written after it, resolves it."""

    def __init__(self) -> None:
        self._open: dict[int, JsonDict] = {}

    def add(self, entry: JsonObject) -> None:
        seq = entry.get("seq")
        if entry.get("type") == "intent" and isinstance(seq, int):
            self._open[seq] = {
                "seq": seq,
                "idempotency_key": str(entry.get("idempotency_key") or ""),
                "receipt_id": str(entry.get("receipt_id") or ""),
                "agent_id": str(entry.get("agent_id") or ""),
                "timestamp": str(entry.get("timestamp")),
            }
            return
        named = entry.get("intent_seq")
        if isinstance(named, int):
            self._open.pop(named, None)
        if entry.get("type") == "execution" and entry.get("reconciled"):
            key = str(entry.get("idempotency_key") or "")
            for seq in [s for s, row in self._open.items() if row["idempotency_key"] == key]:
                del self._open[seq]

    def rows(self) -> list[JsonDict]:
        """One row per unresolved intent, in chain order: seq, idempotency_key, receipt_id, agent_id, timestamp."""
        return [self._open[seq] for seq in sorted(self._open)]
