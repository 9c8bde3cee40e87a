"""The Merkle tree the chain keeps as it appends, on both backends, against a from-scratch recomputation.

Its right edge gives the same root as the full RFC 9162 tree at every size; the ledger's
writer keeps it beside the head (a file ``<ledger>.tree``, a PostgreSQL ``ledger_chain.tree``),
signs its root in every checkpoint, and a restarted writer (or one whose kept state is stale,
damaged or missing) resumes it so the root still equals the tree recomputed from the entries.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import run_cli

from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.stores.protocols import LedgerStore
from kcp_opa.trail.checkpoint import read_checkpoint
from kcp_opa.trail.frontier import TreeState, encode_root
from kcp_opa.trail.ledger import AuditLedger, kept_tree_root, tree_path
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.locations import open_ledger, readable
from kcp_opa.trail.merkle import MerkleTree
from kcp_opa.trail.verify import verify_ledger

NAMES = itertools.count()


def test_frontier_root_is_the_rfc9162_root_at_every_size() -> None:
    tree, state = MerkleTree(), TreeState.empty("h")
    assert state.root == tree.root()
    for index in range(300):
        leaf = f"leaf {index}".encode()
        tree.append(leaf)
        state = state.extended(leaf, f"h{index}")
        assert state.root == tree.root(), index
        assert len(state.frontier) == state.seq.bit_count()  # O(log n) hashes kept
    assert TreeState.parse(state.line()) == state


@pytest.mark.parametrize(
    "damage",
    [b"", b"{not json", b'{"format":"kcp-opa-tree-state/1","seq":3,"entry_hash":"x","frontier":[]}'],
)
def test_a_damaged_state_reads_as_none(damage: bytes) -> None:
    assert TreeState.parse(damage) is None


class Where:
    def __init__(self, location: str, database: str | None) -> None:
        self.location, self.database = location, database
        self.opened: list[LedgerStore] = []

    def open(self, **options: Any) -> LedgerStore:
        ledger = open_ledger(self.location, **options)
        self.opened.append(ledger)
        return ledger

    def kept(self) -> TreeState | None:
        if self.database is None:
            return TreeState.parse(tree_path(Path(self.location)).read_bytes().partition(b"\n")[0])
        with psycopg.connect(self.location) as connection:
            row = connection.execute("SELECT tree FROM ledger_chain").fetchone()
        return TreeState.parse(row[0] if row else None)

    def set_kept(self, line: bytes | None) -> None:
        if self.database is None:
            path = tree_path(Path(self.location))
            path.unlink(missing_ok=True) if line is None else path.write_bytes(line)
            return
        with psycopg.connect(self.location) as connection:
            connection.execute("UPDATE ledger_chain SET tree = %s", (None if line is None else line.decode(),))

    def recomputed(self) -> LedgerTree:
        with readable(self.location) as path:
            return LedgerTree.read(path)

    def close(self) -> None:
        for ledger in self.opened:
            release = getattr(ledger, "release", None)
            if release is not None:
                release()


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    if request.param == "file":
        opened = Where(str(tmp_path / "ledger.jsonl"), None)
    else:
        name = f"kcp_tree_{next(NAMES)}"
        opened = Where(request.getfixturevalue("postgres").database(name), name)
    try:
        yield opened
    finally:
        opened.close()


def _event(index: int) -> dict[str, Any]:
    return {"type": "decision", "decision_id": f"dec_{index:04d}", "result": {"allow": index % 2 == 0}}


def _assert_kept_is_recomputed(where: Where, ledger: Any) -> None:
    """The writer's tree at the head, and the one it keeps beside the head, are the recomputed tree."""
    tree = where.recomputed()
    head = ledger.tree_head()
    assert head is not None and head.seq == tree.tree.size and head.root == tree.tree.root()
    kept = where.kept()
    assert kept is not None and kept.seq == tree.tree.size
    assert kept.root == tree.tree.root(), "the kept tree is not the tree recomputed from the entries"


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_the_kept_tree_is_the_recomputed_tree_and_checkpoints_sign_its_root(where: Where, durability: str) -> None:
    key = generate_ed25519("writer")
    ledger = where.open(durability=durability, checkpoint_key=key, checkpoint_every=7)
    for index in range(40):
        ledger.append(_event(index))
    _assert_kept_is_recomputed(where, ledger)
    closed = ledger.close()
    assert closed is not None
    tree = where.recomputed()
    checkpoints = [read_checkpoint(line) for line in _checkpoint_lines(where)]
    assert len(checkpoints) >= 6
    for checkpoint in checkpoints:  # every checkpoint, periodic or closing, carries the root at its seq
        assert checkpoint.tree_root == encode_root(tree.tree.root(checkpoint.seq)), checkpoint.seq
        checkpoint.verify(Keyring({key.kid: key}))


