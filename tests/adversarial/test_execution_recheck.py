"""Attack class: cashing a receipt after the policy stopped saying yes.

A receipt is signed for one decision. If the bundle is reloaded and the action becomes a DENY,
or the exception the decision relied on expires, a receipt issued before must not execute: the
executor re-decides the frozen action immediately before consuming the receipt, refuses with
``policy_changed``, leaves the receipt unconsumed and the handler uncalled, and the ledger holds
both decisions, which OPA replays from their archived inputs.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, opa_query, run_cli
from trustkit import REGISTRY, make_desk

from kcp_opa.authoring.casecontext import vouching
from kcp_opa.authorize.issuance import issue_receipt
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import ExecutionError, ReceiptVerificationError
from kcp_opa.core.signing import Keyring, generate_ed25519, load_keyring
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.execute.executor import Executor
from kcp_opa.stores.sqlite.executions import SQLiteStore
from kcp_opa.trail.ledger import AuditLedger, read_entries

T = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)
BASE: dict[str, Any] = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The support desk as deployed, and the same after the matrix forbids reading personal data."""
    work = tmp_path_factory.mktemp("recheck")
    base = DEPLOYMENTS / "support-desk"
    before = work / "before.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, before, options=CompileOptions(trust_path=REGISTRY)
    )
    matrix = yaml.safe_load((base / "matrix.yaml").read_text())
    matrix["task_types"]["read"]["data_categories"]["personal"] = "forbidden"
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    after = work / "after.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"], work / "matrix.yaml", POLICIES, after, options=CompileOptions(trust_path=REGISTRY)
    )
    return before, after


def _setup(tmp_path: Path, bundle: Path, declared: dict[str, Any]) -> tuple[Any, Any, Executor, Any]:
    ledger = tmp_path / "ledger.jsonl"
    gate = vouching(Gate.from_bundle(bundle, config=GateConfig(ledger=AuditLedger(ledger))), declared)
    key = generate_ed25519("receipts-1")
    executor = Executor(
        keyring=Keyring({key.kid: key}, key.kid),
        policy_versions={gate.policy_version},
        store=SQLiteStore(tmp_path / "exec.db"),
        audit=gate.audit,
        gate=gate,
    )
    return gate, make_desk(gate), executor, key


def _receipt(desk: Any, key: Any, action: dict[str, Any]) -> dict[str, Any]:
    record = desk.open(action, now=T)
    assert record.decision.verdict.execution_allowed, record.decision.verdict.reason_codes
    return issue_receipt(record, action, key, desk=desk, now=T + dt.timedelta(seconds=1)).to_dict()


def _decisions(ledger: Path, action_hash: str) -> list[dict[str, Any]]:
    return [e for _, e in read_entries(ledger) if e.get("type") == "decision" and e.get("action_hash") == action_hash]


def _original_then_redecision(entries: list[dict[str, Any]], receipt: dict[str, Any]) -> None:
    """The decision the receipt was issued for (opened, then re-derived with its recorded
    control: one id), then the re-decision at execution under a new id."""
    *original, redecided = entries
    assert original and {e["decision_id"] for e in original} == {receipt["decision_id"]}
    assert {e["result"]["decision"] for e in original} == {"ALLOW"}
    assert redecided["result"]["decision"] == "DENY" and redecided["decision_id"] != receipt["decision_id"]


def _action(key: str, **changes: Any) -> dict[str, Any]:
    action = copy.deepcopy(BASE)
    action["idempotency_key"] = key
    action.update(changes)
    return action


def test_a_receipt_issued_before_a_reload_that_denies_is_refused(tmp_path: Path, bundles: tuple[Path, Path]) -> None:
    before, after = bundles
    gate, desk, executor, key = _setup(tmp_path, before, {"from_action": True})
    kept, refused = _action("idem_recheck_kept"), _action("idem_recheck_refused")
    fine = executor.execute_authorized_action(
        kept, _receipt(desk, key, kept), lambda a: "read", now=T + dt.timedelta(seconds=5)
    )
    assert fine.outcome == "read"  # the same check passes while the policy still allows
    receipt = _receipt(desk, key, refused)
    gate.activate(after)
    calls: list[str] = []
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(refused, receipt, calls.append, now=T + dt.timedelta(seconds=10))
    assert caught.value.code == "policy_changed" and calls == []
    assert "DENY (matrix_forbidden)" in str(caught.value) and receipt["decision_id"] in str(caught.value)
    assert executor.store.execution("idem_recheck_refused") is None  # not claimed, not consumed
    both = _decisions(tmp_path / "ledger.jsonl", receipt["action_hash"])
    _original_then_redecision(both, receipt)
    for entry in both:  # both replay on OPA from the ledger, each on the bundle it names
        bundle = after if entry is both[-1] else before
        replayed = opa_query(read_bundle(bundle), "data.kcp.gate.decision", entry["input"])
        assert replayed["decision"] == entry["result"]["decision"]
    failures = [e for _, e in read_entries(tmp_path / "ledger.jsonl") if e.get("type") == "failure"]
    assert any(f.get("code") == "policy_changed" for f in failures)


