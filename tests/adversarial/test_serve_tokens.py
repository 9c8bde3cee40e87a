"""`kcp-opa serve tokens`: hashes only in the file, the token printed once, revocation ends access.

Against `kcp-opa serve` as a real process: a token made by `add` authenticates; after `revoke` and
a SIGHUP reload it is refused with 401, and its UI session ends with it; a UI session on a valid
token ends at its lifetime (KCP_OPA_UI_SESSION_SECONDS).
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import httpx2
from conftest import REPO, run_cli
from servicekit import compile_finance, start_server, stop_server, write_receipt_keyring

TRUST = REPO / "fixtures" / "trust"
LIFETIME = 15  # seconds: a UI session's lifetime in this test's server


def _add(tokens: Path, principal: str) -> str:
    made = run_cli(
        "serve",
        "tokens",
        "add",
        "--tokens",
        str(tokens),
        "--principal",
        principal,
        "--trust",
        str(TRUST / "registry.yaml"),
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert len(token) >= 40 and token not in made.stderr
    return token


def test_tokens_file_holds_hashes_only_and_refuses_unknown_principals(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    first, second = _add(tokens, "treasury_approver_anna"), _add(tokens, "auditor_ada")
    text = tokens.read_text()
    assert first not in text and second not in text and first != second
    assert tokens.stat().st_mode & 0o077 == 0
    held = json.loads(text)["tokens"]
    assert sorted(held.values()) == ["auditor_ada", "treasury_approver_anna"]
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in held)
    listed = run_cli("serve", "tokens", "list", "--tokens", str(tokens), "--format", "text")
    assert "treasury_approver_anna" in listed.stdout and first not in listed.stdout
    refused = run_cli(
        "serve",
        "tokens",
        "add",
        "--tokens",
        str(tokens),
        "--principal",
        "mallory",
        "--trust",
        str(TRUST / "registry.yaml"),
    )
    assert refused.returncode == 1 and "not in the trust registry" in refused.stderr and refused.stdout == ""
    none = run_cli("serve", "tokens", "revoke", "--tokens", str(tokens), "--principal", "mallory")
    assert none.returncode == 1


def test_a_revoked_token_is_refused_after_reload_and_its_ui_session_ends(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    approver = _add(tokens, "treasury_approver_anna")
    keep = _add(tokens, "auditor_ada")
    bundle = compile_finance(tmp_path / "finance.tar.gz", TRUST / "registry.yaml")
    args = ["--bundle", str(bundle), "--store", str(tmp_path / "s.db"), "--ledger", str(tmp_path / "l.jsonl")]
    args += ["--trust", str(TRUST / "registry.yaml"), "--tokens", str(tokens), "--issuer-id", "approval-app"]
    args += [
        "--issuer-keyring",
        str(TRUST / "TEST-ONLY-issuer-keys.json"),
        "--keyring",
        str(write_receipt_keyring(tmp_path)),
    ]
    process, url = start_server(args, env={"KCP_OPA_UI_SESSION_SECONDS": str(LIFETIME)})
    try:

        def status(token: str) -> int:
            return httpx2.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"}).status_code

        assert status(approver) == 200 and status(keep) == 200
        ui = httpx2.Client(base_url=url, follow_redirects=False)
        nonce = re.search(r'name="csrf" value="([^"]+)"', ui.get("/ui/login").text)
        assert nonce is not None
        assert ui.post("/ui/login", data={"csrf": nonce.group(1), "token": approver}).status_code == 303
        approver_signed_in = time.monotonic()
        assert ui.get("/ui/inbox").status_code == 200
        auditor = httpx2.Client(base_url=url, follow_redirects=False)
        nonce = re.search(r'name="csrf" value="([^"]+)"', auditor.get("/ui/login").text)
        assert nonce is not None
        assert auditor.post("/ui/login", data={"csrf": nonce.group(1), "token": keep}).status_code == 303
        signed_in = time.monotonic()
        assert auditor.get("/ui/dashboard").status_code == 200

        revoked = run_cli("serve", "tokens", "revoke", "--tokens", str(tokens), "--principal", "treasury_approver_anna")
        assert revoked.returncode == 0, revoked.stderr
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while status(approver) != 401 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status(approver) == 401 and status(keep) == 200
        ended = ui.get("/ui/inbox")
        assert time.monotonic() - approver_signed_in < LIFETIME  # ended by the revocation, not its lifetime
        assert ended.status_code == 303 and ended.headers["location"] == "/ui/login"
        assert auditor.get("/ui/dashboard").status_code == 200
        time.sleep(max(0.0, signed_in + LIFETIME + 0.5 - time.monotonic()))  # the session's lifetime, on a valid token
        expired = auditor.get("/ui/dashboard")
        assert expired.status_code == 303 and expired.headers["location"] == "/ui/login" and status(keep) == 200
    finally:
        stop_server(process)