def _checkpoint_lines(where: Where) -> list[Any]:
    if where.database is None:
        text = Path(where.location + ".checkpoints").read_text()
        return [json.loads(line) for line in text.splitlines()]
    with psycopg.connect(where.location) as connection:
        rows = connection.execute("SELECT line FROM ledger_checkpoints ORDER BY id").fetchall()
    return [json.loads(row[0]) for row in rows]


@pytest.mark.parametrize("kept", ["restart", "missing", "stale", "damaged", "wrong"])
def test_a_restarted_writer_resumes_the_tree(where: Where, kept: str) -> None:
    """A new writer (a restart) continues the kept tree; a missing, stale, damaged or foreign one is recomputed."""
    first = where.open()
    for index in range(13):
        first.append(_event(index))
    first.tree_head()
    older = where.kept()
    assert older is not None
    for index in range(13, 21):
        first.append(_event(index))
    if kept == "missing":
        where.set_kept(None)
    elif kept == "stale":  # a crash after the entries, before the state: it stands behind the head
        where.set_kept(older.line())
    elif kept == "damaged":
        where.set_kept(b'{"format":"kcp-opa-tree-state/1","seq":')
    elif kept == "wrong":  # a state that claims the head but does not lead from the entries
        where.set_kept(TreeState(older.seq, "sha256:" + "0" * 64, older.frontier).line())
    second = where.open()
    for index in range(21, 30):
        second.append(_event(index))
    _assert_kept_is_recomputed(where, second)
    first.append(_event(30))  # the first writer is behind: it brings its own tree forward
    _assert_kept_is_recomputed(where, first)


def test_audit_verify_recomputes_the_kept_tree(tmp_path: Path) -> None:
    """A kept state whose root is not the entries' tree is reported by verify (never trusted as is)."""
    path = tmp_path / "ledger.jsonl"
    ledger = AuditLedger(path)
    for index in range(9):
        ledger.append(_event(index))
    ledger.tree_head()
    roots = kept_tree_root(path)
    assert verify_ledger(path, tree_roots=roots).ok
    state = TreeState.parse(tree_path(path).read_bytes().partition(b"\n")[0])
    assert state is not None
    forged = (b"\x07" * 32, *state.frontier[1:])
    tree_path(path).write_bytes(TreeState(state.seq, state.entry_hash, forged).line())
    report = verify_ledger(path, tree_roots=kept_tree_root(path))
    assert not report.ok and "Merkle tree of seq 1..9" in report.problems[0].message
    assert report.problems[0].line == 10
    assert base64.b64decode(str(verify_ledger(path).tree_root)) == LedgerTree.read(path).tree.root()


def test_the_kept_tree_shows_a_cut_at_an_entry_boundary(tmp_path: Path) -> None:
    """A ledger cut back (whole lines, the chain still holds) is caught by the kept tree's size."""
    path = tmp_path / "ledger.jsonl"
    ledger = AuditLedger(path)
    for index in range(6):
        ledger.append(_event(index))
    ledger.tree_head()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]))
    assert verify_ledger(path).ok  # the chain alone cannot tell
    report = verify_ledger(path, tree_roots=kept_tree_root(path))
    assert not report.ok and "truncated: the chain ends at seq 3 but seq 6" in report.problems[0].message


def test_audit_verify_recomputes_the_tree_kept_on_either_backend(where: Where) -> None:
    """`audit verify LOCATION` checks the writer's kept tree (a file's LEDGER.tree, the database's column)."""
    ledger = where.open()
    for index in range(11):
        ledger.append(_event(index))
    head = ledger.tree_head()  # type: ignore[attr-defined]
    assert head is not None
    honest = run_cli("audit", "verify", where.location, "--format", "json")
    assert honest.returncode == 0, honest.stderr
    assert json.loads(honest.stdout)["tree_root"] == encode_root(head.root)
    where.set_kept(TreeState(head.seq, head.entry_hash, (b"\x07" * 32, *head.frontier[1:])).line())
    forged = run_cli("audit", "verify", where.location, "--format", "json")
    assert forged.returncode == 1
    assert "Merkle tree of seq 1..11" in json.loads(forged.stdout)["problems"][0]["message"]
