"""The SQLite backend (the embedded default): one class per store Protocol on one shared base.

All of them may share one file (``kcp-opa serve --store``); each keeps its own tables and its
own schema version in ``store_schema``.
"""

from kcp_opa.stores.sqlite.base import SQLiteBase
from kcp_opa.stores.sqlite.challenges import SQLiteChallengeStore
from kcp_opa.stores.sqlite.counters import SQLiteCounterStore
from kcp_opa.stores.sqlite.decisions import SQLiteDecisionStore
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.stores.sqlite.handoffs import SQLiteHandoffStore

__all__ = [
    "SQLiteBase",
    "SQLiteChallengeStore",
    "SQLiteCounterStore",
    "SQLiteDecisionStore",
    "SQLiteHandoffStore",
    "SQLiteStore",
]
