"""Posted fact attestations in PostgreSQL: what issuers posted through ``POST /v1/facts``, seen
by every replica.

Implements :class:`~kcp_opa.stores.protocols.FactStore`; the statements are
:mod:`kcp_opa.stores.sql`'s and the rows :mod:`kcp_opa.stores.records`', so this module only runs them.
"""

from __future__ import annotations

from typing import Any

from kcp_opa.stores import sql
from kcp_opa.stores.postgres.base import DIALECT, Connection, PostgresBase
from kcp_opa.stores.records import POSTED_FACTS_READ, PostedFact, fact_of, fact_row

_BY = {column: sql.facts_bound(DIALECT, column) for column in ("action_hash", "subject_id")}


class PostgresFactStore(PostgresBase):
    """The ``posted_facts`` table."""

    component = "facts"
    steps = (sql.fact_tables(DIALECT),)
    failure = "fact store failed"

    def keep(self, fact: PostedFact) -> bool:
        kept: bool = self._run(
            lambda c: c.execute(sql.keep_fact(DIALECT), fact_row(fact)).rowcount == 1, "cannot keep the posted fact"
        )
        return kept

    def bound_to(self, action_hash: str, subject_id: str | None) -> list[PostedFact]:
        def read(c: Connection) -> list[Any]:
            rows = c.execute(_BY["action_hash"], (action_hash, POSTED_FACTS_READ)).fetchall()
            if subject_id is not None:
                rows += c.execute(_BY["subject_id"], (subject_id, POSTED_FACTS_READ)).fetchall()
            return rows

        return [fact_of(row) for row in self._run(read, "cannot read the posted facts")]

    def prune(self, expired_before: int) -> int:
        pruned: int = self._run(
            lambda c: c.execute(sql.prune_facts(DIALECT), (expired_before,)).rowcount, "cannot prune the posted facts"
        )
        return pruned

    def count(self) -> int:
        row = self._run(lambda c: c.execute("SELECT count(*) FROM posted_facts").fetchone())
        return int(row[0]) if row else 0
