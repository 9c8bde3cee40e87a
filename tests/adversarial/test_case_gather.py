"""Gathering a case as an auditor does: the checkpoints they hold, the keys they have, a signed bundle.

The ledger comes from the supplier payment flow `make demo` runs, decided on signed bundles
(real processes, both engines). Gather and `audit case verify` must agree on the anchor: the
checkpoint file an auditor gathers with is the one they verify with, so a case gathered with it
passes, and a case cut before it still fails, saying how to gather it again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, run_cli

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.compile.signkeys import generate_signing_key, load_pem_signer
from kcp_opa.core.signing import Keyring, load_keyring
from kcp_opa.trail.ledger import AuditLedger

TRUST = REPO / "fixtures" / "trust"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("case-gather")
    bundles, signing = root / "bundles", root / "release.pem"
    generate_signing_key(signing, "EdDSA")
    base = DEPLOYMENTS / "finance"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        POLICIES,
        bundles / "finance.tar.gz",
        options=CompileOptions(trust_path=TRUST / "registry.yaml", signing_key=load_pem_signer(signing)),
    )
    ledger = root / "demo.jsonl"
    env = {**os.environ, "KCP_OPA_LEDGER": str(ledger), "KCP_OPA_BUNDLES": str(bundles)}
    env["KCP_OPA_VERIFICATION_KEY"] = f"{signing}.pub"
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "supplier_payment_flow.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    keys, public = root / "checkpoint-keys.json", root / "checkpoint-public.json"
    made = run_cli("receipt", "keygen", "--kid", "ckpt-1", "--keyring", str(keys), "--public", str(public))
    assert made.returncode == 0, made.stderr
    entries = [json.loads(line) for line in ledger.read_text().splitlines()[1:]]
    decision_id = next(e["decision_id"] for e in entries if e["type"] == "receipt")
    return {
        "root": root,
        "ledger": ledger,
        "bundles": bundles,
        "keys": keys,
        "public": public,
        "decision_id": decision_id,
        "verify": ["--verification-key", f"{signing}.pub"],
    }


def _checkpoint(ledger: Path, keys: Path, output: Path) -> dict[str, Any]:
    proc = run_cli("audit", "checkpoint", str(ledger), "--keyring", str(keys), "--allow-unbound", "-o", str(output))
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(output.read_text()))


def _grown_ledger_and_checkpoints(demo: dict[str, Any], tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    """The demo ledger, checkpointed right after the payment, then grown by later entries and
    checkpointed again: the checkpoints file an auditor keeps off-box (JSON Lines, oldest first)."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(demo["ledger"].read_bytes())
    first = _checkpoint(ledger, demo["keys"], tmp_path / "first.json")
    writer = AuditLedger(ledger)
    for number in range(3):
        writer.append({"type": "note", "note": f"a later entry {number}"})
    writer.close()
    second = _checkpoint(ledger, demo["keys"], tmp_path / "second.json")
    held = tmp_path / "offbox.checkpoints"
    held.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in (first, second)))
    return ledger, held, [first, second]


def _gather(demo: dict[str, Any], ledger: Path, case: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "audit", "case", str(ledger), demo["decision_id"], "-o", str(case), "--bundles", str(demo["bundles"]),
        "--trust", str(TRUST / "registry.yaml"), *demo["verify"], *extra,
    )  # fmt: skip


