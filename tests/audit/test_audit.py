"""The audit ledger and the auditor's tools: tamper evidence, crashes, concurrency, disk
failures, no-logging erasure, replay on both engines, export, query, ROPA."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli, vouched_gate

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.canonical import canonical_hash
from kcp_opa.core.errors import LedgerError
from kcp_opa.models.decision import RoutingState
from kcp_opa.trail.ledger import GENESIS, AuditLedger, verify_ledger

CASES = {
    case.case_id: case
    for name in ("support-desk", "customer-onboarding")
    for case in load_cases(REPO / "fixtures" / "cases" / f"{name}.yaml")
}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit-bundles")
    for name in ("customer-onboarding", "support-desk", "finance"):
        base = DEPLOYMENTS / name
        trust = REPO / "fixtures" / "trust" / "registry.yaml"  # the demo's control desk needs it
        compile_bundle(
            [base / "knowledge.yaml"],
            base / "matrix.yaml",
            POLICIES,
            out / f"{name}.tar.gz",
            options=CompileOptions(trust_path=trust),
        )
    return out


def _small_ledger(path: Path, count: int = 3) -> Path:
    ledger = AuditLedger(path)
    for index in range(count):
        ledger.append({"type": "decision", "n": index, "note": f"entry {index}"})
    return path


# --- tamper evidence -----------------------------------------------------------------------------


def test_a_fresh_chain_verifies(tmp_path: Path) -> None:
    report = verify_ledger(_small_ledger(tmp_path / "l.jsonl", 5))
    assert report.ok and report.entries == 5
    first = json.loads((tmp_path / "l.jsonl").read_text().splitlines()[1])  # line 1 is the header
    header = json.loads((tmp_path / "l.jsonl").read_text().splitlines()[0])
    assert header["kcp_opa_ledger"] == 1 and GENESIS != first["previous_hash"] == canonical_hash(header)
    assert first["seq"] == 1


def test_changing_any_byte_of_any_entry_is_detected(tmp_path: Path) -> None:
    path = _small_ledger(tmp_path / "l.jsonl")
    original = path.read_bytes()
    undetected = []
    for position, byte in enumerate(original):
        if byte == ord("\n"):
            continue
        for replacement in {byte ^ 0x01, ord("x") if byte != ord("x") else ord("y")}:
            tampered = bytearray(original)
            tampered[position] = replacement
            path.write_bytes(bytes(tampered))
            if verify_ledger(path).ok:
                undetected.append((position, chr(byte), chr(replacement)))
    assert undetected == []


def test_deleting_reordering_or_inserting_lines_is_detected(tmp_path: Path) -> None:
    path = _small_ledger(tmp_path / "l.jsonl", 4)
    lines = path.read_bytes().splitlines(keepends=True)
    variants = {
        "delete header": lines[1:],
        "delete first": [lines[0], *lines[2:]],
        "delete middle": [lines[0], lines[2], lines[3]],
        "swap": [lines[0], lines[2], lines[1], lines[3]],
        "duplicate": [*lines, lines[3]],
    }
    for name, variant in variants.items():
        path.write_bytes(b"".join(variant))
        report = verify_ledger(path)
        assert not report.ok, name
    # Deleting the last line cannot be seen from the file alone; the entry count and the last
    # hash (published elsewhere, e.g. in an export) are what catch truncation.
    path.write_bytes(b"".join(lines[:4]))  # header + 3 entries; a signed checkpoint catches this
    assert verify_ledger(path).entries == 3


def test_cli_verify_reports_the_first_break_with_its_line(tmp_path: Path) -> None:
    path = _small_ledger(tmp_path / "l.jsonl", 4)
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace("entry 2", "entry X")  # line 1 is the header
    path.write_text("".join(lines))
    proc = run_cli("audit", "verify", str(path), "--format", "json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["problems"] == [{"line": 4, "message": "entry_hash does not match the entry (content changed)"}]
    assert report["entries"] == 2


# --- crashes and concurrency ------------------------------------------------------------------------

_APPENDER = """
import sys
from kcp_opa.trail.ledger import AuditLedger
ledger = AuditLedger(sys.argv[1], durability=sys.argv[3])
for index in range(int(sys.argv[2])):
    entry = ledger.append({"type": "decision", "writer": sys.argv[4], "n": index, "pad": "x" * 2000})
    print(entry["entry_hash"], flush=True)
