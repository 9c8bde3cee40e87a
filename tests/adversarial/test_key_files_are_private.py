"""Every file the CLI or the service creates that holds a key or a secret is owner-only (0600),
whatever the umask: the SQLite store (``service.db`` holds the desk's sealing key and may hold
the receipt key, and SQLite gives its -wal/-shm files the same mode), receipt keyrings, bundle
signing keys (``make bundle``'s ``.demo-keys``), bearer-token files. Real commands, as a user runs
them; then the whole directory is walked, so a new key file made alongside is judged too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import run_cli

from kcp_opa.stores.opening import open_stores

#: What marks a file as holding a secret: PEM private keys, private keyrings, token hashes, SQLite.
SECRET_MARKS = (b"PRIVATE KEY", b'"private_key"', b'"tokens"', b"SQLite format 3")


def _holds_secret(path: Path) -> bool:
    content = path.read_bytes()
    return path.name.startswith("service.db") or any(mark in content for mark in SECRET_MARKS)


def test_every_key_holding_file_is_created_owner_only(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # a common default: files would be 0644 unless created private
    try:
        made = [
            run_cli("bundle", "keygen", str(tmp_path / ".demo-keys" / "bundle-signing.pem")),
            run_cli(
                "receipt",
                "keygen",
                "--kid",
                "k1",
                "--keyring",
                str(tmp_path / "keys.json"),
                "--public",
                str(tmp_path / "keys.pub.json"),
            ),
            run_cli("serve", "tokens", "add", "--tokens", str(tmp_path / "tokens.json"), "--principal", "local-agent"),
            run_cli("store", "migrate", "--store", str(tmp_path / "audit" / "service.db")),
        ]
        for done in made:
            assert done.returncode == 0, done.stderr
        stores = open_stores(tmp_path / "audit" / "service.db")
        assert len(stores.decisions.seal_key()) >= 32  # the sealing key is in the file now
    finally:
        os.umask(previous)
    expected = {".demo-keys/bundle-signing.pem", "keys.json", "tokens.json", "audit/service.db"}
    secret = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and _holds_secret(p)}
    assert expected <= secret, secret
    modes = {name: oct(stat.S_IMODE((tmp_path / name).stat().st_mode)) for name in sorted(secret)}
    assert modes == dict.fromkeys(sorted(secret), "0o600")


def test_a_store_others_can_read_is_narrowed_when_opened(tmp_path: Path) -> None:
    """A store file made 0644 (by an older kcp-opa or another umask) still holds the sealing key:
    opening it narrows the file and its -wal/-shm to 0600."""
    path = tmp_path / "service.db"
    stores = open_stores(path)
    assert len(stores.decisions.seal_key()) >= 32
    for file in tmp_path.iterdir():
        file.chmod(0o644)
    open_stores(path).decisions.seal_key()
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(modes, "0o600") and "service.db" in modes, modes
