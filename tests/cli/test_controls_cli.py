"""The control flow on the command line: decide -> controls -> receipt -> verify, real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, VOUCH, run_cli
from trustkit import DECIDED, KYA_APPROVALS, REGISTRY

SIX = list(KYA_APPROVALS)


def test_cli_flow_from_challenge_to_verified_receipt(
    trust_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trustkit import TEST_KEYS

    monkeypatch.setenv("KCP_OPA_DESK_SECRET", "desk-seal-secret-for-tests-0123456789")
    keys = json.loads(TEST_KEYS.read_text())
    gate_ring = tmp_path / "gate-keyring.json"
    gate_ring.write_text(json.dumps({**keys, "signing_kid": "kcp-opa-gate-ed25519-test"}))
    action = str(REPO / "fixtures" / "kya-supplier-payment-action.json")
    record = tmp_path / "record.json"
    desk_args = ["--bundle", str(trust_bundle), "--trust", str(REGISTRY), "--ledger", str(tmp_path / "ledger.jsonl")]
    desk_args += ["--gate-keyring", str(gate_ring), *VOUCH]  # the test wrote the action: the host vouches
    opened = run_cli("controls", "challenge", *desk_args, "--action", action, "--record", str(record), "--now", DECIDED)
    assert opened.returncode == 0, opened.stderr
    state = json.loads(opened.stdout)
    assert (
        state["authorization_status"] == "PENDING_CONTROLS"
        and "standard_audit_logging" not in state["missing_controls"]
    )
    for control, actor in SIX[1:]:
        issuer = {"user_confirmation": "bank-idp", "identity_verification": "bank-idp",
                  "authority_verification": "kcp-opa-gate", "beneficiary_verification": "bank-registry",
                  "independent_human_approval": "approval-app"}[control]  # fmt: skip
        evidence = tmp_path / f"{control}.json"
        attested = run_cli(
            "controls", "attest", "--issuer", issuer, "--keyring", str(TEST_KEYS), "--kid", f"{issuer}-ed25519-test",
            "--control", control, "--actor", actor, "--decision-id", state["decision_id"],
            "--action-hash", state["action_hash"], "--reference", f"ev:{control}", "--output", str(evidence),
            "--now", "2026-11-29T10:01:00Z",
        )  # fmt: skip
        assert attested.returncode == 0, attested.stderr
        recorded = run_cli("controls", "record", *desk_args, "--record", str(record), "--evidence", str(evidence),
                           "--action", action)  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
    shown = json.loads(run_cli("controls", "show", *desk_args, "--record", str(record)).stdout)
    assert shown["authorization_status"] == "APPROVED" and shown["missing_controls"] == []
    # an edited record file is refused
    edited = json.loads(record.read_text())
    edited["attestations"] = edited["attestations"][:-1]
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(edited))
    refused = run_cli("controls", "show", *desk_args, "--record", str(forged))
    assert refused.returncode == 1 and json.loads(refused.stderr)["code"] == "record_tampered"
    signer = tmp_path / "receipt-keyring.json"
    assert run_cli("receipt", "keygen", "--kid", "rcpt-1", "--keyring", str(signer)).returncode == 0
    issued = run_cli("controls", "issue", *desk_args, "--record", str(record), "--keyring", str(signer),
                     "--output", str(tmp_path / "receipt.json"), "--now", "2026-11-29T10:02:00Z")  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    verified = run_cli(
        "receipt", "verify", "--action", action, "--receipt", str(tmp_path / "receipt.json"), "--keyring", str(signer),
        "--policy-version", json.loads(issued.stdout)["policy_version"], "--now", "2026-11-29T10:02:30Z",
        "--nonce-db", str(tmp_path / "nonces.db"),
    )  # fmt: skip
    assert verified.returncode == 0 and json.loads(verified.stdout)["consumed"] is True
    # the KYA decision document, signed by the gate: `receipt issue` takes it with the gate's public key
    decision_keys, decision_public = tmp_path / "decision-keys.json", tmp_path / "decision-public.json"
    made = run_cli("receipt", "keygen", "--kid", "gate-decisions-1", "--keyring", str(decision_keys),
                   "--public", str(decision_public))  # fmt: skip
    assert made.returncode == 0, made.stderr
    document = tmp_path / "decision.json"
    written = run_cli("controls", "show", *desk_args, "--record", str(record), "--decision-out", str(document),
                      "--decision-signing-key", str(decision_keys))  # fmt: skip
    assert written.returncode == 0, written.stderr
    assert json.loads(document.read_text())["signature"]["kid"] == "gate-decisions-1"
    receipt_args = ["receipt", "issue", "--action", action, "--decision", str(document), "--keyring", str(signer)]
    taken = run_cli(*receipt_args, "--decision-key", str(decision_public), "--now", "2026-11-29T10:02:00Z")
    assert taken.returncode == 0, taken.stderr
    edited = json.loads(document.read_text()) | {"receipt_ttl_seconds": 900}
    document.write_text(json.dumps(edited))
    refused = run_cli(*receipt_args, "--decision-key", str(decision_public), "--now", "2026-11-29T10:02:00Z")
    assert refused.returncode == 2 and json.loads(refused.stderr)["code"] == "bad_signature"
