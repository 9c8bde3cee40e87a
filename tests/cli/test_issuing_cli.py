"""`kcp-opa facts sign`, `kcp-opa exceptions sign` and `decide --trust/--exceptions` as an issuer,
a DPO or an operator meets them: what they write, their --help, and a one-line error naming
what to fix for each mistake. Real command processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, run_cli
from issuingkit import AGENT, NOW, draft, setup

from kcp_opa.context.metering import metered_spends
from kcp_opa.core.signing import Keyring, create_pkcs11_ed25519
from kcp_opa.declare.trust import load_trust

REFERENCE_TRUST = REPO / "fixtures" / "trust" / "registry.yaml"


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return setup(tmp_path_factory.mktemp("issuing-cli"))


def _fact(kit: dict[str, Path], *args: str) -> Any:
    return run_cli("facts", "sign", "--issuer", "kyc-idp", "--keyring", str(kit["attestor_keys"]), *args)


def test_facts_sign_writes_the_attestation_the_gate_reads(tmp_path: Path, kit: dict[str, Path]) -> None:
    out = tmp_path / "attestations.json"
    common = ("--fact", "evidence_status", "--value", "present", "--now", "2026-11-29T09:00:00Z")
    first = _fact(kit, *common, "--action", str(kit["action"]), "--expires-in", "90m", "--output", str(out))
    assert first.returncode == 0, first.stderr
    item = json.loads(first.stdout)
    hashed = json.loads(run_cli("receipt", "hash", "--action", str(kit["action"])).stdout)["action_hash"]
    assert item["action_hash"] == hashed and "subject_id" not in item
    assert (item["issuer"], item["signature"]["kid"], item["signature"]["alg"]) == ("kyc-idp", "kyc-idp-1", "Ed25519")
    assert (item["issued_at"], item["expires_at"]) == ("2026-11-29T09:00:00Z", "2026-11-29T10:30:00Z")
    second = _fact(kit, *common, "--subject", "user_1", "--expires-at", "2026-11-29T12:00:00Z", "--output", str(out))
    assert second.returncode == 0, second.stderr
    held = json.loads(out.read_text())
    assert held[0] == item and held[1]["subject_id"] == "user_1"  # added to the list, the first kept
    tenant = _fact(kit, *common, "--subject", "user_1", "--tenant", "tenant_demo", "--expires-in", "1h")
    assert tenant.returncode == 0 and json.loads(tenant.stdout)["tenant_id"] == "tenant_demo", tenant.stderr
    decided = run_cli(
        "decide", "-b", str(kit["bundle"]), "-i", str(kit["action"]), "--trust", str(kit["registry"]),
        "--principal", AGENT, "--region", "EU", "--attestations", str(out), "--now", NOW, "--format", "json",
    )  # fmt: skip
    facts = json.loads(decided.stdout)
    assert decided.returncode == 0 and facts["reason_codes"] == ["field_access_violation"], decided.stdout


def test_facts_sign_checks_a_tenant_bound_subject_fact_as_the_gate_would(kit: dict[str, Path]) -> None:
    # The pre-check's stand-in action named the subject but not the tenant: every tenant-bound
    # fact was refused (not_bound_to_this_action), the example in `facts sign --help` included.
    args = ("--fact", "evidence_status", "--value", "present", "--now", "2026-11-29T09:00:00Z", "--expires-in", "1h")
    trusted = _fact(kit, *args, "--subject", "user_1", "--tenant", "tenant_demo", "--trust", str(kit["registry"]))
    assert trusted.returncode == 0, trusted.stderr
    assert json.loads(trusted.stdout)["tenant_id"] == "tenant_demo"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--value", "yes", "--subject", "u"], "--value 'yes': evidence_status is one of forbidden, missing, present"),
        (["--value", "present"], "bind the fact to one action (--action or --action-hash) or one subject (--subject)"),
        (["--value", "present", "--subject", "u", "--action-hash", "sha256:ab"], "bind the fact to one action"),
        (["--value", "present", "--action-hash", "sha256:ab"], "--action-hash 'sha256:ab': an action hash is sha256:"),
        (["--value", "present", "--subject", "bad id!"], "--subject 'bad id!'"),
        (["--value", "present", "--subject", "u", "--expires-in", "1h", "--expires-at", NOW], "give the expiry: "),
        (["--value", "present", "--subject", "u", "--expires-in", "soon"], "--expires-in 'soon': a span such as 1h"),
        (["--value", "present", "--subject", "u", "--expires-at", "friday"], "--expires-at 'friday': an RFC 3339"),
        (["--value", "present", "--subject", "u", "--expires-in", "1h", "--kid", "nope"], "--kid nope is not in"),
        (["--value", "present", "--action-hash", "sha256:" + "a" * 64, "--tenant", "t"], "--tenant binds a subject's"),
        (["--value", "present", "--subject", "u", "--tenant", "bad tenant!"], "--tenant 'bad tenant!'"),
    ],
)
def test_facts_sign_mistakes_are_one_line_naming_what_to_fix(
    tmp_path: Path, kit: dict[str, Path], args: list[str], why: str
) -> None:
    args = [*args, "--expires-in", "1h"] if not any(a.startswith("--expires") for a in args) else args
    proc = _fact(kit, "--fact", "evidence_status", *args, "--output", str(tmp_path / "out.json"))
    assert proc.returncode == 2 and why in proc.stderr, proc.stderr
    assert proc.stderr.startswith("kcp-opa: error: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_facts_sign_needs_exactly_one_key_and_a_list_to_add_to(tmp_path: Path, kit: dict[str, Path]) -> None:
    base = ["facts", "sign", "--issuer", "kyc-idp", "--fact", "evidence_status", "--value", "present",
            "--subject", "u", "--expires-in", "1h"]  # fmt: skip
    none = run_cli(*base)
    assert none.returncode == 2 and "give the issuer's key: --signing-key URI|KEYRING or --keyring FILE" in none.stderr
    both = run_cli(*base, "--keyring", str(kit["attestor_keys"]), "--signing-key", str(kit["attestor_keys"]))
    assert both.returncode == 2 and "one of them" in both.stderr
    not_a_list = tmp_path / "att.json"
    not_a_list.write_text('{"fact": "x"}')
    proc = run_cli(*base, "--keyring", str(kit["attestor_keys"]), "--output", str(not_a_list))
    assert proc.returncode == 2 and "holds JSON that is not a list of attestations" in proc.stderr
    assert not_a_list.read_text() == '{"fact": "x"}'
    helped = run_cli("facts", "sign", "--help")
    assert helped.returncode == 0 and "0600" in helped.stdout and "pkcs11:" in helped.stdout


def test_facts_sign_with_an_hsm_key(tmp_path: Path, kit: dict[str, Path], softhsm_token: Any) -> None:
    """The issuer's key held in an HSM: named by a pkcs11: URI, the PIN from the environment."""
    uri = softhsm_token.uri("kyc-idp-hsm")
    key = create_pkcs11_ed25519(uri)
    public = Keyring({key.kid: key}).to_file_dict(include_private=False)["keys"][0]["public_key"]
    registry = yaml.safe_load(kit["registry"].read_text())
    registry["issuers"][0]["keys"].append({"kid": key.kid, "alg": "Ed25519", "public_key": public})
    trust = tmp_path / "registry.yaml"
    trust.write_text(yaml.safe_dump(registry))
    proc = run_cli(
        "facts", "sign", "--issuer", "kyc-idp", "--signing-key", uri, "--fact", "evidence_status", "--value", "present",
        "--subject", "user_1", "--expires-in", "1h", "--trust", str(trust),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["signature"]["kid"] == key.kid
    assert load_trust(trust).issuer("kyc-idp") is not None


def test_exceptions_sign_writes_a_file_exceptions_check_accepts(tmp_path: Path, kit: dict[str, Path]) -> None:
    unsigned = draft(tmp_path / "draft.yaml")
    entry = yaml.safe_load(unsigned.read_text())
    del entry["exceptions"][0]["issued_at"]  # then the issue time is --now
    unsigned.write_text(yaml.safe_dump(entry))
    out = tmp_path / "exceptions.yaml"
    proc = run_cli(
        "exceptions", "sign", str(unsigned), "--issuer", "change-board", "--keyring", str(kit["board_keys"]),
        "--trust", str(kit["registry"]), "--now", "2026-11-29T09:30:00Z", "--output", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{out}: 1 exceptions signed by change-board (change-board-1)"
    signed = yaml.safe_load(out.read_text())["exceptions"][0]
    assert signed["issued_at"] == "2026-11-29T09:30:00Z" and signed["issuer"] == "change-board"
    checked = run_cli(
        "exceptions", "check", str(out), "--trust", str(kit["registry"]), "--now", NOW, "--format", "text"
    )
    assert checked.returncode == 0 and "1 exceptions: 0 expired or expiring" in checked.stdout, checked.stdout


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ({"kind": "kcp-opa/trust-registry"}, "the draft is a kind: kcp-opa/exceptions document"),
        ({"kind": "kcp-opa/exceptions", "exceptions": []}, "a list of at least one exception"),
        ({"kind": "kcp-opa/exceptions", "exceptions": [{"id": "E", "waiver": 1}]}, "unknown field 'waiver'"),
        ({"kind": "kcp-opa/exceptions", "exceptions": [{"id": "E"}]}, "exceptions[0] (E): missing scope, waives"),
    ],
)
def test_exceptions_sign_draft_mistakes_are_one_line(
    tmp_path: Path, kit: dict[str, Path], document: dict[str, Any], why: str
) -> None:
    path = tmp_path / "draft.yaml"
    path.write_text(yaml.safe_dump(document))
    proc = run_cli(
        "exceptions", "sign", str(path), "--issuer", "change-board", "--keyring", str(kit["board_keys"]),
        "--output", str(tmp_path / "out.yaml"),
    )  # fmt: skip
    assert proc.returncode == 2 and why in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--trust", "REG"], "--trust needs --principal"),
        (["--attestations", "ACT"], "--attestations needs --trust"),
        (["--exceptions", "ACT"], "--exceptions needs --trust"),
        (["--principal", AGENT], "--principal needs --trust"),
        (["--trust", "REG", "--context", "ACT"], "--context declares the facts itself"),
        (["--context", "ACT", "--exceptions", "ACT"], "--context declares the facts itself: give it or --exceptions"),
        (["--context", "ACT", "--principal", AGENT], "--context declares the facts itself: give it or --principal"),
        (["--trust", "REG", "--principal", AGENT, "--region", '"EU"'], "deployment_region"),
    ],
)
def test_decide_context_options_are_checked(kit: dict[str, Path], args: list[str], why: str) -> None:
    given = [str(kit["registry"]) if a == "REG" else str(kit["action"]) if a == "ACT" else a for a in args]
    proc = run_cli("decide", "-b", str(kit["bundle"]), "-i", str(kit["action"]), *given, "--now", NOW)
    assert proc.returncode == 2 and why in proc.stderr, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr


