"""The posted-facts store (:class:`~kcp_opa.stores.protocols.FactStore`) written once for both SQL
backends: a backend class mixes :class:`PostedFactRows` into its base, which supplies the
connection (``_run``) and the :class:`~kcp_opa.stores.sql.Dialect`; the statements are
:mod:`kcp_opa.stores.sql`'s and the rows :mod:`kcp_opa.stores.storedtypes`'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from kcp_opa.stores import sql
from kcp_opa.stores.storedtypes import POSTED_FACTS_READ, PostedFact, fact_of, fact_row

T = TypeVar("T")


class _Runs(Protocol):
    """What a backend base gives the mixin: its dialect and one call on a connection."""

    dialect: sql.Dialect

    def _run(self, work: Callable[[Any], T], failure: str | None = None) -> T: ...


class PostedFactRows:
    """The ``posted_facts`` table on any SQL backend (a mixin: see the module's note)."""

    def keep(self: _Runs, fact: PostedFact) -> bool:
        statement, row = sql.keep_fact(self.dialect), fact_row(fact)
        kept: bool = self._run(lambda c: c.execute(statement, row).rowcount == 1, "cannot keep the posted fact")
        return kept

    def bound_to(self: _Runs, action_hash: str, subject_id: str | None) -> list[PostedFact]:
        by_action = sql.facts_bound(self.dialect, "action_hash")
        by_subject = sql.facts_bound(self.dialect, "subject_id")

        def read(c: Any) -> list[Any]:
            rows = list(c.execute(by_action, (action_hash, POSTED_FACTS_READ)).fetchall())
            if subject_id is not None:
                rows += c.execute(by_subject, (subject_id, POSTED_FACTS_READ)).fetchall()
            return rows

        return [fact_of(row) for row in self._run(read, "cannot read the posted facts")]

    def prune(self: _Runs, expired_before: int) -> int:
        statement = sql.prune_facts(self.dialect)
        pruned: int = self._run(lambda c: c.execute(statement, (expired_before,)).rowcount, "cannot prune the facts")
        return pruned

    def count(self: _Runs) -> int:
        row = self._run(lambda c: c.execute("SELECT count(*) FROM posted_facts").fetchone())
        return int(row[0]) if row else 0
