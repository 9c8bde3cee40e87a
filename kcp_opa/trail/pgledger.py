"""The audit ledger in PostgreSQL: one chain per deployment, shared by every ``kcp-opa serve`` replica.

Entries are built exactly as the file ledger builds them (``kcp_opa.trail.ledger``): the same
header, seq, previous_hash, writer signature and entry_hash, kept as the same canonical JSON
lines. Dumped in seq order after the header, the database *is* a ledger file, so ``audit
verify/replay/query/export/case`` read it through :func:`kcp_opa.trail.locations.readable`.

An append runs in one transaction that locks the chain head (``kcp_opa.stores.postgres.ledger``):
replicas take turns, so the chain never forks, and concurrent decisions in one process share a
transaction (group commit). The head is checked against its last entry before it is extended
(a tampered head or tail is refused, not built on). A database that is down, failing or
read-only raises :class:`~kcp_opa.core.errors.LedgerUnavailableError` (a ``store_unavailable``
fault): the gate raises it rather than answer, and nothing a caller saw fail is committed. A
writer key binds the chain as it binds a file: the header names the key, every entry is signed,
a checkpoint is committed with the first entry and every ``checkpoint_every`` entries, and a
writer extends only a chain whose last entry its key signed, verified once in full
against its last checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kcp_opa.core.canonical import canonical_hash, canonical_json
from kcp_opa.core.errors import KeyringError, LedgerError, LedgerUnavailableError, StoreError, StoreUnavailableError
from kcp_opa.core.groupcommit import GroupCommit
from kcp_opa.core.signing import Key, Keyring, sign_document
from kcp_opa.stores.postgres.base import PostgresDatabase
from kcp_opa.stores.postgres.ledger import ChainHead, ChainRow, ChainView, PostgresChain
from kcp_opa.stores.records import LedgerSnapshot
from kcp_opa.trail.checkpoint import Checkpoint, read_checkpoints
from kcp_opa.trail.ledger import header_line
from kcp_opa.trail.record import LedgerEntry
from kcp_opa.trail.verify import (
    ENTRY_SIGNATURE,
    binding_problem,
    declared_writer,
    foreign_entry,
    is_header,
    verify_ledger,
)


class PostgresLedger:
    """Append entries to the chain in one PostgreSQL database; ``durability`` "group" (default) or "fsync".

    Both commit before ``append`` returns ("fsync": one transaction per entry; "group": one per
    batch of the entries waiting in this process). The location takes no password (libpq reads
    ``PGPASSWORD`` or a ``PGPASSFILE``).
    """

    def __init__(
        self,
        location: str,
        *,
        durability: str = "group",
        checkpoint_key: Key | None = None,
        checkpoint_every: int = 1000,
        database: PostgresDatabase | None = None,
    ) -> None:
        if durability not in {"fsync", "group"}:
            raise ValueError("durability is 'fsync' or 'group'")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every is at least 1")
        try:
            self.database = database or PostgresDatabase(location)
            self.chain = PostgresChain(self.database)
        except StoreUnavailableError as exc:
            raise LedgerUnavailableError(str(exc)) from None
        except StoreError as exc:
            raise LedgerError(str(exc)) from None
        self.durability = durability
        self.checkpoint_key = checkpoint_key
        self.checkpoint_every = checkpoint_every
        self._trusted = Keyring({checkpoint_key.kid: checkpoint_key}) if checkpoint_key is not None else None
        self._verified = checkpoint_key is None
        self._head: tuple[str, int, str] | None = None  # (ledger_id, seq, hash) this writer last wrote
        self._ledger_id = ""
        self._last_checkpoint: Checkpoint | None = None
        self._lock = threading.Lock()
        self._group = GroupCommit(self._write_batch, max_batch=512)

    @property
    def location(self) -> str:
        return self.database.location

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Chain and commit one entry; returns it with seq, previous_hash and entry_hash (LedgerError if not)."""
        if self.durability == "fsync":
            with self._lock:
                return self._write_batch([dict(entry)])[0]
        return self._group.submit(dict(entry))

    def close(self) -> dict[str, Any] | None:
        """With a writer key, commit a signed checkpoint of the current head; returns its wire form (None if empty).

        The head is admitted as for an append (the chain's true end, its last entry this key's), in
        the transaction that commits the checkpoint: a writer never signs a head it would not extend.
        """
        if self.checkpoint_key is None:
            return None
        with self._lock:
            head = self._call(self.chain.head)
            if head is None or head[2] == 0:
                return None
            if not self._verified:
                self._verify_once()
            marked: list[Checkpoint] = []

            def build(found: ChainHead, view: ChainView) -> tuple[list[ChainRow], str | None]:
                marked.clear()
                self._admit(found, view)
                last = self._last_checkpoint
                if last is not None and (last.seq, last.entry_hash) == (found.seq, found.head_hash):
                    marked.append(last)  # this head is checkpointed already
                    return [], None
                marked.append(self._sign_checkpoint(found.ledger_id, found.seq, found.head_hash))
                return [], _line(marked[0])

            self._call(lambda: self.chain.extend((head[0], head[1], head[3]), build))
            self._last_checkpoint = marked[0]
            return marked[0].to_dict()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LedgerSnapshot | None]:
        """The chain dumped from one REPEATABLE READ snapshot into a private file, as `audit dump` writes it.

        None while the database holds no chain; LedgerUnavailableError when it cannot be read.
        """
        with tempfile.TemporaryDirectory(prefix="kcp-opa-ledger-") as tmp:
            path = Path(tmp) / "ledger.jsonl"
            with path.open("wb") as sink:
                self._call(lambda: self.chain.dump(sink))
            held = path.stat().st_size > 0
            yield LedgerSnapshot(path, self.location, "the PostgreSQL ledger", by_seq=True) if held else None

    def healthy(self) -> bool:
        """Whether the database answers (an append may still fail: it then raises, and the gate denies)."""
        try:
            self.database.run(lambda c: c.execute("SELECT 1"), "ledger health check")
        except StoreError:
            return False
        return True

    def release(self) -> None:
        """Close the connection pool (a process that is done with the ledger)."""
        self.database.close()

    def _call(self, work: Any) -> Any:
        try:
            return work()
        except StoreUnavailableError as exc:  # the database, not the chain: a fault the caller must not dress as a DENY
            raise LedgerUnavailableError(str(exc)) from None
        except StoreError as exc:
            raise LedgerError(str(exc)) from None

    def _write_batch(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self._verified:
            self._verify_once()
        fresh = json.loads(header_line(self.checkpoint_key))
        header = (str(fresh["ledger_id"]), canonical_json(fresh).decode("utf-8"), canonical_hash(fresh))
        written: list[dict[str, Any]] = []
        marked: list[Checkpoint] = []

        def build(head: ChainHead, view: ChainView) -> tuple[list[ChainRow], str | None]:
            written.clear()
            marked.clear()
            previous, seq = self._admit(head, view)
            rows = []
            sign = self._sign if self.checkpoint_key is not None else None
            for entry in entries:
                seq += 1
                chained, line = LedgerEntry.written(entry, seq, previous, sign)
                previous, document = chained.entry_hash, chained.to_dict()
                rows.append(ChainRow(seq, previous, line.decode("utf-8")))
                written.append(document)
            first = head.seq + 1
            due = head.created or (first - 1) // self.checkpoint_every != seq // self.checkpoint_every
            if self.checkpoint_key is None or not due:
                return rows, None
            marked.append(self._sign_checkpoint(head.ledger_id, seq, previous))
            return rows, _line(marked[0])

        self._call(lambda: self.chain.extend(header, build))
        last = written[-1]
        self._head = (self._ledger_id, last["seq"], last["entry_hash"])
        if marked:
            self._last_checkpoint = marked[0]
        return written

    def _admit(self, head: ChainHead, view: ChainView) -> tuple[str, int]:
        """The head is the chain's true end, and (keyed) this writer's own: else refuse the batch."""
        self._ledger_id = head.ledger_id
        parsed = _parse(head.header)
        if not is_header(parsed) or canonical_json(parsed).decode("utf-8") != head.header:
            raise LedgerError(f"{self.location}: the ledger header is not a kcp-opa ledger header; run `audit verify`")
        if parsed["ledger_id"] != head.ledger_id:
            raise LedgerError(f"{self.location}: the chain head names another ledger than its header")
        last = _parse(head.last) if head.last is not None else None
        if head.seq == 0:
            expected = canonical_hash(parsed)
        elif not isinstance(last, dict) or head.last != canonical_json(last).decode("utf-8"):
            raise LedgerError(f"{self.location}: the chain head's entry seq {head.seq} is missing or not canonical")
        else:
            try:
                typed = LedgerEntry.from_dict(last)
            except LedgerError as exc:
                raise LedgerError(f"{self.location}: the chain head's entry: {exc}") from None
            expected = typed.entry_hash
            if not typed.hash_holds() or typed.seq != head.seq:
                raise LedgerError(f"{self.location}: the entry at seq {head.seq} does not carry its own hash")
        if head.head_hash != expected:
            raise LedgerError(
                f"{self.location}: the chain head ({head.seq}:{head.head_hash}) is not its last entry's hash;"
                " refusing to extend it (run `kcp-opa audit verify`)"
            )
        if self.checkpoint_key is not None and not head.created:
            self._admit_keyed(parsed, last, head, view)
        return head.head_hash, head.seq

    def _admit_keyed(self, header: Any, last: Any, head: ChainHead, view: ChainView) -> None:
        key = self.checkpoint_key
        assert key is not None
        unbound = binding_problem(declared_writer(header), key.kid, key.alg)
        if unbound is not None:
            raise LedgerError(f"{self.location}: {unbound}; a keyed writer starts its own ledger database")
        problem = foreign_entry(last, declared_writer(header), self._trusted) if last is not None else None
        if problem is not None:
            raise LedgerError(f"{self.location}: {problem}; refusing to extend it (run `kcp-opa audit verify`)")
        mine = self._head
        if mine is None or mine[0] != head.ledger_id:
            return
        own = _parse(view.entry(mine[1]) or "null")
        if head.seq < mine[1] or not isinstance(own, dict) or own.get("entry_hash") != mine[2]:
            raise LedgerError(
                f"{self.location}: the chain no longer holds seq {mine[1]} as this writer wrote it: the ledger"
                " was cut or rewritten; refusing to extend it (run `kcp-opa audit verify`)"
            )

    def _verify_once(self) -> None:
        """A keyed writer's first write: the whole chain verifies against its last checkpoint."""
        assert self._trusted is not None and self.checkpoint_key is not None
        head = self._call(self.chain.head)
        if head is None or head[2] == 0:
            self._verified = True
            return
        lines = self._call(self.chain.checkpoints)
        if not lines:
            raise LedgerError(
                f"{self.location}: this keyed ledger has entries but no checkpoint: its cut could not be detected"
            )
        with tempfile.TemporaryDirectory(prefix="kcp-opa-ledger-") as tmp:
            marks = Path(tmp) / "ledger.jsonl.checkpoints"
            marks.write_text(lines[-1] + "\n", encoding="utf-8")
            last = read_checkpoints(marks)[-1]
            last.verify(self._trusted)
            path = Path(tmp) / "ledger.jsonl"
            with path.open("wb") as sink:
                self._call(lambda: self.chain.dump(sink))
            report = verify_ledger(
                path,
                anchors=[(last.seq, last.entry_hash)],
                ledger_id=last.ledger_id,
                keyring=self._trusted,
                writer=self.checkpoint_key.kid,
            )
        if not report.ok:
            found = report.problems[0]
            raise LedgerError(f"{self.location}: seq {found.line - 1}: {found.message}; refusing to extend it")
        self._verified = True

    def _sign(self, entry: dict[str, Any]) -> dict[str, Any]:
        if self.checkpoint_key is None:
            return entry
        try:
            return sign_document(entry, self.checkpoint_key, ENTRY_SIGNATURE)
        except KeyringError as exc:
            raise LedgerError(f"{self.location}: cannot sign the entry: {exc}") from None

    def _sign_checkpoint(self, ledger_id: str, seq: int, head_hash: str) -> Checkpoint:
        assert self.checkpoint_key is not None
        try:
            return Checkpoint.sign(ledger_id, seq, head_hash, self.checkpoint_key)
        except KeyringError as exc:
            raise LedgerError(f"{self.location}: cannot sign the checkpoint: {exc}") from None


def _line(checkpoint: Checkpoint) -> str:
    """A checkpoint as the chain keeps it: one canonical JSON line, as the file ledger writes it."""
    return canonical_json(checkpoint.to_dict()).decode("utf-8")


def _parse(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None
