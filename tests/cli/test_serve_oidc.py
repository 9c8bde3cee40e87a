"""`kcp-opa serve`'s single sign-on options as a user meets them: --help teaches them, and each
mistake is a one-line error naming what to fix, before anything serves (a real process)."""

from __future__ import annotations

import secrets
from pathlib import Path

from conftest import REPO, run_cli
from oidckit import CLIENT_ID, users_file
from servicekit import compile_finance, write_tokens

TRUST = REPO / "fixtures" / "trust"
ISSUER = "https://login.example.com/realms/bank"


def _base(work: Path, bundle: Path | None = None) -> list[str]:
    tokens = write_tokens(work, {secrets.token_urlsafe(32): "auditor_ada"})
    return [
        "serve", "--transport", "http", "--bundle", str(bundle or REPO / "pyproject.toml"),
        "--trust", str(TRUST / "registry.yaml"), "--tokens", str(tokens), "--issuer-id", "kcp-opa-gate",
        "--issuer-keyring", str(TRUST / "TEST-ONLY-issuer-keys.json"), "--store", str(work / "s.db"),
        "--ledger", str(work / "l.jsonl"),
    ]  # fmt: skip


def _refused(result: object, *words: str) -> None:
    assert result.returncode == 2, result.stderr  # type: ignore[attr-defined]
    stderr = result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in stderr and all(word in stderr for word in words), stderr


def test_help_teaches_single_sign_on() -> None:
    shown = run_cli("serve", "--help")
    assert shown.returncode == 0
    for words in ("--oidc-issuer", "--oidc-client-id", "--oidc-users", "mode 0600", "KCP_OPA_OIDC_CLIENT_SECRET"):
        assert words in shown.stdout, words
    text = " ".join(shown.stdout.split())  # click wraps the help
    assert "/ui/sso/callback" in text and "anyone else is refused" in text


def test_single_sign_on_needs_its_companions(tmp_path: Path) -> None:
    _refused(run_cli(*_base(tmp_path), "--oidc-issuer", ISSUER), "--oidc-client-id and --oidc-users")
    _refused(run_cli(*_base(tmp_path), "--oidc-client-id", CLIENT_ID), "need --oidc-issuer")
    users = users_file(tmp_path / "users.json")
    plain = ["--oidc-issuer", "http://idp.example.com", "--oidc-client-id", CLIENT_ID, "--oidc-users", str(users)]
    _refused(run_cli(*_base(tmp_path), *plain), "an https:// URL")


def test_a_client_secret_others_can_read_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    secret.chmod(0o644)
    users = users_file(tmp_path / "users.json")
    options = ["--oidc-issuer", ISSUER, "--oidc-client-id", CLIENT_ID, "--oidc-users", str(users)]
    result = run_cli(*_base(tmp_path), *options, "--oidc-client-secret-file", str(secret))
    _refused(result, "chmod 600")
    assert "s3cret" not in result.stderr


def test_a_users_file_naming_an_unregistered_principal_is_refused_at_start(tmp_path: Path) -> None:
    bundle = compile_finance(tmp_path / "finance.tar.gz", TRUST / "registry.yaml")
    users = users_file(tmp_path / "users.json", users={"eve@bank.example": "nobody_registered"})
    options = ["--oidc-issuer", ISSUER, "--oidc-client-id", CLIENT_ID, "--oidc-users", str(users)]
    _refused(run_cli(*_base(tmp_path, bundle), *options), "'nobody_registered', which is not in")
