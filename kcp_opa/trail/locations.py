"""Where a ledger is, from one setting: a JSON Lines file, or a ``postgresql://`` database.

The one place a ledger backend is chosen (:func:`open_ledger`), and the one way every ``audit``
command reads either (:func:`readable`): a database ledger is dumped, from one snapshot, into a
private temporary JSON Lines file that is byte for byte what a file ledger holds, and the file
readers (verify, replay, query, export, case) run on it unchanged. A database location takes no
password: libpq reads ``PGPASSWORD`` or a ``PGPASSFILE``, so no secret is in argv or logs.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kcp_opa.core.errors import LedgerError, StoreError
from kcp_opa.core.signing import Key
from kcp_opa.stores.opening import is_database as is_database  # one rule for stores and ledgers
from kcp_opa.stores.opening import shown as shown
from kcp_opa.stores.protocols import LedgerStore
from kcp_opa.trail.ledger import AuditLedger, checkpoint_path, tree_path


def _postgres_ledger() -> type:
    try:
        from kcp_opa.trail.pgledger import PostgresLedger
    except ImportError as exc:
        raise LedgerError(f"a postgresql:// ledger needs psycopg: pip install 'kcp-opa[postgres]' ({exc})") from None
    return PostgresLedger


def open_ledger(
    location: str | Path,
    *,
    durability: str = "fsync",
    checkpoint_key: Key | None = None,
    checkpoint_every: int = 1000,
) -> LedgerStore:
    """The ledger at ``location`` (a file path, or a ``postgresql://`` URI); LedgerError if it cannot open."""
    if is_database(location):
        ledger: LedgerStore = _postgres_ledger()(
            str(location), durability=durability, checkpoint_key=checkpoint_key, checkpoint_every=checkpoint_every
        )
        return ledger
    return AuditLedger(
        location, durability=durability, checkpoint_key=checkpoint_key, checkpoint_every=checkpoint_every
    )


def dump(location: str, output: Path) -> tuple[int, int]:
    """Write a database ledger to ``output`` (JSON Lines) and its checkpoints beside it: (entries, checkpoints).

    The file verifies alone (``audit verify FILE --checkpoint FILE.checkpoints``), as a file
    ledger would; it is written from one snapshot, so it is a consistent prefix of the chain.
    """
    _postgres_ledger()  # psycopg is there, or a one-line error
    from kcp_opa.stores.postgres.ledger import read_chain

    try:
        with output.open("xb") as sink:
            dumped = read_chain(location, sink)
        entries, lines = dumped.entries, dumped.checkpoints
        if lines:
            checkpoint_path(output).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        if dumped.tree is not None:  # the writer's kept tree, which `audit verify` recomputes
            tree_path(output).write_text(dumped.tree + "\n", encoding="utf-8")
    except OSError as exc:
        raise LedgerError(f"{output}: cannot write: {exc.strerror or exc}") from None
    except StoreError as exc:  # the database did not answer, or the location carries a password
        raise LedgerError(str(exc)) from None
    return entries, len(lines)


@contextlib.contextmanager
def readable(location: str | Path) -> Iterator[Path]:
    """A path the file readers can open for ``location``: the file itself, or a dump of the database."""
    if not is_database(location):
        yield Path(location)
        return
    with tempfile.TemporaryDirectory(prefix="kcp-opa-ledger-") as tmp:
        path = Path(tmp) / "ledger.jsonl"
        dump(str(location), path)
        yield path
