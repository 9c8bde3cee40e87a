"""Posted fact attestations in SQLite: what issuers posted through ``POST /v1/facts``.

Implements :class:`~kcp_opa.stores.protocols.FactStore`; the rows are built by
:func:`kcp_opa.stores.records.posted_fact`, so this module holds only SQL.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from kcp_opa.stores.records import POSTED_FACTS_READ, PostedFact
from kcp_opa.stores.sqlite.base import SQLiteBase, statements

_TABLES = statements(
    """CREATE TABLE IF NOT EXISTS posted_facts (
    fact_id TEXT PRIMARY KEY,
    issuer TEXT NOT NULL,
    fact TEXT NOT NULL,
    action_hash TEXT,
    subject_id TEXT,
    issued_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    document TEXT NOT NULL,
    posted_at TEXT NOT NULL,
    CHECK ((action_hash IS NULL) != (subject_id IS NULL))
)""",
    "CREATE INDEX IF NOT EXISTS posted_facts_action ON posted_facts (action_hash, issued_at)",
    "CREATE INDEX IF NOT EXISTS posted_facts_subject ON posted_facts (subject_id, issued_at)",
)
_SELECT = "SELECT fact_id, issuer, fact, action_hash, subject_id, issued_at, expires_at, document FROM posted_facts"
_BY_ACTION = _SELECT + " WHERE action_hash = ? ORDER BY issued_at DESC LIMIT ?"
_BY_SUBJECT = _SELECT + " WHERE subject_id = ? ORDER BY issued_at DESC LIMIT ?"


def _fact(row: Any) -> PostedFact:
    return PostedFact(row[0], row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]))


class SQLiteFactStore(SQLiteBase):
    """The ``posted_facts`` table (in the service's store file)."""

    component = "facts"
    steps = (_TABLES,)
    failure = "fact store failed"

    def keep(self, fact: PostedFact) -> bool:
        row = (fact.fact_id, fact.issuer, fact.fact, fact.action_hash, fact.subject_id, fact.issued_at)
        document = json.dumps(dict(fact.document), sort_keys=True)
        cursor = self._run(
            lambda c: c.execute(
                "INSERT INTO posted_facts (fact_id, issuer, fact, action_hash, subject_id, issued_at, expires_at,"
                " document, posted_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (fact_id) DO NOTHING",
                (*row, fact.expires_at, document, self.stamp()),
            ),
            "cannot keep the posted fact",
        )
        return cursor.rowcount == 1

    def bound_to(self, action_hash: str, subject_id: str | None) -> list[PostedFact]:
        def read(c: sqlite3.Connection) -> list[Any]:
            rows = c.execute(_BY_ACTION, (action_hash, POSTED_FACTS_READ)).fetchall()
            if subject_id is not None:
                rows += c.execute(_BY_SUBJECT, (subject_id, POSTED_FACTS_READ)).fetchall()
            return rows

        return [_fact(row) for row in self._run(read, "cannot read the posted facts")]

    def count(self) -> int:
        row = self._run(lambda c: c.execute("SELECT count(*) FROM posted_facts").fetchone())
        return int(row[0]) if row else 0
