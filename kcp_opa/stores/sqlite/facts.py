"""Posted fact attestations in SQLite: what issuers posted through ``POST /v1/facts``.

Implements :class:`~kcp_opa.stores.protocols.FactStore`; the statements are
:mod:`kcp_opa.stores.sql`'s and the rows :mod:`kcp_opa.stores.records`', so this module only runs them.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from kcp_opa.stores import sql
from kcp_opa.stores.records import POSTED_FACTS_READ, PostedFact, fact_of, fact_row
from kcp_opa.stores.sqlite.base import DIALECT, SQLiteBase, statements

_BY_ACTION = sql.facts_bound(DIALECT, "action_hash")
_BY_SUBJECT = sql.facts_bound(DIALECT, "subject_id")


class SQLiteFactStore(SQLiteBase):
    """The ``posted_facts`` table (in the service's store file)."""

    component = "facts"
    steps = (statements(*sql.fact_tables(DIALECT)),)
    failure = "fact store failed"

    def keep(self, fact: PostedFact) -> bool:
        cursor = self._run(lambda c: c.execute(sql.keep_fact(DIALECT), fact_row(fact)), "cannot keep the posted fact")
        return cursor.rowcount == 1

    def bound_to(self, action_hash: str, subject_id: str | None) -> list[PostedFact]:
        def read(c: sqlite3.Connection) -> list[Any]:
            rows = c.execute(_BY_ACTION, (action_hash, POSTED_FACTS_READ)).fetchall()
            if subject_id is not None:
                rows += c.execute(_BY_SUBJECT, (subject_id, POSTED_FACTS_READ)).fetchall()
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
