"""Exceptions as the auditor sees them: how often each was used (from the ledger, a file or a
PostgreSQL database), the ROPA's active exceptions per unit, and the report's overrides.

A real gate decides with a signed exceptions file and writes a real ledger; the commands read
it back. A decision re-derived (two entries, one id) is one use.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli
from exceptionkit import exception, key, write_file, write_registry

from kcp_opa.audit.report import render_html
from kcp_opa.audit.ropa import build_ropa
from kcp_opa.audit.summary import entries_by_decision, summarize
from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.context import SignedExceptions
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.exceptionfile import load_exceptions
from kcp_opa.declare.manifest import load_manifest
from kcp_opa.trail.locations import open_ledger

NOW = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)
ISSUED = NOW - dt.timedelta(hours=1)
NAMES = itertools.count()
READ: dict[str, Any] = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]
READ["knowledge"]["fields_read"] = ["name", "email", "phone"]  # phone: not declared, waivable


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = DEPLOYMENTS / "support-desk"
    out = tmp_path_factory.mktemp("exc-audit") / "support-desk.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return out


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "file":
        yield str(tmp_path / "ledger.jsonl")
    else:
        yield request.getfixturevalue("postgres").database(f"kcp_exc_uses_{next(NAMES)}")


def _granted(work: Path, now: dt.datetime = NOW) -> tuple[Path, Path]:
    """The registry, and a file: EXC-1 (phone on customer-records, tenant_a), EXC-2 (another
    tenant's, never applied here) and EXC-OLD (expired an hour before ``now``)."""
    work.mkdir(parents=True, exist_ok=True)
    signer, issued, expires = key(), now - dt.timedelta(hours=1), now + dt.timedelta(days=2)
    write_registry(work / "registry.yaml", signer)
    items = [
        exception(signer, issued=issued, expires=expires),
        exception(signer, issued=issued, expires=expires, id="EXC-2", scope={"tenant_id": "t_b"}),
        exception(signer, issued=issued - dt.timedelta(days=1), expires=issued, id="EXC-OLD", ticket="CHG-1"),
    ]
    return work / "registry.yaml", write_file(work / "exceptions.yaml", items)


def _decide(bundle: Path, registry: Path, exceptions: Path, ledger: str, times: int) -> None:
    """``times`` decisions applying EXC-1, each recorded twice (decided, then re-derived: one id)."""
    from kcp_opa.declare.trust import load_trust

    held = SignedExceptions(load_trust(registry), path=exceptions)
    gate = Gate.from_bundle(bundle, config=GateConfig(ledger=open_ledger(ledger)))
    for n in range(times):
        action = {**READ, "idempotency_key": f"idem_exc_audit_{n}"}
        sources, principal = case_sources(action, {"from_action": True}, NOW.strftime("%Y-%m-%dT%H:%M:%SZ"))
        assert sources is not None
        prepared = gate.prepare(action, now=NOW, principal=principal, context=replace(sources, exceptions=held))
        first = gate.decide_prepared(prepared)
        assert first.decision.value == "ALLOW" and "exception_applied" in first.reason_codes
        assert gate.decide_prepared(prepared).decision_id == first.decision_id
    release = getattr(gate.audit.ledger if gate.audit else None, "release", None)
    if release is not None:
        release()


def test_exceptions_list_counts_each_decision_once_from_a_file_or_database_ledger(
    tmp_path: Path, bundle: Path, location: str
) -> None:
    registry, exceptions = _granted(tmp_path)
    _decide(bundle, registry, exceptions, location, times=3)
    proc = run_cli(
        "exceptions", "list", str(exceptions), "--trust", str(registry), "--ledger", location,
        "--now", "2026-11-29T10:00:00Z", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    uses = {row["id"]: (row["state"], row["uses"]) for row in json.loads(proc.stdout)["exceptions"]}
    assert uses == {"EXC-1": ("active", 3), "EXC-2": ("active", 0), "EXC-OLD": ("expired", 0)}
    text = run_cli(
        "exceptions", "list", str(exceptions), "--ledger", location, "--now", "2026-11-29T10:00:00Z", "--format", "text"
    )
    assert "EXC-1 [active] waives field_access_violation" in text.stdout and "used 3 times" in text.stdout


def test_the_report_shows_applied_exceptions_as_overrides(tmp_path: Path, bundle: Path) -> None:
    registry, exceptions = _granted(tmp_path)
    ledger = tmp_path / "ledger.jsonl"
    _decide(bundle, registry, exceptions, str(ledger), times=2)
    summary = summarize(ledger)
    assert summary.exceptions == [
        {
            "id": "EXC-1",
            "waives": ["field_access_violation"],
            "grantor": "dpo@example.com",
            "ticket": "CHG-2231",
            "expires_at": "2026-12-01T10:00:00Z",
            "scope": {"tenant_id": "tenant_a", "unit": "support-desk/customer-records"},
            "uses": 2,
        }
    ]
    page = render_html(summary, entries_by_decision=entries_by_decision(ledger))
    section = page[page.index("<h2>Overrides and exceptions</h2>") : page.index("<h2>Refusals by code</h2>")]
    for shown in ("EXC-1", "tenant_id=tenant_a, unit=support-desk/customer-records", "field_access_violation"):
        assert shown in section
    assert "dpo@example.com" in section and "2026-12-01T10:00:00Z" in section and '<td class="num">2</td>' in section
    html_file = tmp_path / "report.html"
    proc = run_cli("audit", "report", str(ledger), "--html", str(html_file))
    assert proc.returncode == 0, proc.stderr
    assert "EXC-1" in html_file.read_text(encoding="utf-8")


def test_the_ropa_lists_the_exceptions_in_force_per_unit(tmp_path: Path) -> None:
    from kcp_opa.declare.trust import load_trust

    registry, exceptions = _granted(tmp_path)
    held = load_exceptions(exceptions, load_trust(registry)).exceptions
    manifest = load_manifest(DEPLOYMENTS / "support-desk" / "knowledge.yaml")
    records = {r["activity"]: r for r in build_ropa([manifest], held, now=NOW)["records"]}
    listed = {activity: [e["id"] for e in r["active_exceptions"]] for activity, r in records.items()}
    # EXC-1 names customer-records; EXC-2 names no unit, so it may apply to every one; EXC-OLD expired.
    assert listed["support-desk/customer-records"] == ["EXC-1", "EXC-2"]
    assert all(ids == ["EXC-2"] for activity, ids in listed.items() if activity != "support-desk/customer-records")
    later = build_ropa([manifest], held, now=NOW + dt.timedelta(days=3))["records"]
    assert all(r["active_exceptions"] == [] for r in later)  # expired: no longer in the record
    _, live = _granted(tmp_path / "live", dt.datetime.now(dt.UTC).replace(microsecond=0))  # `ropa` judges now
    manifest_path = str(DEPLOYMENTS / "support-desk" / "knowledge.yaml")
    proc = run_cli("ropa", manifest_path, "--exceptions", str(live), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    shown = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}
    record = shown["support-desk/customer-records"]
    assert [e["id"] for e in record["active_exceptions"]] == ["EXC-1", "EXC-2"]
    assert record["active_exceptions"][0]["grantor"] == "dpo@example.com"
    markdown = run_cli("ropa", manifest_path, "--exceptions", str(live), "--format", "markdown")
    assert "| active exceptions | EXC-1 waives field_access_violation for tenant_id=tenant_a" in markdown.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: kcp-opa/exceptions\nformat_version: 1\nexceptions: [{id: 3}]\n")
    refused = run_cli("ropa", manifest_path, "--exceptions", str(bad))
    assert refused.returncode == 1 and "not a valid exceptions file" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_re_decision_at_execution_is_its_decisions_use_not_another(tmp_path: Path, bundle: Path) -> None:
    """The executor re-decides under a new id, linked to the receipt's decision: one decision, one use."""
    from kcp_opa.declare.trust import load_trust
    from kcp_opa.execute.recheck import redecide

    registry, exceptions = _granted(tmp_path)
    ledger = tmp_path / "ledger.jsonl"
    gate = Gate.from_bundle(bundle, config=GateConfig(ledger=open_ledger(str(ledger))))
    action = {**READ, "idempotency_key": "idem_exc_audit_executed"}
    sources, principal = case_sources(action, {"from_action": True}, NOW.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert sources is not None
    context = replace(sources, exceptions=SignedExceptions(load_trust(registry), path=exceptions))
    first = gate.decide(action, now=NOW, principal=principal, context=context)
    receipt = {"receipt_id": "rcpt_exc_audit", "decision_id": first.decision_id}
    again = redecide(gate, action, receipt, now=NOW, principal=principal, context=context)
    assert again.decision_id != first.decision_id and "exception_applied" in again.reason_codes
    summary = summarize(ledger)
    assert summary.decisions == 1 and summary.redecisions_by_step == {"execution": 1}
    assert summary.redecisions[0]["original_decision_id"] == first.decision_id
    assert [(row["id"], row["uses"]) for row in summary.exceptions] == [("EXC-1", 1)]
