"""Receipts, attestations and checkpoints signed inside a real SoftHSM2 token (PKCS#11, CKM_EDDSA).

The private key is generated on the token (sensitive, never extractable) and only its public
key leaves it; what the token signs verifies with that public key alone, through the library,
a keyring file and the CLI (``--signing-key pkcs11:...``).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, receipt_for, run_cli, vouched_gate
from trustkit import approve_all, compile_with_trust, make_desk

from kcp_opa.authorize.attestations import sign_attestation
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.core.errors import KeyringError, ReceiptVerificationError
from kcp_opa.core.signing import (
    ED25519,
    Ed25519Key,
    Keyring,
    Pkcs11Key,
    Pkcs11Uri,
    create_pkcs11_ed25519,
    document_verifies,
    generate_ed25519,
    load_keyring,
    load_signing_key,
    open_pkcs11_key,
)
from kcp_opa.trail.checkpoint import Checkpoint

ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
ISSUED = dt.datetime(2026, 11, 29, 10, 2, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def approved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The KYA payment, APPROVED through the control desk with six signed attestations."""
    desk = make_desk(vouched_gate(compile_with_trust(tmp_path_factory.mktemp("hsm") / "finance.tar.gz")))
    record = approve_all(desk, ACTION)
    assert record.decision.authorization_status.value == "APPROVED"
    return record.to_dict()


@pytest.fixture(scope="module")
def hsm_key(softhsm_token: Any) -> Pkcs11Key:
    return create_pkcs11_ed25519(softhsm_token.uri("receipts-1"))


def test_a_receipt_signed_in_the_hsm_verifies_with_its_public_key(hsm_key: Pkcs11Key, approved: dict[str, Any]) -> None:
    assert hsm_key.alg == ED25519 and hsm_key.kid == "receipts-1" and hsm_key.can_sign
    receipt = receipt_for(approved, ACTION, hsm_key, now=ISSUED)
    assert receipt["signature"]["alg"] == "Ed25519" and receipt["signature"]["kid"] == "receipts-1"
    public = hsm_key.public()
    assert isinstance(public, Ed25519Key) and public.private_key is None and not public.can_sign
    ring = Keyring({"receipts-1": public})
    verified = verify_receipt(receipt, ACTION, keyring=ring, policy_versions={"0.1.0"}, nonce_store=None, now=ISSUED)
    assert verified.receipt.receipt_id == receipt["receipt_id"] and verified.receipt.approver_ids
    # another key's public half does not verify it, and a changed receipt does not verify
    other = Keyring({"receipts-1": generate_ed25519("receipts-1").public() or public})
    with pytest.raises(ReceiptVerificationError) as caught:
        verify_receipt(receipt, ACTION, keyring=other, policy_versions={"0.1.0"}, nonce_store=None, now=ISSUED)
    assert caught.value.code == "bad_signature"
    changed = {**receipt, "approver_ids": ["mallory"]}
    with pytest.raises(ReceiptVerificationError) as caught:
        verify_receipt(changed, ACTION, keyring=ring, policy_versions={"0.1.0"}, nonce_store=None, now=ISSUED)
    assert caught.value.code == "bad_signature"


def test_attestations_and_checkpoints_sign_in_the_hsm(hsm_key: Pkcs11Key) -> None:
    public = hsm_key.public()
    assert public is not None
    fields = {
        "control": "user_confirmation",
        "status": "PASSED",
        "actor_id": "user_001",
        "evidence_reference": "ev:1",
        "completed_at": "2026-11-29T10:01:00Z",
        "decision_id": "dec_1",
        "action_hash": "sha256:" + "cd" * 32,
    }
    item = sign_attestation(fields, "approval-app", hsm_key)
    assert document_verifies(item, public) and not document_verifies({**item, "status": "FAILED"}, public)
    checkpoint = Checkpoint.sign("ledger-1", 7, "sha256:" + "ab" * 32, hsm_key)
    Checkpoint.from_dict(checkpoint.to_dict()).verify(Keyring({hsm_key.kid: public}))


