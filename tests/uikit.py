"""The UI tests' server and browser: `kcp-opa serve` as a real process with the reference registry.

Principals from fixtures/trust/registry.yaml, each with its own token (the server keeps hashes);
the service signs answers as the registered issuers with the TEST-ONLY keys; a payment handler.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest
from browserkit import chromium
from conftest import REPO
from servicekit import compile_finance, start_server, stop_server, write_receipt_keyring, write_tokens

TRUST = REPO / "fixtures" / "trust"
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
PARTIES = {
    "agent": "agent_payments_001",
    "subject": "user_001",
    "provider": "kyc-provider",
    "approver": "treasury_approver_anna",
    "issuer": "scope-service",
    "executor": "payments-executor",
    "auditor": "auditor_ada",
}
ANSWERS = {
    "user_confirmation": "subject",
    "identity_verification": "provider",
    "authority_verification": "provider",
    "beneficiary_verification": "provider",
}
HOSTILE = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


@contextlib.contextmanager
def ui_servers(
    work: Path,
    *,
    ledger: str | None = None,
    store: str | None = None,
    replicas: int = 1,
    path: str = "",
    extra: Sequence[str] = (),
) -> Iterator[list[dict[str, Any]]]:
    """``replicas`` `kcp-opa serve` processes on one ledger and one store (files in ``work`` by default,
    or ``postgresql://`` locations), with the same bundle, tokens, issuers and handler; ``path``
    goes first on the servers' PYTHONPATH, ``extra`` after their options."""
    bundle = compile_finance(work / "finance.tar.gz", TRUST / "registry.yaml")
    tokens = {party: secrets.token_urlsafe(32) for party in PARTIES}
    tokens_file = write_tokens(work, {tokens[p]: pid for p, pid in PARTIES.items()})
    handlers = work / "handlers.json"
    bound = {"target": "uihandlers:pay", "actions": ["execute_payment"]}  # a handler serves the actions it names
    handlers.write_text(json.dumps({"handlers": {"pay": bound}}))
    ledger = ledger or str(work / "ledger.jsonl")
    args = ["--bundle", str(bundle), "--store", store or str(work / "service.db"), "--ledger", ledger]
    args += ["--trust", str(TRUST / "registry.yaml"), "--tokens", str(tokens_file), "--handlers", str(handlers)]
    for issuer in ("kcp-opa-gate", "bank-idp", "bank-registry", "approval-app"):
        args += ["--issuer-id", issuer]
    args += ["--region", "EU", "--attestations", str(_subject_attestations(work))]  # the gate's own facts
    args += [
        "--issuer-keyring",
        str(TRUST / "TEST-ONLY-issuer-keys.json"),
        "--keyring",
        str(write_receipt_keyring(work)),
        *extra,
    ]
    started: list[Any] = []
    try:
        for _ in range(replicas):
            started.append(start_server(args, env={"PYTHONPATH": ":".join(filter(None, [path, str(REPO / "tests")]))}))
        yield [{"url": url, "tokens": tokens, "ledger": ledger} for _, url in started]
    finally:
        for process, _ in started:
            stop_server(process)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with ui_servers(tmp_path_factory.mktemp("ui")) as (one,):
        yield {**one, "ledger": Path(one["ledger"])}


def _api(server: dict[str, Any], party: str, method: str, path: str, body: Any = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {server['tokens'][party]}"}
    return httpx2.request(method, f"{server['url']}{path}", json=body, headers=headers, timeout=60)


def _subject_attestations(work: Any) -> Any:
    """The providers' signed facts about the payment's customer, as the serve demo writes them."""
    import importlib.util

    from kcp_opa.core.signing import load_keyring

    spec = importlib.util.spec_from_file_location("serve_demo", REPO / "examples" / "serve_demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo.attest_subject(load_keyring(TRUST / "TEST-ONLY-issuer-keys.json"), work / "attestations.json")


def _pending_payment(server: dict[str, Any], action: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The agent decides and opens challenges; the subject and provider answer theirs (API)."""
    decided = _api(server, "agent", "POST", "/v1/decisions", {"action": action})
    assert decided.status_code == 200, decided.text
    decision_id = decided.json()["decision_id"]
    opened = _api(server, "agent", "POST", f"/v1/decisions/{decision_id}/challenges", {})
    assert opened.status_code == 200, opened.text
    ids = {c["control"]: c["challenge_id"] for c in opened.json()["challenges"]}
    for control, party in ANSWERS.items():
        answer = {"status": "PASSED", "evidence_reference": f"ev:{control}"}
        done = _api(server, party, "POST", f"/v1/challenges/{ids[control]}/result", answer)
        assert done.status_code == 200, done.text
    return decision_id, ids


def _action(suffix: str, **changes: Any) -> dict[str, Any]:
    action = json.loads(json.dumps(KYA))
    action["action_id"], action["idempotency_key"] = f"act_ui_{suffix}", f"idem_ui_payment_{suffix}"
    action.update(changes)
    return action


def _sign_in(driver: Any, server: dict[str, Any], party: str) -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(f"{server['url']}/ui")
    assert driver.current_url.endswith("/ui/login")
    driver.find_element(By.ID, "token").send_keys(server["tokens"][party])
    driver.find_element(By.ID, "sign-in").click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: not d.current_url.endswith("/ui/login"))


def _wait_for(driver: Any, element_id: str) -> Any:
    """The element once the page that holds it has loaded: a click's navigation is not synchronous."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 30).until(expected_conditions.presence_of_element_located((By.ID, element_id)))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()  # type: ignore[attr-defined]


def _http_session(server: dict[str, Any], party: str) -> tuple[httpx2.Client, str]:
    client = httpx2.Client(base_url=server["url"], timeout=60, follow_redirects=False)
    page = client.get("/ui/login")
    nonce = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert nonce is not None
    signed = client.post("/ui/login", data={"csrf": nonce.group(1), "token": server["tokens"][party]})
    assert signed.status_code == 303
    inbox = client.get("/ui/inbox")
    csrf = re.search(r'name="csrf" value="([^"]+)"', inbox.text)
    assert csrf is not None
    return client, csrf.group(1)
