"""The executor's SQLite store, now in :mod:`kcp_opa.stores.sqlite.executions` (kept importable here)."""

from kcp_opa.stores.records import AMBIGUOUS, ExecutionRecord
from kcp_opa.stores.sqlite.base import utc_stamp as _stamp
from kcp_opa.stores.sqlite.executions import SQLiteStore

__all__ = ["AMBIGUOUS", "ExecutionRecord", "SQLiteStore", "_stamp"]