def _verify(demo: dict[str, Any], case: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("audit", "case", "verify", str(case), "--format", "json", *demo["verify"], *extra)
    return proc.returncode, json.loads(proc.stdout)


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(next(c for c in report["checks"] if c["check"] == name))


def test_case_gathered_with_a_checkpoints_file_verifies_against_the_same_file(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    """The first checkpoint after the decision is not the anchor: the newest one the file holds
    is, so `audit case verify --checkpoint FILE` with the gathering file passes."""
    ledger, held, (_, second) = _grown_ledger_and_checkpoints(demo, tmp_path)
    case = tmp_path / "case"
    made = _gather(demo, ledger, case, "--checkpoint", str(held), "--keyring", str(demo["public"]))
    assert made.returncode == 0, made.stderr
    assert f"anchored at seq {second['seq']}" in made.stdout
    code, report = _verify(demo, case, "--keyring", str(demo["public"]), "--checkpoint", str(held))
    assert code == 0 and _check(report, "anchor")["ok"] is True, report


def test_case_cut_before_the_auditors_checkpoint_fails_and_says_how_to_gather_it_again(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    ledger, held, (first, second) = _grown_ledger_and_checkpoints(demo, tmp_path)
    early = tmp_path / "early.jsonl"
    early.write_text("".join(ledger.read_text().splitlines(keepends=True)[: first["seq"] + 1]))
    case = tmp_path / "case"
    made = _gather(demo, early, case, "--keyring", str(demo["keys"]))  # signs the early head
    assert made.returncode == 0, made.stderr
    code, report = _verify(demo, case, "--keyring", str(demo["public"]), "--checkpoint", str(held))
    failed = {c["check"] for c in report["checks"] if c["ok"] is False}
    assert code == 1 and failed == {"anchor"}, report
    detail = _check(report, "anchor")["detail"]
    assert f"cut at seq {first['seq']}" in detail and f"at seq {second['seq']}" in detail
    assert f"gather the case again with --checkpoint {held}" in detail


def test_gather_refuses_a_checkpoint_the_ledger_copy_does_not_reach(demo: dict[str, Any], tmp_path: Path) -> None:
    """A ledger copy older than the auditor's checkpoint makes no case (it would fail `chain`)."""
    ledger, held, (first, second) = _grown_ledger_and_checkpoints(demo, tmp_path)
    early = tmp_path / "early.jsonl"
    early.write_text("".join(ledger.read_text().splitlines(keepends=True)[: first["seq"] + 1]))
    case = tmp_path / "case"
    made = _gather(demo, early, case, "--checkpoint", str(held), "--keyring", str(demo["public"]))
    assert made.returncode != 0 and not case.exists()
    assert f"ends at seq {first['seq']}" in made.stderr and f"at seq {second['seq']}" in made.stderr
    assert "Traceback" not in made.stderr and len(made.stderr.strip().splitlines()) == 1


def test_gather_refuses_a_ledger_copy_that_differs_at_the_checkpoint(demo: dict[str, Any], tmp_path: Path) -> None:
    """Another tail under the same seqs (a rewritten copy): the checkpoint does not sign it, no case."""
    _, held, (_, second) = _grown_ledger_and_checkpoints(demo, tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_bytes(demo["ledger"].read_bytes())
    writer = AuditLedger(other)
    for number in range(3):
        writer.append({"type": "note", "note": f"another later entry {number}"})
    writer.close()
    case = tmp_path / "case"
    made = _gather(demo, other, case, "--checkpoint", str(held), "--keyring", str(demo["public"]))
    assert made.returncode != 0 and not case.exists(), made.stdout
    assert f"seq {second['seq']} is not the entry your checkpoint signed" in made.stderr
    assert len(made.stderr.strip().splitlines()) == 1


def test_gather_needs_no_keyring_when_the_receipt_keyring_verifies_the_checkpoint(
    demo: dict[str, Any], tmp_path: Path
) -> None:
    """A gate that signs receipts and checkpoints with one keyring: its public keyring suffices."""
    receipt_keys = load_keyring(demo["root"] / "demo-receipt-keys.json")
    gate = Keyring({**receipt_keys.keys, **load_keyring(demo["public"]).keys})
    gate_public = tmp_path / "gate-public.json"
    gate_public.write_text(json.dumps(gate.to_file_dict(include_private=False)))
    ledger, held, _ = _grown_ledger_and_checkpoints(demo, tmp_path)
    case = tmp_path / "case"
    made = _gather(
        demo, ledger, case, "--checkpoint", str(held),
        "--receipt", str(demo["root"] / "demo-receipt.json"), "--receipt-keyring", str(gate_public),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    code, report = _verify(
        demo, case, "--keyring", str(gate_public), "--receipt-keyring", str(gate_public), "--checkpoint", str(held)
    )
    assert code == 0 and all(c["ok"] is True for c in report["checks"]), report


def test_gather_without_a_key_for_its_anchor_names_what_to_add(demo: dict[str, Any], tmp_path: Path) -> None:
    ledger, held, _ = _grown_ledger_and_checkpoints(demo, tmp_path)
    nothing = _gather(demo, ledger, tmp_path / "a")
    assert nothing.returncode != 0 and len(nothing.stderr.strip().splitlines()) == 1
    assert "--keyring" in nothing.stderr and "--checkpoint" in nothing.stderr
    unknown = _gather(demo, ledger, tmp_path / "b", "--checkpoint", str(held))
    assert unknown.returncode != 0 and len(unknown.stderr.strip().splitlines()) == 1
    assert "'ckpt-1'" in unknown.stderr and "add --keyring" in unknown.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _readme_commands(case: Path) -> list[str]:
    """Every indented command of the case's README, continuation lines joined."""
    text = (case / "README.md").read_text()
    blocks = re.findall(r"(?m)^    (.+?)(?<!\\)$", text.replace("\\\n        ", ""))
    return [line for line in blocks if line.startswith(("kcp-opa ", "opa "))]


def test_case_readme_commands_run_as_written_on_a_signed_bundle(demo: dict[str, Any], tmp_path: Path) -> None:
    """In the case directory, with the copies the pinned command names beside it: every command."""
    case = tmp_path / "case"
    made = _gather(
        demo, demo["ledger"], case, "--keyring", str(demo["keys"]),
        "--receipt", str(demo["root"] / "demo-receipt.json"),
        "--receipt-keyring", str(demo["root"] / "demo-receipt-keys.json"),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    shutil.copy(TRUST / "registry.yaml", case / "registry.yaml")  # the copies an auditor holds
    shutil.copy(demo["public"], case / "checkpoint-public.json")
    shutil.copy(demo["root"] / "demo-receipt-keys.json", case / "receipt-public.json")
    shutil.copy(demo["verify"][1], case / "bundle-public.pem")
    _checkpoint(demo["ledger"], demo["keys"], case / "newer-checkpoint.json")
    commands = _readme_commands(case)
    assert len(commands) == 6, commands
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = json.loads((case / "result.json").read_text())
    ran = 0
    for command in commands:
        if command.startswith("opa ") and shutil.which("opa") is None:
            assert command == "opa eval -b bundle.tar.gz -i input.json 'data.kcp.gate.decision'"
            continue  # no opa binary here: kcp-opa eval --engine opa above ran OPA's Go engine
        done = subprocess.run(["bash", "-c", command], cwd=case, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        if " eval " in f" {command} ":
            assert json.loads(done.stdout)["result"][0]["expressions"][0]["value"] == result, command
        ran += 1
    assert ran >= 5 and any(c.startswith("kcp-opa bundle verify ") for c in commands)
