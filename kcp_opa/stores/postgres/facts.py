"""Posted fact attestations in PostgreSQL: what issuers posted through ``POST /v1/facts``, seen
by every replica.

Implements :class:`~kcp_opa.stores.protocols.FactStore` with :class:`~kcp_opa.stores.postedfacts.PostedFactRows`
on this backend's base: nothing here but the table's migration step.
"""

from __future__ import annotations

from kcp_opa.stores import sql
from kcp_opa.stores.postedfacts import PostedFactRows
from kcp_opa.stores.postgres.base import DIALECT, PostgresBase


class PostgresFactStore(PostedFactRows, PostgresBase):
    """The ``posted_facts`` table."""

    component = "facts"
    steps = (sql.fact_tables(DIALECT),)
    failure = "fact store failed"
    dialect = DIALECT
