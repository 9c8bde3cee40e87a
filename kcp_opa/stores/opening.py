"""Where a deployment's stores are opened from one setting: the one place a backend is chosen.

Today every location is a SQLite file path (all the service's stores in one file). Another
backend adds its scheme here (``postgresql://...``) and returns its own classes; callers only
ever see the Protocols in :class:`Stores`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kcp_opa.stores.protocols import ChallengeStore, CounterStore, DecisionStore, ExecutorStore, HandoffStore
from kcp_opa.stores.sqlite import (
    SQLiteChallengeStore,
    SQLiteCounterStore,
    SQLiteDecisionStore,
    SQLiteHandoffStore,
    SQLiteStore,
)


@dataclass(frozen=True)
class Stores:
    """Every store a gate service needs, and where they are (shown in status; never a credential)."""

    executions: ExecutorStore
    handoffs: HandoffStore
    challenges: ChallengeStore
    decisions: DecisionStore
    location: str
    counters: CounterStore | None = None


def open_stores(location: str | Path) -> Stores:
    """Open (creating or migrating, atomically) the stores at ``location``; raises StoreError."""
    path = Path(location)
    return Stores(
        executions=SQLiteStore(path),
        handoffs=SQLiteHandoffStore(path),
        challenges=SQLiteChallengeStore(path),
        decisions=SQLiteDecisionStore(path),
        location=str(path),
        counters=SQLiteCounterStore(path),
    )