def test_a_keyring_file_names_the_hsm_key_without_holding_it(hsm_key: Pkcs11Key, tmp_path: Path) -> None:
    ring = Keyring({hsm_key.kid: hsm_key}, hsm_key.kid)
    private = ring.to_file_dict(include_private=True)
    (entry,) = private["keys"]
    assert entry["pkcs11"] == hsm_key.uri and "private_key" not in entry and "public_key" in entry
    path = tmp_path / "ring.json"
    path.write_text(json.dumps(private))
    loaded = load_keyring(path).signer()
    assert isinstance(loaded, Pkcs11Key)
    message = b"through a keyring file"
    assert hsm_key.verify(message, loaded.sign(message))
    public = ring.public().to_file_dict(include_private=False)
    assert public["keys"] == [{k: v for k, v in entry.items() if k != "pkcs11"}]
    # a keyring entry whose public_key is not the token key's is refused, not trusted
    other = Keyring({hsm_key.kid: generate_ed25519(hsm_key.kid)}).to_file_dict(include_private=False)
    path.write_text(json.dumps({"keys": [{**entry, "public_key": other["keys"][0]["public_key"]}]}))
    with pytest.raises(KeyringError) as caught:
        load_keyring(path)
    assert caught.value.code == "malformed_key" and "not the public key of its pkcs11 key" in str(caught.value)


def test_uris_pins_and_refusals(softhsm_token: Any, hsm_key: Pkcs11Key, tmp_path: Path) -> None:
    parsed = Pkcs11Uri.parse("pkcs11:token=a%20b;object=k;id=%01%02?pin-source=env:MY_PIN&x-kid=kid-9")
    assert (parsed.token, parsed.object, parsed.id, parsed.kid) == ("a b", "k", b"\x01\x02", "kid-9")
    for bad, code in (
        ("pkcs11:token=t;object=k?pin-value=1234", "pin_in_uri"),
        ("pkcs11:object=k", "malformed_key"),
        ("pkcs11:token=t", "malformed_key"),
        ("pkcs11:token=t;object=k;colour=red", "malformed_key"),
        ("pkcs11:token=t;token=u;object=k", "malformed_key"),
        ("pkcs11:token=t;object=k;type=public", "malformed_key"),
        ("pkcs11:token=t;object=%ff", "malformed_key"),
    ):
        with pytest.raises(KeyringError) as caught:
            Pkcs11Uri.parse(bad)
        assert caught.value.code == code, bad
    pin_file = tmp_path / "pin"
    pin_file.write_text(softhsm_token.pin + "\n")
    by_file = open_pkcs11_key(f"{softhsm_token.uri('receipts-1')}?pin-source=file:{pin_file}&x-kid=rk")
    assert by_file.kid == "rk" and hsm_key.verify(b"m", by_file.sign(b"m"))
    pin_file.write_text("00000000")
    with pytest.raises(KeyringError) as caught:
        open_pkcs11_key(f"{softhsm_token.uri('receipts-1')}?pin-source=file:{pin_file}")
    assert caught.value.code == "bad_pin"
    with pytest.raises(KeyringError) as caught:
        load_signing_key(softhsm_token.uri("no-such-key"))
    assert caught.value.code == "no_such_key"
    with pytest.raises(KeyringError) as caught:
        load_signing_key("pkcs11:token=no-such-token;object=k")
    assert caught.value.code == "no_such_key"


def test_the_cli_signs_a_receipt_with_signing_key_pkcs11(
    softhsm_token: Any, hsm_key: Pkcs11Key, approved: dict[str, Any], tmp_path: Path
) -> None:
    action, decision = tmp_path / "action.json", tmp_path / "decision.json"
    action.write_text(json.dumps(ACTION))
    decision.write_text(json.dumps(approved))
    uri = softhsm_token.uri("receipts-1")
    proc = run_cli("receipt", "issue", "--action", str(action), "--decision", str(decision), "--signing-key", uri,
                   "--accept-unsigned-decision")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert softhsm_token.pin not in proc.stdout + proc.stderr
    receipt = tmp_path / "receipt.json"
    receipt.write_text(proc.stdout)
    public = tmp_path / "public.json"
    public.write_text(json.dumps(Keyring({hsm_key.kid: hsm_key}).public().to_file_dict(include_private=False)))
    proc = run_cli(
        "receipt", "verify", "--action", str(action), "--receipt", str(receipt),
        "--policy-version", "0.1.0", "--keyring", str(public),
    )  # fmt: skip
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"] is True, proc.stderr
    proc = run_cli("receipt", "issue", "--action", str(action), "--decision", str(decision),
                   "--accept-unsigned-decision", "--signing-key", uri + "?pin-value=1234")  # fmt: skip
    assert proc.returncode == 2 and json.loads(proc.stderr)["code"] == "pin_in_uri"


