"""Attacks on what the UI says of a PostgreSQL ledger: it must say what `audit verify` says.

Two `kcp-opa serve` replicas on one PostgreSQL ledger and store (real processes, a real server).
An auditor opens /ui/dashboard and /ui/report on each replica:

- with N entries written, both show the chain intact with the N entries `kcp-opa audit verify
  postgresql://...` counts and the decisions the ledger holds; never "BROKEN: no ledger yet",
  never "No ledger yet", never zeros;
- after a row is edited with SQL, both show the chain BROKEN at the entry's seq, with the reason
  `audit verify` gives; never a blank, never "intact";
- on a ledger with a writer key (``--ledger-key``), after an entry is added with SQL without the
  key (a copied signature), both say BROKEN with the reason `audit verify --keyring` gives;
- while the database is down, the dashboard is a 503 that says the ledger is unavailable, never
  an empty or broken ledger.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uikit
from browserkit import screenshot
from conftest import run_cli
from uikit import _action, _pending_payment, _sign_in, ui_servers

from kcp_opa.audit.summary import summarize
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.signing import Keyring, generate_ed25519
from kcp_opa.trail.locations import readable
from kcp_opa.trail.verify import entry_hash

pytestmark = pytest.mark.postgres
browser = uikit.browser  # the module-scoped Chromium


@pytest.fixture(scope="module")
def replicas(postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    location = postgres.database("kcp_ui_ledger_reads")
    with ui_servers(tmp_path_factory.mktemp("ui-pg"), ledger=location, store=location, replicas=2) as servers:
        for n, server in enumerate(servers):  # each replica writes part of the chain
            _pending_payment(server, _action(f"pg_reads_{n}"))
        yield servers


def _reader(server: dict[str, Any]) -> httpx2.Client:
    """An auditor's UI session (signing in writes nothing to the ledger)."""
    client = httpx2.Client(base_url=server["url"], timeout=60, follow_redirects=False)
    nonce = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/login").text)
    assert nonce is not None
    signed = client.post("/ui/login", data={"csrf": nonce.group(1), "token": server["tokens"]["auditor"]})
    assert signed.status_code == 303, signed.text
    return client


def _verify(location: str) -> dict[str, Any]:
    return _verify_with(location)


