"""``GET /v1/proofs/{decision_id}`` on a real `kcp-opa serve`, checked offline with the CLI verifier.

A payment is decided, approved, receipted and executed on a running service whose ledger has
an Ed25519 writer key. The auditor fetches the decision's proofs and, holding only the answer,
the log key (``audit tree-key``, obtained apart from the service) and the writer's public key,
verifies each with ``kcp-opa audit verify-inclusion``: the decision, its receipt, the consume
(intent) and the execution outcome are each proven in the signed tree. Nothing of another
decision is in the answer; a changed entry fails; the route is authenticated and scoped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import run_cli
from uikit import ANSWERS, _action, _api, _pending_payment, ui_servers

from kcp_opa.core.signing import Keyring, generate_ed25519


@pytest.fixture(scope="module")
def proven(tmp_path_factory: pytest.TempPathFactory) -> Any:
    work = tmp_path_factory.mktemp("proofs")
    key = generate_ed25519("proofs-ledger-writer")
    private, public = work / "writer.json", work / "writer-public.json"
    private.write_text(json.dumps(Keyring({key.kid: key}, key.kid).to_file_dict(include_private=True)))
    private.chmod(0o600)
    public.write_text(json.dumps(Keyring({key.kid: key}).public().to_file_dict(include_private=False)))
    with ui_servers(work, extra=["--ledger-key", str(private)]) as (server,):
        other, _ = _pending_payment(server, _action("proofs_other"))
        action = _action("proofs")
        decision_id, ids = _pending_payment(server, action)
        approval = {"status": "PASSED", "evidence_reference": "call:anna"}
        control = "independent_human_approval"
        assert control not in ANSWERS
        answered = _api(server, "approver", "POST", f"/v1/challenges/{ids[control]}/result", approval)
        assert answered.status_code == 200, answered.text
        issued = _api(server, "issuer", "POST", "/v1/receipts", {"decision_id": decision_id})
        assert issued.status_code == 200, issued.text
        run = {"action": action, "receipt": issued.json()["receipt"], "handler": "pay"}
        executed = _api(server, "executor", "POST", "/v1/executions", run)
        assert executed.status_code == 200, executed.text
        receipt_id = issued.json()["receipt"]["receipt_id"]
        yield {"server": server, "decision_id": decision_id, "other": other, "work": work, "receipt_id": receipt_id}


def _log_key(proven: Any) -> str:
    """The log key the auditor holds apart from the service's answer (`audit tree-key` by the ledger's owner)."""
    ledger, work = proven["server"]["ledger"], proven["work"]
    proc = run_cli("audit", "tree-key", ledger, "--keyring", str(work / "writer.json"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _fetched(proven: Any, party: str = "auditor") -> Any:
    return _api(proven["server"], party, "GET", f"/v1/proofs/{proven['decision_id']}")


def _verify(work: Path, answer: dict[str, Any], log_key: str, index: int, proof: dict[str, Any]) -> Any:
    checkpoint, path = work / "checkpoint.note", work / f"proof-{index}.json"
    checkpoint.write_text(answer["checkpoint"])
    path.write_text(json.dumps(proof))
    return run_cli(
        "audit",
        "verify-inclusion",
        str(path),
        "--checkpoint",
        str(checkpoint),
        "--log-key",
        log_key,
        "--keyring",
        str(work / "writer-public.json"),
        "--writer",
        answer["proofs"][0]["entry"]["entry_signature"]["kid"],
    )


def test_each_entry_of_the_decision_verifies_offline(proven: Any) -> None:
    answer = _fetched(proven)
    assert answer.status_code == 200, answer.text
    document = answer.json()
    log_key = _log_key(proven)
    assert document["log_key"] == log_key
    types = []
    for index, proof in enumerate(document["proofs"]):
        done = _verify(proven["work"], document, log_key, index, proof)
        assert done.returncode == 0, done.stderr
        verified = json.loads(done.stdout)
        assert verified["ok"] is True and verified["seq"] == proof["seq"]
        types.append(verified["type"])
    # the decision, its receipt, the consume (the intent) and the execution's outcome, each proven
    assert {"decision", "receipt", "intent", "execution"} <= set(types), types
    receipts = {p["entry"]["receipt_id"] for p in document["proofs"] if p["entry"].get("type") == "receipt"}
    for proof in document["proofs"]:  # nothing of another decision
        entry = proof["entry"]
        assert entry.get("decision_id") == proven["decision_id"] or entry.get("receipt_id") in receipts
        assert proven["other"] not in json.dumps(entry)


def test_a_changed_entry_or_another_checkpoint_fails_offline(proven: Any) -> None:
    document = _fetched(proven).json()
    log_key = _log_key(proven)
    decision = next(p for p in document["proofs"] if p["entry"]["type"] == "decision")
    changed = json.loads(json.dumps(decision))
    changed["entry"]["decision"] = "ALLOW" if changed["entry"].get("decision") != "ALLOW" else "DENY"
    done = _verify(proven["work"], document, log_key, 99, changed)
    assert done.returncode == 1 and "does not verify" in done.stderr, done.stderr
    later = _api(proven["server"], "agent", "POST", "/v1/decisions", {"action": _action("proofs_later")})
    assert later.status_code == 200
    newer = _fetched(proven).json()  # a newer tree: the old proof is not a proof for it
    done = _verify(proven["work"], newer, log_key, 98, decision)
    assert done.returncode == 1 and "tree of" in done.stderr, done.stderr


def test_the_route_is_authenticated_and_scoped(proven: Any) -> None:
    url = f"{proven['server']['url']}/v1/proofs/{proven['decision_id']}"
    assert httpx2.get(url, timeout=60).status_code == 401
    refused = _fetched(proven, "agent")  # an agent may not read the ledger
    assert refused.status_code == 403 and refused.json()["code"] == "not_authorized"
    missing = _api(proven["server"], "auditor", "GET", "/v1/proofs/dec_nope")
    assert missing.status_code == 404 and missing.json()["code"] == "unknown_decision"


def test_the_receipt_was_consumed_once_and_its_outcome_is_proven(proven: Any) -> None:
    """On the service's own ledger: a tree checkpoint, then the receipt's consume proof checked offline."""
    ledger, work, receipt = proven["server"]["ledger"], proven["work"], proven["receipt_id"]
    note = work / "tree.note"
    made = run_cli("audit", "tree-checkpoint", ledger, "--keyring", str(work / "writer.json"), "-o", str(note))
    assert made.returncode == 0, made.stderr
    proof = work / "consumed.json"
    made = run_cli("audit", "prove-consumed", ledger, receipt, "--checkpoint", str(note), "-o", str(proof))
    assert made.returncode == 0, made.stderr
    kid = json.loads((work / "writer-public.json").read_text())["keys"][0]["kid"]
    done = run_cli(
        "audit", "verify-consumed", str(proof), receipt, "--checkpoint", str(note), "--log-key", _log_key(proven),
        "--keyring", str(work / "writer-public.json"), "--writer", kid,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["consumed"] == 1 and [o["type"] for o in shown["outcomes"]] == ["execution"]
    assert shown["outcomes"][0]["outcome"] == "succeeded"
