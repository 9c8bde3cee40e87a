"""Attacks on a proof case (`audit case --proofs`): only the decision's entries, each with an inclusion proof.

The case comes from the supplier payment flow `make demo` runs (real processes, both engines),
proven against a tree checkpoint the writer signed and a witness cosigned. Every attacker here
also rewrites case.json's file hashes, so `files` passes and the check that names the guarantee
must catch it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.trail.ledgertree import LedgerTree
from kcp_opa.trail.proofs import inclusion_document

TRUST = REPO / "fixtures" / "trust"


def _cli(*args: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("proof-case")
    bundles = root / "bundles"
    for name in ("customer-onboarding", "support-desk", "finance"):  # decide_demo.py decides on all three
        base = DEPLOYMENTS / name
        compile_bundle(
            [base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundles / f"{name}.tar.gz",
            options=CompileOptions(trust_path=TRUST / "registry.yaml"),
        )  # fmt: skip
    ledger = root / "demo.jsonl"
    env = {**os.environ, "KCP_OPA_LEDGER": str(ledger), "KCP_OPA_BUNDLES": str(bundles)}
    for script in ("decide_demo.py", "supplier_payment_flow.py"):  # other decisions first, then the case's
        proc = subprocess.run(
            [sys.executable, str(REPO / "examples" / script)],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
    keys, wkeys = root / "log-keys.json", root / "witness-keys.json"
    _cli("receipt", "keygen", "--kid", "log-1", "--keyring", str(keys))
    _cli("receipt", "keygen", "--kid", "witness-1", "--keyring", str(wkeys))
    log_vkey = run_cli("audit", "tree-key", str(ledger), "--keyring", str(keys)).stdout.strip()
    (root / "log.vkey").write_text(log_vkey + "\n")
    witness = ("--keyring", str(wkeys), "--name", "witness.example/w1")
    (root / "witness.vkey").write_text(run_cli("witness", "key", *witness).stdout)
    tree = root / "tree.checkpoint"
    _cli("audit", "tree-checkpoint", str(ledger), "--keyring", str(keys), "--allow-unbound", "-o", str(tree))
    cosigned = root / "tree.cosigned"
    _cli(
        "witness", "cosign", str(tree), "--state", str(root / "witness.state"), "--log-key", str(root / "log.vkey"),
        *witness, "-o", str(cosigned),
    )  # fmt: skip
    entries = [json.loads(line) for line in ledger.read_text().splitlines()[1:]]
    decision_id = next(e["decision_id"] for e in entries if e["type"] == "receipt")

    def gather(output: Path, checkpoint: Path) -> None:
        _cli(
            "audit", "case", str(ledger), decision_id, "-o", str(output), "--bundles", str(bundles),
            "--trust", str(TRUST / "registry.yaml"), "--proofs", "--tree-checkpoint", str(checkpoint),
            "--log-key", str(root / "log.vkey"),
            "--receipt", str(root / "demo-receipt.json"), "--receipt-keyring", str(root / "demo-receipt-keys.json"),
        )  # fmt: skip

    gather(root / "case", cosigned)
    gather(root / "case-writer-only", tree)
    _cli(
        "audit", "case", str(ledger), decision_id, "-o", str(root / "chain-case"), "--bundles", str(bundles),
        "--trust", str(TRUST / "registry.yaml"), "--keyring", str(keys),
    )  # fmt: skip
    return {"root": root, "case": root / "case", "ledger": ledger, "id": decision_id, "entries": entries,
            "gather": gather, "tree": tree}  # fmt: skip


def _copy(demo: dict[str, Any], tmp_path: Path, name: str = "case") -> Path:
    target = tmp_path / name
    shutil.copytree(demo["root"] / name, target)
    return target


def _rehash(case: Path) -> None:
    """What a careful attacker does after editing: make case.json list every file with its new hash."""
    document = json.loads((case / "case.json").read_text())
    held = [p for p in case.rglob("*") if p.is_file() and p.name != "case.json"]
    document["files"] = {str(p.relative_to(case)): hashlib.sha256(p.read_bytes()).hexdigest() for p in held}
    (case / "case.json").write_text(json.dumps(document, indent=2))


def _pins(demo: dict[str, Any], witnesses: int = 1) -> list[str]:
    root = demo["root"]
    return [
        "--trust", str(TRUST / "registry.yaml"), "--receipt-keyring", str(root / "demo-receipt-keys.json"),
        "--log-key", str(root / "log.vkey"), "--witness-key", str(root / "witness.vkey"),
        "--witnesses", str(witnesses),
    ]  # fmt: skip


def _verify(case: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("audit", "case", "verify", str(case), "--format", "json", *extra)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _failed(report: dict[str, Any]) -> dict[str, str]:
    return {check["check"]: check["detail"] for check in report["checks"] if check["ok"] is False}


def _write(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def test_proof_case_verifies_on_proofs_and_holds_only_its_decision(demo: dict[str, Any]) -> None:
    case = demo["case"]
    code, report = _verify(case, *_pins(demo))
    assert code == 0 and report["ok"], _failed(report)
    names = [check["check"] for check in report["checks"]]
    assert names == [
        "files", "tree-checkpoint", "proofs", "entries", "bundle", "registry", "inputs", "attestations",
        "replay-regopy", "replay-opa", "separation-of-duties", "receipt",
    ]  # fmt: skip
    by_name = {check["check"]: check for check in report["checks"]}
    assert (
        by_name["tree-checkpoint"]["ok"] is True
        and "cosigned by witness.example/w1" in by_name["tree-checkpoint"]["detail"]
    )
    for name in ("replay-regopy", "replay-opa", "separation-of-duties", "attestations", "inputs", "receipt"):
        assert by_name[name]["ok"] is True and "on entries proven by inclusion" in by_name[name]["detail"], name
    assert by_name["entries"]["ok"] is None and "does not show that none was left out" in by_name["entries"]["detail"]
    assert not (case / "chain.jsonl").exists()
    assert "left out is not shown" in (case / "README.md").read_text()
    document = json.loads((case / "case.json").read_text())
    assert sorted(int(p.stem) for p in (case / "entries").iterdir()) == document["seqs"]
    others = {e["decision_id"] for e in demo["entries"] if e.get("decision_id")} - {demo["id"]}
    assert others, "the demo ledger holds other decisions"
    text = b"".join(p.read_bytes() for p in case.rglob("*") if p.is_file() and p.suffix != ".gz")
    assert not [other for other in others if other.encode() in text]


def test_another_decisions_entry_smuggled_in_fails_proofs(demo: dict[str, Any], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    other = next(e for e in demo["entries"] if e["type"] == "decision" and e["decision_id"] != demo["id"])
    seq = other["seq"]
    tree = LedgerTree.read(demo["ledger"], keep=frozenset({seq}))
    size = json.loads((case / "case.json").read_text())["checkpoint_seq"]
    proof = inclusion_document(tree, seq, tree.checkpoint(size))  # a valid proof: the entry is in the tree
    _write(case / "entries" / f"{seq:06d}.json", proof["entry"])
    _write(case / "proofs" / f"{seq:06d}.json", proof)
    document = json.loads((case / "case.json").read_text())
    document["seqs"] = sorted([*document["seqs"], seq])
    (case / "case.json").write_text(json.dumps(document))
    _rehash(case)
    code, report = _verify(case, *_pins(demo))
    assert code == 1 and f"seq {seq} is not an entry of decision" in _failed(report)["proofs"]


def test_unlisted_file_in_a_proof_case_fails_files(demo: dict[str, Any], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    other = next(e for e in demo["entries"] if e["type"] == "decision" and e["decision_id"] != demo["id"])
    _write(case / "decisions" / f"{other['seq']:06d}-input.json", other["input"])  # not listed in case.json
    code, report = _verify(case, *_pins(demo))
    assert code == 1 and "files case.json does not list" in _failed(report)["files"]


def test_proof_for_the_wrong_tree_size_fails_proofs(demo: dict[str, Any], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    document = json.loads((case / "case.json").read_text())
    seq, size = document["seqs"][0], document["checkpoint_seq"] - 1  # a valid proof, for a smaller tree
    assert seq <= size
    tree = LedgerTree.read(demo["ledger"], keep=frozenset({seq}))
    _write(case / "proofs" / f"{seq:06d}.json", inclusion_document(tree, seq, tree.checkpoint(size)))
    _rehash(case)
    code, report = _verify(case, *_pins(demo))
    assert code == 1 and f"seq {seq}: the proof is for a tree of {size} entries" in _failed(report)["proofs"]


def test_edited_entry_fails_proofs(demo: dict[str, Any], tmp_path: Path) -> None:
    case = _copy(demo, tmp_path)
    seq = json.loads((case / "case.json").read_text())["seqs"][0]
    entry = json.loads((case / "entries" / f"{seq:06d}.json").read_text())
    proof = json.loads((case / "proofs" / f"{seq:06d}.json").read_text())
    entry["input"]["action"]["amount"] = 1  # the entry and the proof's copy of it, both edited
    proof["entry"] = entry
    _write(case / "entries" / f"{seq:06d}.json", entry)
    _write(case / "proofs" / f"{seq:06d}.json", proof)
    _rehash(case)
    code, report = _verify(case, *_pins(demo))
    failed = _failed(report)
    assert code == 1 and "the inclusion proof does not verify" in failed["proofs"]
    assert "replay-regopy" in failed  # every later check reads only proven entries


def test_writer_only_checkpoint_fails_when_a_witness_is_required(demo: dict[str, Any], tmp_path: Path) -> None:
    code, report = _verify(demo["root"] / "case-writer-only", *_pins(demo, witnesses=1))
    assert code == 1 and "0 valid witness cosignature(s) of the 1 required" in _failed(report)["tree-checkpoint"]
    code, report = _verify(demo["root"] / "case-writer-only", *_pins(demo, witnesses=0))
    assert code == 0, _failed(report)
    # the cosigned case with its cosignature stripped (rehashed) fails the same way
    case = _copy(demo, tmp_path)
    shutil.copy(demo["tree"], case / "checkpoint.note")
    _rehash(case)
    code, report = _verify(case, *_pins(demo, witnesses=1))
    assert code == 1 and "tree-checkpoint" in _failed(report)


def test_witness_pins_on_a_chain_case_are_refused_not_ignored(demo: dict[str, Any]) -> None:
    code, report = _verify(demo["root"] / "chain-case", *_pins(demo, witnesses=1))
    assert code == 1 and "a chain case has no tree checkpoint" in _failed(report)["case"]