def _verify_with(location: str, *options: str) -> dict[str, Any]:
    proc = run_cli("audit", "verify", location, *options, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def _report(location: str) -> dict[str, Any]:
    """`kcp-opa audit report LOCATION --format json`: what the auditor's command counts."""
    proc = run_cli("audit", "report", location, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def _card(page: str, key: str) -> int:
    found = re.search(rf'id="n-{key}"><b>(\d+)</b>', page)
    assert found is not None, key
    return int(found.group(1))


def test_the_dashboard_and_report_show_the_chain_audit_verify_counts(replicas: list[dict[str, Any]]) -> None:
    location = replicas[0]["ledger"]
    readers = [_reader(server) for server in replicas]
    verified = _verify(location)
    assert verified["ok"] is True and verified["entries"] > 10
    with readable(location) as path:
        held = summarize(path)
    assert held.decisions >= 2
    reported = _report(location)
    assert reported["ledger"] == location and reported["decisions"] == held.decisions  # named as given
    for reader in readers:
        page = reader.get("/ui/dashboard")
        assert page.status_code == 200
        assert "no ledger yet" not in page.text.lower()
        assert f"Ledger chain intact: {verified['entries']} entries, chain intact, head {verified['head']}" in page.text
        assert _card(page.text, "decisions") == held.decisions
        assert _card(page.text, "pending") == held.by_status["PENDING_CONTROLS"] >= 2
        assert _card(page.text, "controls") == len(held.approvals) > 0
        report = reader.get("/ui/report")
        assert report.status_code == 200 and "No ledger yet" not in report.text
        assert f"Chain intact: {verified['entries']} entries" in report.text
        assert f"{verified['entries']} entries.</p>" in report.text
        assert location.split("/")[-1] not in report.text  # a reader is not shown the database's location


def test_a_row_edited_with_sql_shows_broken_at_its_seq_with_the_reason(
    replicas: list[dict[str, Any]], browser: Any
) -> None:
    import psycopg
    from selenium.webdriver.common.by import By

    location = replicas[0]["ledger"]
    readers = [_reader(server) for server in replicas]
    with psycopg.connect(location, autocommit=True) as connection:
        row = connection.execute("SELECT line FROM ledger_entries WHERE seq = 3").fetchone()
        assert row is not None
        entry = json.loads(row[0])
        entry["timestamp"] = "2020-01-01T00:00:00Z"  # rewritten history, re-serialized as the writer would
        connection.execute("UPDATE ledger_entries SET line = %s WHERE seq = 3", (canonical_json(entry).decode(),))
    verified = _verify(location)
    assert verified["ok"] is False
    problem = verified["problems"][0]
    assert problem["line"] == 4  # the dump's line 4 is seq 3
    broken = f"broken at seq 3: {problem['message']}"
    assert _report(location)["chain"] == {"ok": False, "detail": broken}  # `audit report` names it alike
    for reader in readers:
        page = reader.get("/ui/dashboard")
        assert page.status_code == 200
        assert "Ledger chain intact" not in page.text
        assert f"Ledger chain BROKEN: broken at seq 3: {html.escape(problem['message'])}" in page.text
        report = reader.get("/ui/report")
        assert report.status_code == 200
        assert f"Chain BROKEN: broken at seq 3: {html.escape(problem['message'])}" in report.text
    for n, server in enumerate(replicas):  # for review: what an auditor sees on each replica
        _sign_in(browser, server, "auditor")
        assert browser.find_element(By.ID, "chain").text == f"Ledger chain BROKEN: {broken}"
        screenshot(browser, f"ui-ledgers/postgres-tampered/dashboard-replica-{n}.png")


def test_a_database_outage_is_an_unavailable_page_not_an_empty_ledger(
    postgres: Any, replicas: list[dict[str, Any]]
) -> None:
    reader = _reader(replicas[1])
    postgres.stop()
    try:
        page = reader.get("/ui/dashboard")
        assert page.status_code == 503, page.text
        assert "store_unavailable" in page.text and "no ledger yet" not in page.text.lower()
        report = reader.get("/ui/report")
        assert report.status_code == 503 and "No ledger yet" not in report.text
    finally:
        postgres.start()


def test_an_entry_added_with_sql_without_the_writer_key_shows_broken(postgres: Any, tmp_path: Path) -> None:
    import psycopg

    location = postgres.database("kcp_ui_ledger_keyed")
    key = generate_ed25519("ui-ledger-writer")
    private, public = tmp_path / "writer.json", tmp_path / "writer-public.json"
    private.write_text(json.dumps(Keyring({key.kid: key}, key.kid).to_file_dict(include_private=True)))
    private.chmod(0o600)
    public.write_text(json.dumps(Keyring({key.kid: key}).public().to_file_dict(include_private=False)))
    extra = ["--ledger-key", str(private)]
    with ui_servers(tmp_path, ledger=location, store=location, extra=extra) as (server,):
        _pending_payment(server, _action("pg_keyed"))
        reader = _reader(server)
        signed = f"every entry signed by writer {key.kid}"
        assert signed in reader.get("/ui/dashboard").text  # checked with the key, not only chained
        with psycopg.connect(location, autocommit=True) as connection:
            head = connection.execute("SELECT seq FROM ledger_chain").fetchone()
            assert head is not None
            seq = int(head[0])
            found = connection.execute("SELECT line FROM ledger_entries WHERE seq = %s", (seq,)).fetchone()
            assert found is not None
            last = json.loads(found[0])
            forged = {"type": "decision", "decision_id": "dec_forged", "decision": "ALLOW", "seq": seq + 1}
            forged |= {"previous_hash": last["entry_hash"], "entry_signature": last["entry_signature"]}
            forged["entry_hash"] = entry_hash(forged)  # chained as the writer would; signed by nobody
            connection.execute(
                "INSERT INTO ledger_entries (seq, entry_hash, line) VALUES (%s, %s, %s)",
                (seq + 1, forged["entry_hash"], canonical_json(forged).decode()),
            )
            connection.execute("UPDATE ledger_chain SET seq = %s, head_hash = %s", (seq + 1, forged["entry_hash"]))
        verified = _verify_with(location, "--keyring", str(public), "--writer", key.kid)
        assert verified["ok"] is False and f"foreign entry: seq {seq + 1}" in verified["problems"][0]["message"]
        page = reader.get("/ui/dashboard").text
        reason = html.escape(verified["problems"][0]["message"])
        assert f"Ledger chain BROKEN: broken at seq {seq + 1}: {reason}" in page and signed not in page
        assert f"Chain BROKEN: broken at seq {seq + 1}: {reason}" in reader.get("/ui/report").text