def test_keygen_makes_the_key_on_the_token_and_a_keyring_that_names_it(
    softhsm_token: Any, approved: dict[str, Any], tmp_path: Path
) -> None:
    ring, public = tmp_path / "ring.json", tmp_path / "public.json"
    uri = softhsm_token.uri("keygen-1")
    proc = run_cli("receipt", "keygen", "--kid", "hsm-2026", "--keyring", str(ring), "--public", str(public),
                   "--pkcs11", uri)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(ring.read_text())["keys"]
    assert entry["pkcs11"] == uri and "private_key" not in entry and entry["kid"] == "hsm-2026"
    signer = load_keyring(ring).signer()
    assert isinstance(signer, Pkcs11Key) and signer.kid == "hsm-2026"
    receipt = receipt_for(approved, ACTION, signer, now=ISSUED)
    verify_receipt(
        receipt, ACTION, keyring=load_keyring(public), policy_versions={"0.1.0"}, nonce_store=None, now=ISSUED
    )
    proc = run_cli("receipt", "keygen", "--kid", "hsm-2027", "--keyring", str(tmp_path / "again.json"),
                   "--pkcs11", uri)  # fmt: skip
    assert proc.returncode == 2 and json.loads(proc.stderr)["code"] == "duplicate_kid"


def test_the_service_signs_its_attestations_in_the_hsm(softhsm_token: Any, tmp_path: Path) -> None:
    """``serve --issuer-keyring`` with a pkcs11 entry: ServiceIssuers signs inside the token, and the
    attestation verifies against the registry's public key for the issuer."""
    import yaml
    from servicekit import SERVICE_ISSUER, write_registry

    from kcp_opa.authorize.attestations import verify_attestation
    from kcp_opa.declare.trust import load_trust
    from kcp_opa.service.callers import Principal, PrincipalKind
    from kcp_opa.service.issuing import ServiceIssuers

    registry_path, keys_path = write_registry(tmp_path)
    kid = f"{SERVICE_ISSUER}-ed25519"
    held = create_pkcs11_ed25519(softhsm_token.uri("service-issuer"), kid=kid)
    ring = load_keyring(keys_path)
    keys = {**ring.keys, kid: held}
    keys_path.write_text(json.dumps(Keyring(keys, kid).to_file_dict(include_private=True)))
    public = Keyring({kid: held}).public().to_file_dict(include_private=False)["keys"][0]["public_key"]
    registry = yaml.safe_load(registry_path.read_text())
    for issuer in registry["issuers"]:
        if issuer["id"] == SERVICE_ISSUER:
            issuer["keys"] = [{"kid": kid, "alg": "Ed25519", "public_key": public}]
    registry_path.write_text(yaml.safe_dump(registry, sort_keys=False))
    trust = load_trust(registry_path)
    issuers = ServiceIssuers.load(trust, (SERVICE_ISSUER,), load_keyring(keys_path))
    assert isinstance(issuers.keys[0][1], Pkcs11Key)

    class Bound:
        decision_id, action_hash = "dec_hsm_2", "sha256:" + "cd" * 32

    anna = Principal("treasury_approver_anna", PrincipalKind.HUMAN, frozenset({"approver"}))
    item = issuers.sign(trust, "independent_human_approval", "PASSED", anna, "ev:approval", Bound())
    verified = verify_attestation(item, trust, None)
    assert verified.issuer == SERVICE_ISSUER and verified.actor_id == "treasury_approver_anna"
