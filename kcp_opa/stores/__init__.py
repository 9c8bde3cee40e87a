"""The gate's state behind one seam: a Protocol per piece of state, one package per backend.

:mod:`kcp_opa.stores.protocols` says what each store must guarantee; :mod:`kcp_opa.stores.storedtypes`
holds the documents they return; :mod:`kcp_opa.stores.sqlite` is the embedded backend. Callers
(the executor, the service) are typed to the Protocols, so another backend is a new package here
implementing them, chosen where the service builds its stores.
"""

from kcp_opa.stores.protocols import (
    ChallengeStore,
    CounterStore,
    CounterView,
    DecisionStore,
    ExecutionStore,
    ExecutorStore,
    HandoffStore,
    LedgerStore,
    NonceStore,
)
from kcp_opa.stores.storedtypes import (
    AMBIGUOUS,
    Challenge,
    ChallengeError,
    ExecutionRecord,
    LedgerSnapshot,
    StoredDecision,
    Transfer,
    TransferTotals,
)

__all__ = [
    "AMBIGUOUS",
    "Challenge",
    "ChallengeError",
    "ChallengeStore",
    "CounterStore",
    "CounterView",
    "DecisionStore",
    "ExecutionRecord",
    "ExecutionStore",
    "ExecutorStore",
    "HandoffStore",
    "LedgerSnapshot",
    "LedgerStore",
    "NonceStore",
    "StoredDecision",
    "Transfer",
    "TransferTotals",
]
