"""The PostgreSQL backend (replicas on many machines): one class per store Protocol on one pool.

Needs the ``postgres`` extra (psycopg 3 with its pool). Every store of a process shares one
:class:`PostgresDatabase`; each keeps its own tables and schema version in ``store_schema``.
"""

from kcp_opa.stores.postgres.base import PostgresBase, PostgresDatabase, is_postgres, redact
from kcp_opa.stores.postgres.challenges import PostgresChallengeStore
from kcp_opa.stores.postgres.counters import PostgresCounterStore
from kcp_opa.stores.postgres.decisions import PostgresDecisionStore
from kcp_opa.stores.postgres.executions import PostgresStore
from kcp_opa.stores.postgres.handoffs import PostgresHandoffStore

__all__ = [
    "PostgresBase",
    "PostgresChallengeStore",
    "PostgresCounterStore",
    "PostgresDatabase",
    "PostgresDecisionStore",
    "PostgresHandoffStore",
    "PostgresStore",
    "is_postgres",
    "redact",
]