def test_a_receipt_issued_before_its_exception_expired_is_refused_after(
    tmp_path: Path, bundles: tuple[Path, Path]
) -> None:
    before, _ = bundles
    waiver = {
        "id": "EXC-phone",
        "scope": {"tenant_id": "tenant_a", "unit": "support-desk/customer-records"},
        "waives": ["field_access_violation"],
        "issued_at": "2026-11-29T09:00:00Z",
        "expires_at": "2026-11-29T10:00:15Z",
    }
    _, desk, executor, key = _setup(tmp_path, before, {"from_action": True, "exceptions": [waiver]})
    knowledge = {**BASE["knowledge"], "fields_read": ["name", "email", "phone"]}
    early = _action("idem_exception_early", knowledge=knowledge)
    late = _action("idem_exception_late", knowledge=knowledge)
    done = executor.execute_authorized_action(
        early, _receipt(desk, key, early), lambda a: "read", now=T + dt.timedelta(seconds=14)
    )
    assert done.outcome == "read"
    receipt = _receipt(desk, key, late)
    with pytest.raises(ReceiptVerificationError) as caught:
        executor.execute_authorized_action(late, receipt, lambda a: "read", now=T + dt.timedelta(seconds=15))
    assert caught.value.code == "policy_changed" and "DENY (field_access_violation)" in str(caught.value)
    both = _decisions(tmp_path / "ledger.jsonl", receipt["action_hash"])
    _original_then_redecision(both, receipt)
    assert "exception_applied" in both[0]["result"]["reason_codes"]
    for entry in both:
        replayed = opa_query(read_bundle(before), "data.kcp.gate.decision", entry["input"])
        assert replayed["decision"] == entry["result"]["decision"]


def _claim_and_die(store: str, keys: str, versions: list[str], action: dict[str, Any], receipt: dict[str, Any]) -> None:
    """An executor process that consumes the receipt, claims the key and is killed mid-handler:
    its one-second lease lapses with no outcome (``ambiguous``)."""
    executor = Executor(
        keyring=load_keyring(Path(keys)), policy_versions=versions, store=SQLiteStore(Path(store)), lease_seconds=1
    )
    executor.execute_authorized_action(
        action, receipt, lambda a: os.kill(os.getpid(), signal.SIGKILL), now=T + dt.timedelta(seconds=5)
    )


def test_an_ambiguous_execution_reconciled_and_retried_is_re_decided(
    tmp_path: Path, bundles: tuple[Path, Path]
) -> None:
    before, after = bundles
    gate, desk, executor, key = _setup(tmp_path, before, {"from_action": True})
    action = _action("idem_recheck_resumed")
    first, retry = _receipt(desk, key, action), _receipt(desk, key, action)  # the workflow holds a second one
    keys = tmp_path / "receipt-keys.json"
    keys.write_text(json.dumps(Keyring({key.kid: key}, key.kid).to_file_dict(include_private=True)))
    child = multiprocessing.get_context("spawn").Process(
        target=_claim_and_die,
        args=(str(tmp_path / "exec.db"), str(keys), [gate.policy_version], action, first),
    )
    child.start()
    child.join(timeout=300)
    assert child.exitcode == -signal.SIGKILL
    time.sleep(1.5)  # the dead process's lease lapses
    reconciled = run_cli(
        "executions", "reconcile", "idem_recheck_resumed", "--outcome", "succeeded", "--evidence", "crm-audit-77",
        "--store", str(tmp_path / "exec.db"),
    )  # fmt: skip
    assert reconciled.returncode == 0, reconciled.stderr  # it was ambiguous: only such a claim is reconciled
    gate.activate(after)  # meanwhile the policy stopped allowing the read
    with pytest.raises(ReceiptVerificationError) as caught:  # the resumed workflow retries with its receipt
        executor.execute_authorized_action(action, retry, lambda a: "read", now=T + dt.timedelta(seconds=10))
    assert caught.value.code == "policy_changed" and "DENY (matrix_forbidden)" in str(caught.value)
    decisions = _decisions(tmp_path / "ledger.jsonl", retry["action_hash"])
    redecided = decisions[-1]
    assert redecided["result"]["decision"] == "DENY" and redecided["decision_id"] not in {
        first["decision_id"],
        retry["decision_id"],
    }
    replayed = opa_query(read_bundle(after), "data.kcp.gate.decision", redecided["input"])
    assert replayed["decision"] == "DENY"


def test_a_ledger_down_at_execution_runs_nothing_and_spends_no_receipt(
    tmp_path: Path, bundles: tuple[Path, Path]
) -> None:
    """With the gate (as the service runs it), a ledger that cannot be written stops the execution
    at the re-decision: audit_unavailable, the handler uncalled, the receipt still unspent."""
    before, _ = bundles
    _, desk, executor, key = _setup(tmp_path, before, {"from_action": True})
    action = _action("idem_recheck_ledger_down")
    receipt = _receipt(desk, key, action)
    ledger = tmp_path / "ledger.jsonl"
    aside = tmp_path / "ledger.aside"
    ledger.rename(aside)
    ledger.mkdir()  # the ledger's path is no longer a writable file (root cannot write it either)
    calls: list[str] = []
    try:
        with pytest.raises(ExecutionError) as caught:
            executor.execute_authorized_action(action, receipt, calls.append, now=T + dt.timedelta(seconds=5))
    finally:
        ledger.rmdir()
        aside.rename(ledger)
    assert caught.value.code == "audit_unavailable" and "did not run" in str(caught.value) and calls == []
    assert (
        executor.store.execution("idem_recheck_ledger_down") is None and executor.store.count("consumed_receipts") == 0
    )
    done = executor.execute_authorized_action(action, receipt, lambda a: "read", now=T + dt.timedelta(seconds=6))
    assert done.outcome == "read" and not done.replayed
