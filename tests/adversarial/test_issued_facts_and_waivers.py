"""Attack class: facts and waivers signed on the command line vouching for more than they say.

`kcp-opa facts sign` binds a fact to one action's hash (or one subject) with an expiry, from a
key file only its owner can read; `kcp-opa decide --trust --attestations --exceptions` judges
them as `serve` does. So a fact signed for one action does not vouch for another action, a fact
stops counting at its expiry, a waiver signed by a key the registry does not hold is refused by
`decide --exceptions` (nothing decided), the registry's agent scope wins over the action's, a
world-readable key file signs nothing, and neither command writes what the gate would refuse.
Real command processes throughout.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli
from issuingkit import AGENT, NOW, draft, keyring_file, setup

from kcp_opa.core.signing import generate_ed25519


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return setup(tmp_path_factory.mktemp("issuing"))


def _sign(kit: dict[str, Path], out: Path, *bind: str, now: str = "2026-11-29T09:00:00Z", span: str = "2h") -> Any:
    return run_cli(
        "facts", "sign", "--issuer", "kyc-idp", "--keyring", str(kit["attestor_keys"]),
        "--fact", "evidence_status", "--value", "present", *bind, "--now", now, "--expires-in", span,
        "--trust", str(kit["registry"]), "--output", str(out),
    )  # fmt: skip


def _decide(kit: dict[str, Path], action: Path, *extra: str, now: str = NOW) -> Any:
    return run_cli(
        "decide", "-b", str(kit["bundle"]), "-i", str(action), "--trust", str(kit["registry"]),
        "--principal", AGENT, "--region", "EU", *extra, "--now", now, "--format", "json",
    )  # fmt: skip


def _missing(decision: dict[str, Any]) -> bool:
    return any(r["code"] == "context_missing" and "evidence_status" in r["message"] for r in decision["reasons"])


def test_a_fact_signed_for_one_action_does_not_vouch_for_another(tmp_path: Path, kit: dict[str, Path]) -> None:
    attestations = tmp_path / "attestations.json"
    assert _sign(kit, attestations, "--action", str(kit["action"])).returncode == 0
    other = json.loads(kit["action"].read_text())
    other["action_id"], other["idempotency_key"] = "act_sd_0002", "idem_sd_0002_read"  # same subject, same agent
    other_path = tmp_path / "other.json"
    other_path.write_text(json.dumps(other))

    signed_for = _decide(kit, kit["action"], "--attestations", str(attestations))
    assert signed_for.returncode == 0, signed_for.stderr
    assert not _missing(json.loads(signed_for.stdout))
    another = _decide(kit, other_path, "--attestations", str(attestations))
    assert another.returncode == 0, another.stderr
    decided = json.loads(another.stdout)
    assert _missing(decided) and decided["decision"] == "DENY"


def test_an_expired_fact_is_refused(tmp_path: Path, kit: dict[str, Path]) -> None:
    attestations = tmp_path / "attestations.json"
    signed = _sign(kit, attestations, "--action", str(kit["action"]), now="2026-11-29T09:00:00Z", span="1h")
    assert signed.returncode == 0, signed.stderr
    assert json.loads(signed.stdout)["expires_at"] == "2026-11-29T10:00:00Z"
    last = _decide(kit, kit["action"], "--attestations", str(attestations), now="2026-11-29T09:59:59Z")
    assert not _missing(json.loads(last.stdout))
    expired = _decide(kit, kit["action"], "--attestations", str(attestations), now="2026-11-29T10:00:00Z")
    assert _missing(json.loads(expired.stdout)) and json.loads(expired.stdout)["decision"] == "DENY"
    # An expiry before the issue time is refused before anything is signed or written.
    backwards = run_cli(
        "facts", "sign", "--issuer", "kyc-idp", "--keyring", str(kit["attestor_keys"]), "--fact", "evidence_status",
        "--value", "present", "--subject", "user_1", "--now", "2026-11-29T09:00:00Z",
        "--expires-at", "2026-11-29T08:00:00Z", "--output", str(tmp_path / "never.json"),
    )  # fmt: skip
    assert backwards.returncode == 2 and "is not after the issue time" in backwards.stderr
    assert not (tmp_path / "never.json").exists()


def test_a_waiver_signed_by_a_key_not_in_the_registry_is_refused_by_decide(
    tmp_path: Path, kit: dict[str, Path]
) -> None:
    forger = keyring_file(
        tmp_path / "forger.json", generate_ed25519("change-board-1")
    )  # the registered kid, not its key
    signed = run_cli(
        "exceptions", "sign", str(draft(tmp_path / "draft.yaml")), "--issuer", "change-board",
        "--keyring", str(forger), "--output", str(tmp_path / "forged.yaml"),
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr  # without --trust nothing checks the key: the gate must
    refused = _decide(kit, kit["action"], "--exceptions", str(tmp_path / "forged.yaml"))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "exception EXC-2231: the signature does not verify with change-board's key" in refused.stderr
    assert refused.stdout == ""  # nothing decided on a forged waiver
    genuine = run_cli(
        "exceptions", "sign", str(draft(tmp_path / "draft.yaml")), "--issuer", "change-board",
        "--keyring", str(kit["board_keys"]), "--output", str(tmp_path / "genuine.yaml"),
    )  # fmt: skip
    assert genuine.returncode == 0, genuine.stderr
    waived = _decide(kit, kit["action"], "--exceptions", str(tmp_path / "genuine.yaml"))
    assert "exception_applied" in json.loads(waived.stdout)["reason_codes"]


def test_decide_with_trust_takes_the_agent_scope_from_the_registry_not_the_action(
    tmp_path: Path, kit: dict[str, Path]
) -> None:
    widened = json.loads(kit["action"].read_text())
    widened["authorization_context"]["agent_scope"] = [*widened["authorization_context"]["agent_scope"], "admin.all"]
    path = tmp_path / "widened.json"
    path.write_text(json.dumps(widened))
    decided = json.loads(_decide(kit, path).stdout)
    conflict = [r["message"] for r in decided["reasons"] if r["code"] == "context_conflict"]
    assert conflict and "admin.all" in conflict[0] and "registry:issuing-test" in conflict[0]
    assert decided["decision"] == "DENY"


def test_a_key_file_others_can_read_signs_nothing(tmp_path: Path, kit: dict[str, Path]) -> None:
    shared = keyring_file(tmp_path / "shared.json", generate_ed25519("kyc-idp-1"), mode=0o644)
    out = tmp_path / "attestations.json"
    for command in (
        ["facts", "sign", "--issuer", "kyc-idp", "--fact", "evidence_status", "--value", "present",
         "--subject", "user_1", "--expires-in", "1h", "--output", str(out)],
        ["exceptions", "sign", str(draft(tmp_path / "draft.yaml")), "--issuer", "change-board",
         "--output", str(out)],
    ):  # fmt: skip
        for flag in ("--keyring", "--signing-key"):
            proc = run_cli(*command, flag, str(shared))
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert f"may be read by others (mode 0644): run `chmod 600 {shared}`" in proc.stderr
            assert proc.stderr.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize(
    ("issuer", "keys", "why"),
    [
        ("bank-registry", "attestor_keys", "issuer bank-registry is not in the trust registry issuing-test"),
        ("change-board", "attestor_keys", "does not list evidence_status in issuer change-board's facts"),
        ("kyc-idp", "board_keys", "key change-board-1 is not a key of issuer kyc-idp"),
    ],
)
def test_facts_sign_writes_nothing_the_gate_would_refuse(
    tmp_path: Path, kit: dict[str, Path], issuer: str, keys: str, why: str
) -> None:
    out = tmp_path / "attestations.json"
    out.write_text("[]")
    proc = run_cli(
        "facts", "sign", "--issuer", issuer, "--keyring", str(kit[keys]), "--fact", "evidence_status",
        "--value", "present", "--subject", "user_1", "--expires-in", "1h", "--trust", str(kit["registry"]),
        "--output", str(out),
    )  # fmt: skip
    assert proc.returncode == 2 and why in proc.stderr, proc.stderr
    assert json.loads(out.read_text()) == []


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"grantor": "clerk@example.com"}, "grantor clerk@example.com has no role the registry allows"),
        ({"waives": ["tenant_boundary"]}, "tenant_boundary is a terminal denial and can never be waived"),
        ({"expires_at": "2027-06-01T00:00:00Z"}, "longer than the matrix's maximum"),
    ],
)
def test_exceptions_sign_writes_nothing_the_gate_would_refuse(
    tmp_path: Path, kit: dict[str, Path], fields: dict[str, Any], why: str
) -> None:
    out = tmp_path / "exceptions.yaml"
    out.write_text("held: before\n")
    proc = run_cli(
        "exceptions", "sign", str(draft(tmp_path / "draft.yaml", **copy.deepcopy(fields))), "--issuer", "change-board",
        "--keyring", str(kit["board_keys"]), "--trust", str(kit["registry"]), "--output", str(out),
    )  # fmt: skip
    assert proc.returncode == 1 and why in proc.stderr, proc.stderr
    assert out.read_text() == "held: before\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    assert os.access(out, os.R_OK)


def test_decide_refuses_a_registry_the_bundle_was_not_compiled_with(tmp_path: Path, kit: dict[str, Path]) -> None:
    """A registry edited after compile (a wider agent scope, an extra issuer) is refused, as `serve` refuses it."""
    registry = yaml.safe_load(kit["registry"].read_text())
    registry["principals"][2]["agent_scope"].append("admin.all")
    edited = tmp_path / "registry.yaml"
    edited.write_text(yaml.safe_dump(registry, sort_keys=False))
    assert edited.read_text() != kit["registry"].read_text()
    proc = run_cli(
        "decide", "-b", str(kit["bundle"]), "-i", str(kit["action"]), "--trust", str(edited), "--principal", AGENT,
        "--now", NOW,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert f"compile with --trust {edited}" in proc.stderr and proc.stderr.count("\n") == 1
