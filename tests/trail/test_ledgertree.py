"""The ledger's tree from the LedgerStore read API: the same leaves, the stored lines, on both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kcp_opa.core.errors import LedgerError
from kcp_opa.trail.ledger import AuditLedger
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.merkle import MerkleTree


def _fill(ledger: Any, count: int = 6) -> None:
    for n in range(count):
        ledger.append({"type": "decision", "decision_id": f"dec_{n}", "amount": n})


def test_a_file_ledger_tree_is_over_its_lines_and_named_by_its_ledger_id(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = AuditLedger(path)
    with pytest.raises(LedgerError, match="no entries"):
        LedgerTree.of_store(ledger)
    _fill(ledger)
    header, *lines = path.read_bytes().split(b"\n")[:-1]
    tree = LedgerTree.of_store(ledger, keep=frozenset({2}))
    assert tree.tree.root() == MerkleTree.of(lines).root() and tree.kept == {2: lines[1]}
    assert tree.origin == "kcp-opa/" + json.loads(header)["ledger_id"]
    path.write_bytes(path.read_bytes() + b'{"torn":')  # a torn last line is not a leaf
    assert LedgerTree.read(path).tree.size == 6


@pytest.mark.postgres
def test_a_postgresql_ledger_tree_is_over_its_stored_lines(postgres: Any) -> None:
    import psycopg

    from kcp_opa.trail.pgledger import PostgresLedger

    location = postgres.database("kcp_ledger_tree_store")
    ledger = PostgresLedger(location)
    try:
        _fill(ledger)
        tree = LedgerTree.of_store(ledger)
    finally:
        ledger.release()
    with psycopg.connect(location) as connection:
        rows = connection.execute("SELECT line FROM ledger_entries ORDER BY seq").fetchall()
        ledger_id = connection.execute("SELECT ledger_id FROM ledger_chain").fetchone()
    assert tree.tree.root() == MerkleTree.of(row[0].encode() for row in rows).root()
    assert ledger_id is not None and tree.origin == f"kcp-opa/{ledger_id[0]}"
