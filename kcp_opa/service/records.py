"""Decision records in the service's store, so every server process on the same file sees them.

A row keeps only what cannot be recomputed (the sealed export of ``kcp_opa.authorize.records``:
the frozen action, decision id and time, trace id, bundle revision, signed attestations) plus
who evaluated it. Loading re-decides with the bundle and replays every attestation through the
desk, so nothing in a row is taken on its word; a record decided under another bundle is refused
(``bundle_changed``). Updates run in one ``BEGIN IMMEDIATE`` transaction: two answers for the same
decision, in one process or in two, are applied one after the other and neither is lost.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kcp_opa.authorize.controls import ControlDesk, GateDecision
from kcp_opa.authorize.records import RECORD_FORMAT, export_record, load_record
from kcp_opa.core.errors import CodedError, EvidenceRejectedError, StoreError
from kcp_opa.core.identity import IdentityError, canonical_id
from kcp_opa.decide.gate import Gate, build_input, built_context

_SCHEMA = """
CREATE TABLE IF NOT EXISTS service_decisions (
    decision_id TEXT PRIMARY KEY,
    evaluated_by TEXT NOT NULL,
    agent_id TEXT,
    document TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS service_secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class UnknownRecordError(CodedError):
    code = "unknown_decision"


@dataclass(frozen=True)
class StoredDecision:
    """A row: the record's export, and the canonical ids of its evaluator and of the agent it names."""

    decision_id: str
    evaluated_by: str
    agent_id: str | None
    document: Mapping[str, Any]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class DecisionStore:
    """The ``service_decisions`` table (WAL; synchronous=NORMAL: a decision lost to a power cut is re-asked)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._run(lambda c: c.executescript(_SCHEMA))

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
        return connection

    def _run(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        try:
            return work(self._connection())
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: decision store failed: {exc}") from None

    def seal_key(self) -> bytes:
        """The desk's seal key, made once per store: every process on this file seals alike."""

        def work(c: sqlite3.Connection) -> Any:
            c.execute(
                "INSERT OR IGNORE INTO service_secrets (name, value) VALUES ('record_seal', ?)",
                (secrets.token_hex(32),),
            )
            return c.execute("SELECT value FROM service_secrets WHERE name = 'record_seal'").fetchone()[0]

        return bytes.fromhex(self._run(work))

    def put(self, decision_id: str, evaluated_by: str, agent_id: str | None, document: Mapping[str, Any]) -> None:
        stamp = _now()
        self._run(
            lambda c: c.execute(
                "INSERT INTO service_decisions (decision_id, evaluated_by, agent_id, document, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (decision_id, evaluated_by, agent_id, json.dumps(document, sort_keys=True), stamp, stamp),
            )
        )

    def get(self, decision_id: str) -> StoredDecision:
        row = self._run(
            lambda c: c.execute(
                "SELECT decision_id, evaluated_by, agent_id, document FROM service_decisions WHERE decision_id = ?",
                (decision_id,),
            ).fetchone()
        )
        if row is None:
            raise UnknownRecordError(f"no decision {decision_id} in the service's store")
        return StoredDecision(row[0], row[1], row[2], json.loads(row[3]))

    def update(self, decision_id: str, change: Callable[[StoredDecision], tuple[Mapping[str, Any], Any]]) -> Any:
        """Apply ``change`` (row -> new document, result) under the store's write lock; return its result."""
        connection = self._connection()
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: decision store failed: {exc}") from None
        try:
            document, result = change(self.get(decision_id))
            self._run(
                lambda c: c.execute(
                    "UPDATE service_decisions SET document = ?, updated_at = ? WHERE decision_id = ?",
                    (json.dumps(document, sort_keys=True), _now(), decision_id),
                )
            )
            self._run(lambda c: c.execute("COMMIT"))
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return result

    def count(self) -> int:
        return int(self._run(lambda c: c.execute("SELECT count(*) FROM service_decisions").fetchone()[0]))


def export(desk: ControlDesk | None, gate: Gate, record: GateDecision) -> dict[str, Any]:
    """The row's document: the desk's sealed export, or (no registry) the same fields unsealed."""
    if desk is not None:
        return export_record(desk, record)
    decision = record.decision
    return {
        "format": RECORD_FORMAT,
        "action": dict(record.action),
        "decision_id": decision.decision_id,
        "evaluated_at": decision.evaluated_at,
        "trace_id": decision.trace_id,
        "bundle_revision": decision.bundle_revision,
        "attestations": [],
        "context": built_context(record.prepared.document),
    }


def check_current(gate: Gate, document: Mapping[str, Any]) -> None:
    """Refuse a record decided under another bundle (after a reload): the action is evaluated anew."""
    if document.get("bundle_revision") != gate.bundle_revision:
        raise EvidenceRejectedError(
            f"decision {document.get('decision_id')} was made under bundle {document.get('bundle_revision')},"
            f" this server now decides with {gate.bundle_revision}: evaluate the action again",
            "bundle_changed",
        )


def restore(desk: ControlDesk | None, gate: Gate, document: Mapping[str, Any]) -> GateDecision:
    """The record again, re-decided with ``gate`` (and its evidence replayed through ``desk``)."""
    check_current(gate, document)
    if desk is not None:
        return load_record(desk, document)
    action = document["action"]
    prepared = gate._seal(
        build_input(
            action,
            now=document["evaluated_at"],
            satisfied_controls=gate.system_controls,
            bundle_revision=gate.bundle_revision,
            decision_id=document["decision_id"],
            built=document.get("context") if isinstance(document.get("context"), Mapping) else {},
        )
    )
    decision, _ = gate.evaluate(prepared)
    decision = replace(decision, trace_id=document.get("trace_id"))
    return GateDecision(action, prepared, decision, inputs=(prepared.document,))


def canonical_or_none(value: Any) -> str | None:
    try:
        return canonical_id(value) if isinstance(value, str) else None
    except IdentityError:
        return None