def test_decide_with_the_region_alone_knows_the_gate_facts(kit: dict[str, Path]) -> None:
    proc = run_cli(
        "decide", "-b", str(kit["bundle"]), "-i", str(kit["action"]), "--region", "EU", "--now", NOW, "--with-input"
    )
    facts = json.loads(proc.stdout)["input"]["context"]["facts"]
    assert facts["deployment_region"]["value"] == "EU" and "agent_scope" not in facts


def test_controls_take_the_same_sources_and_refuse_them_beside_context(
    tmp_path: Path, kit: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KCP_OPA_DESK_SECRET", "desk-seal-secret-for-tests-0123456789")
    desk = ["--bundle", str(kit["bundle"]), "--trust", str(kit["registry"]), "--action", str(kit["action"])]
    desk += ["--record", str(tmp_path / "record.json"), "--now", NOW]
    both = run_cli("controls", "challenge", *desk, "--principal", AGENT, "--context", str(kit["action"]))
    assert both.returncode == 2 and "--context declares the facts itself" in both.stderr, both.stderr
    opened = run_cli("controls", "challenge", *desk, "--principal", AGENT, "--region", "EU")
    assert opened.returncode == 0, opened.stderr
    record = (tmp_path / "record.json").read_text()
    assert f'"facts_principal": "{AGENT}"' in record and '"source": "config:gate-config"' in record


def _metering(tmp_path: Path, *args: str, issuer: str = "metering-service") -> Any:
    keys = tmp_path / "issuer-keys.json"
    if not keys.exists():
        keys.write_bytes((REPO / "fixtures" / "trust" / "TEST-ONLY-issuer-keys.json").read_bytes())
        keys.chmod(0o600)
    return run_cli(
        "facts", "spend", "--issuer", issuer, "--keyring", str(keys), "--kid", f"{issuer}-ed25519-test",
        "--budget", "tenant_daily_usd", "--subject", "tenant_demo", "--amount-minor", "120000", "--currency", "USD",
        "--now", "2026-11-29T09:01:00Z", "--expires-in", "2h", "--trust", str(REFERENCE_TRUST), *args,
    )  # fmt: skip


def test_facts_spend_signs_what_the_context_stage_counts(tmp_path: Path) -> None:
    out = tmp_path / "attestations.json"
    proc = _metering(
        tmp_path, "--period-start", "2026-11-29T08:00:00Z", "--period-end", "2026-11-29T09:00:00Z", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    items = json.loads(out.read_text())
    spends, refused = metered_spends(items, {"tenant_id": "tenant_demo"}, load_trust(REFERENCE_TRUST), None)
    assert refused == [] and [(s["budget"], s["amount_minor"], s["currency"]) for s in spends] == [
        ("tenant_daily_usd", 120000, "USD")
    ]
    assert spends[0]["source"] == "attestation:metering-service/metering-service-ed25519-test"
    assert (items[0]["issued_at"], items[0]["expires_at"]) == ("2026-11-29T09:01:00Z", "2026-11-29T11:01:00Z")


@pytest.mark.parametrize(
    ("issuer", "period", "why"),
    [
        (
            "bank-idp",
            ("2026-11-29T08:00:00Z", "2026-11-29T09:00:00Z"),
            "does not list metered_spend in issuer bank-idp",
        ),
        ("metering-service", ("2026-11-29T09:00:00Z", "2026-11-29T08:00:00Z"), "is before --period-start"),
        ("metering-service", ("yesterday", "2026-11-29T08:00:00Z"), "--period-start 'yesterday': an RFC 3339 time"),
    ],
)
def test_facts_spend_mistakes_are_one_line(tmp_path: Path, issuer: str, period: tuple[str, str], why: str) -> None:
    out = tmp_path / "attestations.json"
    proc = _metering(tmp_path, "--period-start", period[0], "--period-end", period[1], "-o", str(out), issuer=issuer)
    assert proc.returncode == 2 and why in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()