"""


def test_kill_9_mid_write_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(path), "1000000", "fsync", "w"], stdout=subprocess.PIPE, text=True
    )
    acknowledged = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while len(acknowledged) < 200 and time.monotonic() < deadline:
        acknowledged.append(proc.stdout.readline().strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # Simulate the worst case too: a torn line left behind by the killed writer.
    with path.open("ab") as handle:
        handle.write(b'{"type":"decision","n":')
    report = verify_ledger(path)
    assert report.torn_tail and report.problems[-1].message.startswith("torn last line")
    AuditLedger(path).append({"type": "decision", "after": "crash"})  # the next writer repairs
    repaired = verify_ledger(path)
    assert repaired.ok, repaired.problems
    hashes = {json.loads(line)["entry_hash"] for line in path.read_text().splitlines()[1:]}
    assert set(acknowledged) <= hashes


@pytest.mark.parametrize("durability", ["fsync", "group"])
def test_processes_append_to_one_chain(tmp_path: Path, durability: str) -> None:
    path = tmp_path / "l.jsonl"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, str(path), "100", durability, f"w{n}"], stdout=subprocess.PIPE
        )
        for n in range(4)
    ]
    for writer in writers:
        writer.communicate(timeout=300)
        assert writer.returncode == 0
    report = verify_ledger(path)
    assert report.ok and report.entries == 400
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [e["seq"] for e in entries] == list(range(1, 401))
    assert {e["writer"] for e in entries} == {"w0", "w1", "w2", "w3"}


# --- fail closed -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["/dev/full", "directory"])
def test_a_failed_audit_write_turns_the_decision_into_deny(bundles: Path, tmp_path: Path, target: str) -> None:
    path = Path(target) if target == "/dev/full" else tmp_path  # ENOSPC from the kernel / EISDIR
    gate = vouched_gate(bundles / "support-desk.tar.gz", ledger=AuditLedger(path))
    case = CASES["sd-read-clean"]
    decision = gate.decide(case.action, now=case.now)
    assert decision.decision is RoutingState.DENY
    assert decision.reason_codes == ("audit_unavailable",)
    assert decision.execution_allowed is False
    with pytest.raises(LedgerError):
        AuditLedger(path).append({"type": "x"})


def test_with_the_ledger_on_a_clean_read_may_execute_and_is_recorded(bundles: Path, tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    gate = vouched_gate(bundles / "support-desk.tar.gz", ledger=AuditLedger(path))
    case = CASES["sd-read-clean"]
    decision = gate.decide(case.action, now=case.now)
    assert decision.execution_allowed and decision.authorization_status.value == "APPROVED"
    (entry,) = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    for name in (
        "action_id", "agent_id", "timestamp", "kcp_unit_applied", "evaluator_id", "evaluator_version",
        "fields_accessed", "fields_declared", "passed", "trace_id", "model", "legal_basis",
        "decision_id", "path", "input", "result", "bundles", "labels", "erased", "previous_hash", "entry_hash",
    ):  # fmt: skip
        assert name in entry, name
    assert entry["decision_id"] == decision.decision_id
    assert entry["kcp_unit_applied"] == "support-desk/customer-records"
    assert entry["fields_declared"] == ["customer_id", "email", "name", "plan", "tenant_id"]
    assert entry["legal_basis"] == "contract" and entry["passed"] is True
    assert entry["bundles"] == {"kcp-opa": {"revision": gate.bundle_revision, "sha256": gate.bundle.sha256}}


# --- no-logging ----------------------------------------------------------------------------------------------


def test_no_logging_content_never_reaches_the_ledger(bundles: Path, tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    gate = vouched_gate(bundles / "customer-onboarding.tar.gz", ledger=AuditLedger(path))
    action = dict(CASES["co-gdpr-minimisation-declared"].action)
    action["attributes"] = {"customer_note": "SECRET-CONTENT-7731"}
    action["evidence_references"] = ["crm:SECRET-REF-4410"]
    action["target"] = {**action["target"], "reference": "SECRET-TARGET-5521"}
    gate.decide(action, now="2026-11-29T10:00:00Z")
    raw = path.read_bytes()
    for secret in (b"SECRET-CONTENT-7731", b"SECRET-REF-4410", b"SECRET-TARGET-5521"):
        assert secret not in raw
    entry = json.loads(raw.splitlines()[1])  # line 1 is the ledger header
    assert set(entry["erased"]) >= {
        "/input/action/attributes",
        "/input/action/evidence_references",
        "/input/action/target/reference",
    }
    assert entry["kcp_unit_applied"] == "customer-onboarding/gdpr_data_minimisation"  # the access is recorded
    assert entry["fields_accessed"] == ["email", "name"]
    # a unit without no-logging keeps its input whole
    other = tmp_path / "o.jsonl"
    vouched_gate(bundles / "support-desk.tar.gz", ledger=AuditLedger(other)).decide(
        {**CASES["sd-read-clean"].action, "attributes": {"note": "KEPT-9"}}, now="2026-11-29T10:00:00Z"
    )
    assert b"KEPT-9" in other.read_bytes() and json.loads(other.read_bytes().splitlines()[1])["erased"] == []


# --- the auditor's commands --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_ledger(bundles: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The ledger `make demo` writes: both demo scripts, run as real processes."""
    root = tmp_path_factory.mktemp("demo")
    ledger = root / "demo.jsonl"
    env = {**os.environ, "KCP_OPA_LEDGER": str(ledger), "KCP_OPA_BUNDLES": str(bundles)}
    for script in ("decide_demo.py", "supplier_payment_flow.py"):
        proc = subprocess.run(
            [sys.executable, str(REPO / "examples" / script)], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    return ledger, bundles


def test_replay_reproduces_every_demo_decision_on_both_engines(demo_ledger: tuple[Path, Path]) -> None:
    ledger, bundles = demo_ledger
    proc = run_cli("audit", "replay", str(ledger), "--bundles", str(bundles), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["decisions"] >= 15
    # A decision archived under no-logging (the demo's gdpr read) has a partial input: replay
    # lists it as erased_unverifiable, never as reproduced.
    for engine in ("regopy", "opa"):
        erased = sum(1 for item in report["erased_unverifiable"] if item.endswith(f"({engine})"))
        assert erased >= 1 and report["reproduced"][engine] + erased == report["decisions"]
    assert report["mismatches"] == [] and report["missing_bundles"] == {}
    entries = [json.loads(line) for line in ledger.read_text().splitlines()[1:]]
    assert {e["type"] for e in entries} == {"decision", "control", "receipt", "intent", "execution", "failure"}
    # every execution the demo ran is its intent and the outcome naming it: one execution, not two
    intents = [e["seq"] for e in entries if e["type"] == "intent"]
    assert intents and sorted(e["intent_seq"] for e in entries if e.get("intent_seq")) == intents


def test_replay_reports_a_decision_that_does_not_reproduce(demo_ledger: tuple[Path, Path], tmp_path: Path) -> None:
    ledger, bundles = demo_ledger
    lines = ledger.read_text().splitlines()[1:]
    forged = json.loads(lines[0])
    forged["result"]["decision"] = "FORGED"
    copy = tmp_path / "forged.jsonl"
    copy.write_text("\n".join([json.dumps(forged, sort_keys=True, separators=(",", ":")), *lines[1:]]) + "\n")
    proc = run_cli("audit", "replay", str(copy), "--bundles", str(bundles), "--format", "json")
    assert proc.returncode == 1
    assert {m["engine"] for m in json.loads(proc.stdout)["mismatches"]} == {"regopy", "opa"}


def test_export_evaluates_to_the_archived_result_in_opa(demo_ledger: tuple[Path, Path], tmp_path: Path) -> None:
    from opa_bindings import OpaEngine

    from kcp_opa.compile.bundle import read_bundle

    ledger, bundles = demo_ledger
    entry = json.loads(ledger.read_text().splitlines()[1])
    out = tmp_path / "export"
    proc = run_cli(
        "audit", "export", str(ledger), "--decision-id", entry["decision_id"], "--bundles", str(bundles), "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    bundle_file = out / "bundle.tar.gz"  # the name docs/auditing.md uses
    assert f"opa eval -b {bundle_file.name} -i input.json 'data.kcp.gate.decision'" in (out / "README.md").read_text()
    bundle = read_bundle(bundle_file)
    engine = OpaEngine()
    for name, source in bundle.modules.items():
        engine.add_policy(name, source)
    engine.add_data(bundle.data)
    value = engine.eval_document("kcp.gate.decision", json.loads((out / "input.json").read_text()))
    assert value == json.loads((out / "result.json").read_text()) == entry["result"]
    evaluated = run_cli("eval", "-b", str(bundle_file), "-i", str(out / "input.json"), "data.kcp.gate.decision")
    assert json.loads(evaluated.stdout)["result"][0]["expressions"][0]["value"] == entry["result"]


def test_query_filters(demo_ledger: tuple[Path, Path]) -> None:
    ledger, _ = demo_ledger

    def count(*filters: str) -> Any:
        proc = run_cli("audit", "query", str(ledger), "--format", "json", *filters)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    by_model_on_unit = count("--model", "support-llm-2026-10", "--unit", "support-desk/customer-records")
    assert by_model_on_unit and all(e["kcp_unit_applied"] == "support-desk/customer-records" for e in by_model_on_unit)
    assert all(e["decision"] == "DENY" for e in count("--decision", "DENY"))
    assert count("--type", "receipt")[0]["signature"]["alg"] == "Ed25519"
    assert count("--since", "2999-01-01T00:00:00Z") == []
    assert count("--agent", "nobody") == []
    several = count("--type", "control")[-1]["decision_id"]
    of_one = count("--decision-id", several)
    assert {e["type"] for e in of_one} >= {"decision", "control", "receipt", "failure"}
    refusals = count("--decision-id", several, "--type", "failure")
    assert refusals and all(e["evidence"]["decision_id"] == several for e in refusals)
    assert {e["code"] for e in count("--code", "replay")} == {"replay"}
    assert count("--type", "note") == []


def test_query_text_names_decision_control_actor_issuer(demo_ledger: tuple[Path, Path]) -> None:
    ledger, _ = demo_ledger
    proc = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "audit", "query", str(ledger), "--format", "text", "--type", "control"],
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(run_cli("audit", "query", str(ledger), "--format", "json", "--type", "control").stdout)[-1]
    assert entry["decision_id"] in proc.stdout
    assert f"{entry['evidence']['actor_id']} · {entry['evidence']['control']} PASSED · issuer" in proc.stdout
    assert max(len(line.rstrip()) for line in proc.stdout.splitlines()) <= 80


def test_export_refuses_to_pick_among_several_entries(demo_ledger: tuple[Path, Path], tmp_path: Path) -> None:
    ledger, bundles = demo_ledger
    entries = json.loads(run_cli("audit", "query", str(ledger), "--format", "json", "--type", "decision").stdout)
    seqs: dict[str, list[int]] = {}
    for entry in entries:
        seqs.setdefault(entry["decision_id"], []).append(entry["seq"])
    decision_id, several = next((d, s) for d, s in seqs.items() if len(s) > 1)
    base = ("audit", "export", str(ledger), "--decision-id", decision_id, "--bundles", str(bundles))
    refused = run_cli(*base, "-o", str(tmp_path / "a"))
    assert refused.returncode != 0 and f"has {len(several)} entries" in refused.stderr
    assert not (tmp_path / "a").exists()
    chosen = run_cli(*base, "--seq", str(several[0]), "-o", str(tmp_path / "b"))
    assert chosen.returncode == 0, chosen.stderr
    first = next(e for e in entries if e["seq"] == several[0])
    assert json.loads((tmp_path / "b" / "result.json").read_text()) == first["result"]


# --- ROPA --------------------------------------------------------------------------------------------------------


def test_ropa_records_from_manifests() -> None:
    proc = run_cli(
        "ropa", *(str(DEPLOYMENTS / d / "knowledge.yaml") for d in ("customer-onboarding", "support-desk", "finance"))
    )
    assert proc.returncode == 0, proc.stderr
    ropa = json.loads(proc.stdout)
    records = {r["activity"]: r for r in ropa["records"]}
    gdpr = records["customer-onboarding/gdpr_data_minimisation"]
    assert gdpr["legal_basis_article"] == "Art. 6(1)(f) legitimate interests"
    assert gdpr["third_country_transfer"] is False and gdpr["personal_data_categories"] == ["contact", "personal"]
    assert records["support-desk/customer-records"]["third_country_transfer"] is True  # UK is outside the EEA
    assert records["treasury/supplier-payments"]["risk"] == "high"  # restricted
    assert records["support-desk/faq"]["personal_data_categories"] == "not declared"
    assert "support-desk/faq: no data_categories declared" in proc.stderr
    assert ropa["summary"]["activities"] == len(ropa["records"])
    markdown = run_cli("ropa", str(DEPLOYMENTS / "support-desk" / "knowledge.yaml"), "--format", "markdown")
    assert "## support-desk/customer-records" in markdown.stdout and "Art. 6(1)(b)" in markdown.stdout


def test_report_counts_what_the_ledger_holds(demo_ledger: tuple[Path, Path], tmp_path: Path) -> None:
    ledger, _ = demo_ledger
    entries = [json.loads(line) for line in ledger.read_text().splitlines()[1:]]
    final: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry["type"] == "decision":
            final[entry["decision_id"]] = entry
    trust = REPO / "fixtures" / "trust" / "registry.yaml"
    proc = run_cli("audit", "report", str(ledger), "--format", "json", "--trust", str(trust))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["chain"]["ok"] and report["entries"] == len(entries)
    assert report["decisions"] == len(final)
    states: dict[str, int] = {}
    for entry in final.values():
        states[entry["decision"]] = states.get(entry["decision"], 0) + 1
    assert report["by_state"] == states
    assert report["refusals"] == {
        code: sum(1 for e in entries if e.get("code") == code) for code in {e["code"] for e in entries if "code" in e}
    }
    approvals = [a for a in report["approvals"] if a["control"] == "independent_human_approval"]
    assert approvals and approvals[-1]["actor_id"] == "treasury_approver_anna" and approvals[-1]["latency_seconds"] >= 0
    assert approvals[-1]["roles"] == ["treasury_approver"]
    page = tmp_path / "report.html"
    assert run_cli("audit", "report", str(ledger), "--html", str(page)).returncode == 0
    markup = page.read_text()
    assert 'http-equiv="Content-Security-Policy" content="default-src &#x27;none&#x27;' in markup
    assert "<script" not in markup and "src=" not in markup and markup.count("<svg") >= 3
    for decision_id in final:
        assert f'id="d-{decision_id}"' in markup
