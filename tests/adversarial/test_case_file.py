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
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.signing import Keyring, generate_ed25519, load_keyring, sign_document
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
        options=CompileOptions(trust_path=TRUST / "registry.yaml"),
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


def _pins(demo: dict[str, Path], *extra: str) -> list[str]:
    """Every pin an auditor holds apart from the case: registry, checkpoint and receipt keys."""
    keys = demo["keys"]
    receipt_keys = demo["root"] / "demo-receipt-keys.json"
    return [
        "--trust",
        str(TRUST / "registry.yaml"),
        "--keyring",
        str(keys),
        "--receipt-keyring",
        str(receipt_keys),
        *extra,
    ]


def test_case_from_the_demo_verifies_every_check(demo: dict[str, Path]) -> None:
    head = len(demo["ledger"].read_text().splitlines()) - 1
    code, report = _verify(demo["case"], *_pins(demo, "--expect-head", str(head)))
    assert code == 0 and report["ok"], [c for c in report["checks"] if c["ok"] is not True]
    names = [check["check"] for check in report["checks"]]
    assert names == [
        "files", "checkpoint", "chain", "anchor", "entries", "bundle", "registry", "inputs", "attestations",
        "replay-regopy", "replay-opa", "separation-of-duties", "receipt",
    ]  # fmt: skip
    assert all(check["ok"] is True for check in report["checks"]), report
    text = run_cli("audit", "case", "verify", str(demo["case"]), "--format", "text")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == len(names) + 1
    marks = {line.split()[1]: line.split()[0] for line in text.stdout.splitlines()[:-1]}
    assert marks["receipt"] == "warn" and marks["anchor"] == "warn"  # unpinned: said, never "ok"


def _keep_from(case: Path, first: int) -> None:
    """Drop every chained entry before seq ``first``, and the decision's seqs and files with them."""
    items = [json.loads(line) for line in (case / "chain.jsonl").read_text().splitlines()]
    kept = [i for i in items if "seq" not in i or i["seq"] >= first]
    (case / "chain.jsonl").write_bytes(b"".join(canonical_json(i) + b"\n" for i in kept))
    document = json.loads((case / "case.json").read_text())
    document["seqs"] = [seq for seq in document["seqs"] if seq >= first]
    for name in list(document["files"]):
        if name.startswith(("decisions/", "attestations/")) and int(name.split("/")[1][:6]) < first:
            del document["files"][name]
            (case / name).unlink()
    (case / "case.json").write_text(json.dumps(document))


def test_case_without_the_start_of_the_decisions_history_fails_chain(demo: dict[str, Path], tmp_path: Path) -> None:
    """Dropping the decision's first entries (its first refusals, its first decision) from the
    chain, case.json and the files, then rehashing, must not pass with every pin."""
    case = _copy(demo, tmp_path)
    chained = [json.loads(line) for line in (case / "chain.jsonl").read_text().splitlines()[1:]]
    refused = min(e["seq"] for e in chained if e["type"] == "failure")  # a refused self-approval
    first = next(e["seq"] for e in chained if e["type"] == "decision" and e["seq"] > refused)
    _keep_from(case, first)  # hides the first decisions and the refusals; every later check still holds
    _rehash(case)
    code, report = _verify(case, *_pins(demo))
    assert code == 1 and "chain" in _failed(report), report
    assert "seq 1" in next(c["detail"] for c in report["checks"] if c["check"] == "chain")


def _signed_head(ledger: Path, keys: Path, output: Path) -> dict[str, Any]:
    proc = run_cli("audit", "checkpoint", str(ledger), "--keyring", str(keys), "--allow-unbound", "-o", str(output))
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(output.read_text()))


