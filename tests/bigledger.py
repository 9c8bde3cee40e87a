"""A ledger of thousands of entries for the report's filters and pages, written as the gate writes them.

Each decision is one original ``decision`` entry (agent, model, task type and tenant cycling, a
routing state), then: a control result and the desk's re-decision under the decision's own id
(a held decision, now APPROVED), or a refusal naming it; and for each approved one an execution's
re-decision under an id of its own. The chain is written in batches (one fsync each), as group
commit writes it. ``expected`` is what a report of it must count, computed from the same plan.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcp_opa.trail.ledger import AuditLedger

START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
STATES = ("ALLOW", "DENY", "HUMAN_APPROVAL")


@dataclass
class Planned:
    """One decision of the plan: what a filter matches it by and what the report counts of it."""

    decision_id: str
    agent: str
    model: str
    task_type: str
    tenant: str
    state: str
    status: str
    at: dt.datetime
    entries: list[dict[str, Any]] = field(default_factory=list)


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def plan(decisions: int) -> list[Planned]:
    planned = []
    for i in range(decisions):
        state = STATES[i % 3]
        at = START + dt.timedelta(minutes=10 * i)
        held = Planned(
            f"dec_{i:05d}", f"agent_{i % 7}", f"model-{i % 3}", f"task_{i % 4}", f"tenant_{i % 5}", state,
            {"ALLOW": "APPROVED", "DENY": "DENIED", "HUMAN_APPROVAL": "APPROVED"}[state], at,
        )  # fmt: skip
        decision = {
            "type": "decision", "decision_id": held.decision_id, "agent_id": held.agent, "model": held.model,
            "decision": state, "authorization_status": "PENDING_CONTROLS" if state == "HUMAN_APPROVAL" else held.status,
            "reason_codes": [f"reason_{state.lower()}"], "kcp_unit_applied": "finance/payments",
            "input": {"action": {"action_type": held.task_type, "tenant_id": held.tenant}},
            "bundles": {"kcp-opa": {"revision": "rev-1" if i < decisions // 2 else "rev-2", "sha256": "0" * 64}},
            "timestamp": _stamp(at),
        }  # fmt: skip
        held.entries.append(decision)
        later = _stamp(at + dt.timedelta(minutes=1))
        if state == "HUMAN_APPROVAL":
            held.entries.append(
                {"type": "control", "decision_id": held.decision_id, "timestamp": later,
                 "evidence": {"control": "independent_human_approval", "actor_id": "anna", "issuer": "approval-app",
                              "status": "PASSED", "decision_id": held.decision_id}}
            )  # fmt: skip
            held.entries.append(
                {**decision, "authorization_status": "APPROVED", "redecision": "control_answer",
                 "original_decision_id": held.decision_id, "timestamp": later}
            )  # fmt: skip
        elif state == "DENY":
            held.entries.append(
                {"type": "failure", "code": "denied_retry", "decision_id": held.decision_id, "timestamp": later,
                 "message": "the agent retried a denied action", "principal": {"id": held.agent}}
            )  # fmt: skip
        if held.status == "APPROVED":
            held.entries.append(
                {**decision, "decision_id": f"{held.decision_id}_x", "authorization_status": "APPROVED",
                 "redecision": "execution", "original_decision_id": held.decision_id,
                 "timestamp": _stamp(at + dt.timedelta(minutes=2))}
            )  # fmt: skip
        planned.append(held)
    return planned


def write(path: Path, planned: list[Planned], batch: int = 500) -> int:
    """The plan's entries in chain order; returns how many were written."""
    entries = [entry for held in planned for entry in held.entries]
    ledger = AuditLedger(path)
    for start in range(0, len(entries), batch):
        ledger._write_batch(entries[start : start + batch])  # one fsync a batch: the group commit's path
    ledger.close()
    return len(entries)


def expected(planned: list[Planned]) -> dict[str, Any]:
    """The report's counts of ``planned``: decisions, by final state and status, re-decisions, refusals."""
    return {
        "decisions": len(planned),
        "by_state": Counter(p.state for p in planned),
        "by_status": Counter(p.status for p in planned),
        "redecisions": sum(1 for p in planned for entry in p.entries if "redecision" in entry),
        "refusals": sum(1 for p in planned if p.state == "DENY"),
    }
