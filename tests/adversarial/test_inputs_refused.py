"""Attack class: hostile inputs. Duplicate keys, secret-bearing keys in disguise, huge integers,
lone surrogates, non-finite numbers and giant invalid manifests are refused with a one-line
error and exit 1 through the real CLI, never exit 3 (internal error) and never accepted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import VOUCH

from kcp_opa import ActionRejectedError
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core import strictjson
from kcp_opa.core.errors import KeyringError, SourceError
from kcp_opa.core.signing import load_keyring
from kcp_opa.decide.action import parse_action
from kcp_opa.declare.manifest import validate_manifest
from kcp_opa.declare.yamlsource import parse_yaml

REPO = Path(__file__).resolve().parents[2]
KYA_TEXT = (REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcp_opa", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inputs") / "finance.tar.gz"
    base = REPO / "fixtures" / "deployments" / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", out)
    return out


_HOSTILE = {
    # a tenant written twice: "last one wins" for us, "first one wins" for another reader
    "duplicate_key": KYA_TEXT.replace(
        '"tenant_id": "tenant_demo",', '"tenant_id": "tenant_demo", "tenant_id": "x",', 1
    ),
    "huge_integer": KYA_TEXT.replace('"value_minor": 800000', '"value_minor": ' + "9" * 5000, 1),
    "lone_surrogate": KYA_TEXT.replace('"supplier_4821"', '"supplier_\\ud800"', 1),
    "nan": KYA_TEXT.replace('"value_minor": 800000', '"value_minor": NaN', 1),
    "infinity": KYA_TEXT.replace('"value_minor": 800000', '"value_minor": -Infinity', 1),
    "secret_key": KYA_TEXT.replace('"attributes": {', '"attributes": {"db_password": "hunter2", ', 1),
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_cli_decide_refuses_with_exit_1_never_3(bundle: Path, tmp_path: Path, name: str) -> None:
    text = _HOSTILE[name]
    assert text != KYA_TEXT
    path = tmp_path / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    proc = _cli("decide", *VOUCH, "-b", str(bundle), "-i", str(path), "--now", "2026-07-17T08:00:00Z")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-500:])
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    "key",
    [
        "db_password",
        "api_key",
        "client_secret",
        "authorization",
        "passwd",
        "pass\u200bword",
        "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44",
        "PassWord",
        "apiKey",
        "X-Api-Key",
        "access.token",
        "refresh_token",
        "private_key",
        "Cookie",
        "session",
        "credentials",
        "pwd",
        "bearer_token",
    ],
)
def test_secret_bearing_keys_in_any_disguise_are_refused(key: str) -> None:
    action = json.loads(KYA_TEXT)
    action["attributes"][key] = "value"
    with pytest.raises(ActionRejectedError, match="secret-bearing"):
        parse_action(json.dumps(action))


@pytest.mark.parametrize("key", ["authorization_context", "session_id", "idempotency_key", "max_tokens", "token_count"])
def test_ordinary_keys_pass_the_detector(key: str) -> None:
    action = json.loads(KYA_TEXT)
    action["attributes"][key] = "value"
    assert parse_action(json.dumps(action))["attributes"][key] == "value"


def test_duplicate_keys_are_refused_in_keyrings_and_receipts(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    ring.write_text('{"signing_kid": "a", "signing_kid": "b", "keys": []}')
    with pytest.raises(KeyringError):
        load_keyring(ring)
    receipt = tmp_path / "receipt.json"
    receipt.write_text('{"receipt_id": "r1", "receipt_id": "r2"}')
    proc = _cli("receipt", "hash", "--action", str(receipt))
    # receipt commands answer like the KYA reference script: a JSON error and exit 2
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr)
    assert "duplicate key" in proc.stderr
    with pytest.raises(strictjson.StrictJSONError, match="duplicate key"):
        strictjson.loads('{"a": {"b": 1, "b": 2}}')


@pytest.mark.parametrize("scalar", ["1e999", "-1e999", "9" * 5000])
def test_yaml_non_finite_and_oversize_numbers_are_refused(tmp_path: Path, scalar: str) -> None:
    manifest = tmp_path / "knowledge.yaml"
    unit = f"{{id: u, path: a.md, intent: x, scope: global, audience: [human], version: {scalar}}}"
    manifest.write_text(f"project: p\nkcp_version: '0.7'\nunits:\n  - {unit}\n")
    proc = _cli("validate", str(manifest))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-300:])
    with pytest.raises(SourceError, match=r"non-finite|digit limit"):  # the reader itself (1e999 was inf)
        parse_yaml(f"free_form: {scalar}\n".encode())


def test_a_giant_invalid_manifest_reports_a_bounded_list(tmp_path: Path) -> None:
    lines = ["project: big", "kcp_version: '0.7'", "units:"]
    lines += [
        f"  - {{id: 'bad id {i}', path: a.md, intent: 1, scope: nowhere, audience: [robot]}}" for i in range(5000)
    ]
    manifest = tmp_path / "big.yaml"
    manifest.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    report = validate_manifest(manifest)
    elapsed = time.monotonic() - started
    assert not report.valid
    assert len(report.diagnostics) == 201  # the first 200, then one line with the count of the rest
    assert report.diagnostics[-1].code == "findings_truncated" and "more findings" in report.diagnostics[-1].message
    assert elapsed < 60
