"""Attacks on a decision case file: each tampering is caught by `audit case verify`, by name.

The case comes from the supplier payment flow `make demo` runs (real processes, both engines).
Every attacker here also rewrites case.json's file hashes, so the `files` check passes and the
check that names the guarantee is the one that must catch it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli

from kcp_opa.authorize.attestations import sign_attestation
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.signing import generate_ed25519, load_keyring
from kcp_opa.trail.ledger import AuditLedger

TRUST = REPO / "fixtures" / "trust"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("case-demo")
    bundles = root / "bundles"
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        POLICIES,
        bundles / "finance.tar.gz",
        trust_path=TRUST / "registry.yaml",
    )
    ledger = root / "demo.jsonl"
    env = {**os.environ, "KCP_OPA_LEDGER": str(ledger), "KCP_OPA_BUNDLES": str(bundles)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "supplier_payment_flow.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    keys = root / "checkpoint-keys.json"
    assert run_cli("receipt", "keygen", "--kid", "ckpt-1", "--keyring", str(keys)).returncode == 0
    receipts = [json.loads(line) for line in ledger.read_text().splitlines()[1:]]
    decision_id = next(e["decision_id"] for e in receipts if e["type"] == "receipt")
    case = root / "case"
    made = run_cli(
        "audit", "case", str(ledger), decision_id, "-o", str(case), "--bundles", str(bundles),
        "--trust", str(TRUST / "registry.yaml"), "--keyring", str(keys),
        "--receipt", str(root / "demo-receipt.json"), "--receipt-keyring", str(root / "demo-receipt-keys.json"),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return {"root": root, "case": case, "ledger": ledger, "bundles": bundles, "keys": keys}


def _copy(demo: dict[str, Path], tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "case"
    shutil.copytree(demo["case"], target)
    return target


def _rehash(case: Path) -> None:
    """What a careful attacker does after editing: make case.json list the new hashes."""
    document = json.loads((case / "case.json").read_text())
    for name in document["files"]:
        document["files"][name] = hashlib.sha256((case / name).read_bytes()).hexdigest()
    (case / "case.json").write_text(json.dumps(document, indent=2))


def _verify(case: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("audit", "case", "verify", str(case), "--format", "json", *extra)
    return proc.returncode, json.loads(proc.stdout)


def _failed(report: dict[str, Any]) -> set[str]:
    return {check["check"] for check in report["checks"] if check["ok"] is False}


def test_case_from_the_demo_verifies_every_check(demo: dict[str, Path]) -> None:
    code, report = _verify(demo["case"], "--trust", str(TRUST / "registry.yaml"))
    assert code == 0 and report["ok"], report
    names = [check["check"] for check in report["checks"]]
    assert names == [
        "files", "checkpoint", "chain", "entries", "bundle", "registry", "inputs", "attestations",
        "replay-regopy", "replay-opa", "separation-of-duties", "receipt",
    ]  # fmt: skip
    assert all(check["ok"] is True for check in report["checks"])
    text = run_cli("audit", "case", "verify", str(demo["case"]), "--format", "text")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == len(names) + 1


def test_case_with_an_edited_attestation_fails_attestations(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    (path,) = (case / "attestations").glob("*-independent_human_approval.json")
    item = json.loads(path.read_text())
    item["actor_id"] = "treasury_approver_ben"  # another approver, as if Ben had approved
    path.write_text(json.dumps(item))
    _rehash(case)
    code, report = _verify(case)
    assert code == 1 and "attestations" in _failed(report)
    assert _failed(report) <= {"attestations", "separation-of-duties"}


def test_case_with_a_swapped_issuer_key_fails_registry_and_attestations(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    forger = generate_ed25519("approval-app-ed25519-test")
    public = _raw_public(forger)
    keys = json.loads((case / "keys" / "issuers.json").read_text())
    original = keys["approval-app"]["approval-app-ed25519-test"]["public_key"]
    keys["approval-app"]["approval-app-ed25519-test"]["public_key"] = public
    (case / "keys" / "issuers.json").write_text(json.dumps(keys))
    registry = case / "trust" / "registry.yaml"
    registry.write_text(registry.read_text().replace(original, public))
    (path,) = (case / "attestations").glob("*-independent_human_approval.json")
    item = json.loads(path.read_text())
    fields = {k: v for k, v in item.items() if k not in {"issuer", "signature"}}
    path.write_text(json.dumps(sign_attestation(fields, "approval-app", forger)))  # re-signed with the forged key
    _rehash(case)
    code, report = _verify(case)
    assert code == 1 and {"registry", "attestations"} <= _failed(report)
    # Pinning the registry the auditor holds names it too.
    code, report = _verify(case, "--trust", str(TRUST / "registry.yaml"))
    assert code == 1 and "registry" in _failed(report)


def _raw_public(key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = key.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def test_case_with_an_edited_input_fails_inputs(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    document = json.loads((case / "input.json").read_text())
    document["action"]["amount"]["value_minor"] = 80  # USD 0.80: below every threshold
    (case / "input.json").write_text(json.dumps(document))
    _rehash(case)
    code, report = _verify(case)
    assert code == 1 and _failed(report) == {"inputs"}


def test_case_with_an_edited_chain_entry_fails_chain(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    lines = (case / "chain.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    target = next(i for i, e in enumerate(entries) if e.get("type") == "decision")
    entries[target]["input"]["action"]["amount"]["value_minor"] = 80
    (case / "chain.jsonl").write_text("".join(canonical_json(e).decode() + "\n" for e in entries))
    _rehash(case)
    code, report = _verify(case)
    assert code == 1 and "chain" in _failed(report)


def test_case_with_a_bundle_of_other_bytes_fails_bundle(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    bundle = case / "bundle.tar.gz"
    members: dict[str, bytes] = {}
    with tarfile.open(bundle, "r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            if handle is not None:
                members[member.name] = handle.read()
    name = "kcp/gate/decision.rego"
    members[name] += b"\n# an edit that changes no decision\n"
    manifest = json.loads(members[".manifest"])
    manifest["metadata"]["kcp_opa"]["files"][name] = hashlib.sha256(members[name]).hexdigest()
    members[".manifest"] = canonical_json(manifest)  # the .manifest agrees: read_bundle accepts it
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for member_name, content in members.items():
            info = tarfile.TarInfo(member_name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    bundle.write_bytes(buffer.getvalue())
    _rehash(case)
    code, report = _verify(case)
    assert code == 1 and "bundle" in _failed(report)


def test_case_with_an_unlisted_file_edit_fails_files(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    receipt = json.loads((case / "receipt.json").read_text())
    receipt["amount"] = {"currency": "USD", "value_minor": 1}
    (case / "receipt.json").write_text(json.dumps(receipt))
    code, report = _verify(case)
    assert code == 1 and {"files", "receipt"} <= _failed(report)


def test_case_of_a_ledger_that_skipped_the_policy_fails_separation_of_duties(
    demo: dict[str, Path], tmp_path: Path
) -> None:
    """A writer that appended a validly signed approval by the requester (user_001), bypassing the desk."""
    ledger = tmp_path / "bypassed.jsonl"
    ledger.write_bytes(demo["ledger"].read_bytes())
    entries = [json.loads(line) for line in ledger.read_text().splitlines()[1:]]
    control = next(
        e for e in entries if e["type"] == "control" and e["evidence"]["control"] == "independent_human_approval"
    )
    keys = load_keyring(TRUST / "TEST-ONLY-issuer-keys.json").keys
    fields = {**{k: v for k, v in control["evidence"].items() if k not in {"issuer", "signature", "actor_type"}}}
    fields["actor_id"] = "user_001"  # the requester approving their own payment
    forged = sign_attestation(fields, "approval-app", keys["approval-app-ed25519-test"])
    appended = {k: v for k, v in control.items() if k not in {"seq", "entry_hash", "previous_hash", "timestamp"}}
    appended["evidence"] = {**forged, "actor_type": "human"}
    writer = AuditLedger(ledger)
    writer.append(appended)
    writer.close()
    case = tmp_path / "case"
    made = run_cli(
        "audit", "case", str(ledger), control["decision_id"], "-o", str(case), "--bundles", str(demo["bundles"]),
        "--trust", str(TRUST / "registry.yaml"), "--keyring", str(demo["keys"]),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    code, report = _verify(case)
    assert code == 1 and _failed(report) == {"separation-of-duties"}
    detail = next(c["detail"] for c in report["checks"] if c["check"] == "separation-of-duties")
    assert "refuses" in detail


def test_case_with_an_entry_left_out_fails_entries(demo: dict[str, Path], tmp_path: Path) -> None:
    """A case that hides a refusal of evidence for the decision (drops its seq) is caught."""
    case = _copy(demo, tmp_path)
    document = json.loads((case / "case.json").read_text())
    chained = [json.loads(line) for line in (case / "chain.jsonl").read_text().splitlines()]
    refusal = next(e["seq"] for e in chained if e.get("type") == "failure" and e["seq"] in document["seqs"])
    document["seqs"] = [seq for seq in document["seqs"] if seq != refusal]
    (case / "case.json").write_text(json.dumps(document))
    code, report = _verify(case)
    assert code == 1 and _failed(report) == {"entries"}


def test_case_under_a_checkpoint_key_the_auditor_does_not_hold_fails_checkpoint(
    demo: dict[str, Path], tmp_path: Path
) -> None:
    """A regenerated ledger, checkpointed with the forger's own key shipped in the case, fails the pin."""
    held = tmp_path / "held.json"
    assert (
        run_cli(
            "receipt", "keygen", "--kid", "ckpt-1", "--keyring", str(tmp_path / "other.json"), "--public", str(held)
        ).returncode
        == 0
    )
    code, report = _verify(demo["case"], "--keyring", str(held))
    assert code == 1 and _failed(report) == {"checkpoint"}
