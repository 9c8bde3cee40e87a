"""One ServiceConfig, from ``kcp-opa serve``'s options or a JSON file: read strictly, paths taken
from the file's directory, options given on the command line winning, and the same checks either way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from conftest import DEPLOYMENTS, POLICIES
from servicekit import free_port, start_process, stop_server

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.service.config import ServiceConfig, ServiceConfigError

TOKEN = "kcp-opa-config-token-" + "z" * 24


def test_a_config_file_names_the_settings_its_paths_from_its_own_directory(tmp_path: Path) -> None:
    settings = {
        "bundle": "bundles/finance.tar.gz",
        "store": "postgresql://kcp@db/kcp",
        "ledger": "/var/log/kcp/ledger.jsonl",
        "issuer_ids": ["a", "b"],
        "trust": "trust.yaml",
        "issuer_keyring": "keys.json",
        "port": 9000,
        "poll_seconds": 5,
        "mode_second_approval": True,
    }
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(settings))
    config = ServiceConfig.from_file(path)
    assert config.bundle == tmp_path / "bundles" / "finance.tar.gz"
    assert config.trust == tmp_path / "trust.yaml" and config.ledger == "/var/log/kcp/ledger.jsonl"
    assert config.store == "postgresql://kcp@db/kcp"  # a location, not a path: left as it is
    assert config.issuer_ids == ("a", "b") and config.port == 9000 and config.poll_seconds == 5.0
    assert ServiceConfig.from_dict(config.to_dict()) == config
    overridden = ServiceConfig.from_file(path, {"port": 9100, "issuer_ids": ("c",)})
    assert overridden.port == 9100 and overridden.issuer_ids == ("c",) and overridden.trust == config.trust


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"bundle": "b.tar.gz", "signing_keys": "x"}, "unknown setting 'signing_keys'"),
        ({"store": "s.db"}, "the bundle setting is required"),
        ({"bundle": "b.tar.gz", "port": "8181"}, "setting 'port': expected int"),
        ({"bundle": "b.tar.gz", "otel": 1}, "setting 'otel': expected bool"),
        ({"bundle": "b.tar.gz", "port": True}, "setting 'port': expected int"),
        ({"bundle": "b.tar.gz", "issuer_ids": "a"}, "setting 'issuer_ids': expected list"),
        ({"bundle": "b.tar.gz", "transport": "tcp"}, "transport 'tcp'"),
        ({"bundle": "b.tar.gz", "issuer_ids": ["a"]}, "need --trust"),
        ({"bundle": "b.tar.gz", "trust": "t.yaml"}, "--trust needs --issuer-id"),
        ({"bundle": "b.tar.gz", "keyring": "k.json", "signing_key": "pkcs11:token=t"}, "not both"),
    ],
)
def test_a_config_is_refused_with_one_line_naming_the_setting(tmp_path: Path, settings: dict, says: str) -> None:
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(settings))
    with pytest.raises(ServiceConfigError, match=says):
        ServiceConfig.from_file(path)


def test_a_config_file_with_a_duplicate_key_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "serve.json"
    path.write_text('{"bundle": "a.tar.gz", "bundle": "b.tar.gz"}')
    with pytest.raises(ServiceConfigError, match="cannot read the service config"):
        ServiceConfig.from_file(path)


def test_serve_starts_from_a_config_file_and_the_command_line_wins(tmp_path: Path) -> None:
    (tmp_path / "bundles").mkdir()
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, tmp_path / "bundles" / "finance.tar.gz")
    settings = {
        "bundle": "bundles/finance.tar.gz",
        "transport": "http",
        "store": str(tmp_path / "state" / "service.db"),
        "ledger": "state/ledger.jsonl",
        "port": 1,  # the command line's --port wins
    }
    (tmp_path / "state").mkdir()
    config = tmp_path / "serve.json"
    config.write_text(json.dumps(settings))
    port = free_port()
    command = [sys.executable, "-m", "kcp_opa", "serve", "--config", str(config), "--port", str(port)]
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    process, url = start_process(command, port, {"KCP_OPA_SERVE_TOKEN": TOKEN}, cwd=elsewhere)
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        status = httpx2.get(f"{url}/v1/status", headers=auth, timeout=30).json()
        assert status["store"]["ok"] and status["ledger"]["ok"] and status["trust"] is None
        noted = httpx2.post(f"{url}/v1/audit-events", json={"event": "configured"}, headers=auth, timeout=30)
        assert noted.status_code == 200, noted.text
    finally:
        stop_server(process)
    assert (tmp_path / "state" / "ledger.jsonl").exists()  # the file's directory, not the working directory
    assert not (elsewhere / "state").exists()


def test_serve_refuses_a_bad_config_file_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"bundle": "b.tar.gz", "prot": 8181}))
    proc = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "serve", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "unknown setting 'prot'" in proc.stderr and "Traceback" not in proc.stderr
