"""Posted fact attestations in SQLite: what issuers posted through ``POST /v1/facts``.

Implements :class:`~kcp_opa.stores.protocols.FactStore` with :class:`~kcp_opa.stores.postedfacts.PostedFactRows`
on this backend's base: nothing here but the table's place in the store file.
"""

from __future__ import annotations

from kcp_opa.stores import sql
from kcp_opa.stores.postedfacts import PostedFactRows
from kcp_opa.stores.sqlite.base import DIALECT, SQLiteBase, statements


class SQLiteFactStore(PostedFactRows, SQLiteBase):
    """The ``posted_facts`` table (in the service's store file)."""

    component = "facts"
    steps = (statements(*sql.fact_tables(DIALECT)),)
    failure = "fact store failed"
    dialect = DIALECT