def test_case_cut_at_an_earlier_checkpoint_fails_against_a_newer_anchor(demo: dict[str, Path], tmp_path: Path) -> None:
    """A genuine case gathered before the receipt and the execution were chained: it must not
    say "no receipt was issued", only "none up to seq N", and a newer anchor must fail it."""
    lines = demo["ledger"].read_text().splitlines(keepends=True)
    entries = [json.loads(line) for line in lines[1:]]
    receipt = next(e for e in entries if e["type"] == "receipt")
    early = tmp_path / "early.jsonl"
    early.write_text("".join(lines[: receipt["seq"]]))  # the header and seqs 1..receipt-1
    case = tmp_path / "case"
    made = run_cli(
        "audit", "case", str(early), receipt["decision_id"], "-o", str(case), "--bundles", str(demo["bundles"]),
        "--trust", str(TRUST / "registry.yaml"), "--keyring", str(demo["keys"]),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    code, report = _verify(case, *_pins(demo))
    details = {c["check"]: c for c in report["checks"]}
    assert code == 0 and details["anchor"]["ok"] is None and details["anchor"]["warning"] is True
    cut = f"up to seq {receipt['seq'] - 1} (checkpoint at "
    assert cut in details["receipt"]["detail"] and cut in details["entries"]["detail"]
    newer = _signed_head(demo["ledger"], demo["keys"], tmp_path / "newer.json")
    code, report = _verify(case, *_pins(demo, "--checkpoint", str(tmp_path / "newer.json")))
    assert code == 1 and _failed(report) == {"anchor"}, report
    code, report = _verify(case, *_pins(demo, "--expect-head", str(newer["seq"])))
    assert code == 1 and _failed(report) == {"anchor"}, report
    # The full case holds the anchored entry: the same anchor passes it.
    code, report = _verify(demo["case"], *_pins(demo, "--checkpoint", str(tmp_path / "newer.json")))
    assert code == 0 and next(c for c in report["checks"] if c["check"] == "anchor")["ok"] is True, report


def test_case_whose_checkpoint_seq_was_edited_fails_checkpoint(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    document = json.loads((case / "case.json").read_text())
    document["checkpoint_seq"] += 5  # claims a later cut than the checkpoint signs
    (case / "case.json").write_text(json.dumps(document))
    code, report = _verify(case, *_pins(demo))
    assert code == 1 and _failed(report) == {"checkpoint"}


def _resign_receipt(case: Path, **changes: Any) -> None:
    """A new key under the issuer's kid re-signs the receipt; the case ships that key."""
    receipt = json.loads((case / "receipt.json").read_text())
    forger = generate_ed25519(receipt["signature"]["kid"])
    fields = {k: v for k, v in receipt.items() if k != "signature"} | changes
    (case / "receipt.json").write_text(json.dumps(sign_document(fields, forger)))
    (case / "keys" / "receipt.json").write_text(
        json.dumps(Keyring({forger.kid: forger}).to_file_dict(include_private=False))
    )
    _rehash(case)


def test_case_receipt_resigned_with_other_approvers_fails_receipt(demo: dict[str, Path], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    _resign_receipt(case, approver_ids=["treasury_approver_ben"])
    code, report = _verify(case, "--trust", str(TRUST / "registry.yaml"))  # unpinned: the chained entry catches it
    assert code == 1 and _failed(report) == {"receipt"}, report
    assert "approver_ids" in next(c["detail"] for c in report["checks"] if c["check"] == "receipt")
    code, report = _verify(case, *_pins(demo))  # pinned: the signature does not verify either
    assert code == 1 and _failed(report) == {"receipt"}, report


def test_case_receipt_resigned_with_the_same_fields_is_never_a_pass(demo: dict[str, Path], tmp_path: Path) -> None:
    """Signed by a key only the case supplies: a warning unpinned, a failure against the pin."""
    case = _copy(demo, tmp_path)
    _resign_receipt(case)
    code, report = _verify(case)
    receipt = next(c for c in report["checks"] if c["check"] == "receipt")
    assert receipt["ok"] is None and receipt["warning"] is True and receipt["detail"].startswith("not pinned")
    code, report = _verify(case, *_pins(demo))
    assert code == 1 and _failed(report) == {"receipt"}, report


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
