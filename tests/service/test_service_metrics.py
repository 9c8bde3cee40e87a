"""``/metrics`` of a running `kcp-opa serve` exports every metric the Grafana dashboard and the
alert rules in docs/grafana name, and its store, ledger, execution, challenge and posted-fact
metrics say what happened: the store and the ledger up, the ledger's head seq, an execution
refused, an open challenge, a fact kept and one refused."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import REPO
from servicekit import (
    FACT_ISSUER,
    GATE_ISSUER,
    SERVICE_ISSUER,
    compile_finance,
    start_server,
    stop_server,
    write_receipt_keyring,
    write_registry,
    write_tokens,
)

from kcp_opa.context import sign_fact
from kcp_opa.core.signing import load_keyring
from kcp_opa.decide.action import action_hash

AGENT, ISSUER, EXECUTOR = "t-agent-" + "a" * 32, "t-issuer-" + "i" * 32, "t-exec-" + "e" * 32
GRAFANA = REPO / "docs" / "grafana"
ACTION = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("metrics")
    registry, keys = write_registry(work)
    data = yaml.safe_load(registry.read_text())
    data["principals"].append({"id": FACT_ISSUER, "type": "provider"})
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    bundle = compile_finance(work / "finance.tar.gz", registry)
    tokens = write_tokens(work, {AGENT: "agent_payments_001", ISSUER: FACT_ISSUER, EXECUTOR: "payments-executor"})
    args = ["--bundle", str(bundle), "--trust", str(registry), "--tokens", str(tokens)]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(keys)]
    args += ["--keyring", str(write_receipt_keyring(work)), "--store", str(work / "service.db")]
    process, url = start_server([*args, "--ledger", str(work / "service.jsonl")])
    try:
        yield {"url": url, "keys": keys}
    finally:
        stop_server(process)


def _exported(text: str) -> dict[str, set[str]]:
    """Every sample name the exposition may hold (from its TYPE lines), with the labels seen on it."""
    found: dict[str, set[str]] = {}
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        name, kind = kind_line
        names = [f"{name}_bucket", f"{name}_sum", f"{name}_count"] if kind == "histogram" else [name]
        for sample in names:
            found.setdefault(sample, set())
    for name, labels in re.findall(r"^([a-z_]+)(?:\{([^}]*)\})? ", text, re.MULTILINE):
        found.setdefault(name, set()).update(pair.split("=")[0] for pair in labels.split(",") if pair)
    return found


def _named() -> set[str]:
    """Every kcp_opa metric the dashboard's panels and the alert rules query."""
    dashboard = json.loads((GRAFANA / "kcp-opa-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = yaml.safe_load((GRAFANA / "kcp-opa-alerts.yaml").read_text())
    exprs += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    return {name for expr in exprs for name in re.findall(r"\b(kcp_opa_[a-z_]+)", expr)}


def _value(text: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    assert found, sample
    return float(found.group(1))


def test_every_metric_the_dashboard_and_alerts_name_is_exported_and_says_what_happened(server: dict[str, Any]) -> None:
    url = server["url"]
    agent, issuer = {"Authorization": f"Bearer {AGENT}"}, {"Authorization": f"Bearer {ISSUER}"}
    decided = httpx2.post(f"{url}/v1/decisions", json={"action": ACTION}, headers=agent, timeout=60).json()
    opened = httpx2.post(f"{url}/v1/decisions/{decided['decision_id']}/challenges", json={}, headers=agent, timeout=60)
    assert opened.status_code == 200, opened.text
    key = load_keyring(server["keys"]).keys[f"{FACT_ISSUER}-ed25519"]
    times = {"issued_at": "2026-01-01T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}
    fact = sign_fact(
        {"fact": "new_beneficiary", "value": True, "action_hash": action_hash(ACTION), **times}, FACT_ISSUER, key
    )
    assert httpx2.post(f"{url}/v1/facts", json=fact, headers=issuer, timeout=60).status_code == 200
    stale = {**fact, "expires_at": "2026-01-02T00:00:00Z"}  # changed after signing
    assert httpx2.post(f"{url}/v1/facts", json=stale, headers=issuer, timeout=60).status_code == 422
    run = {"action": ACTION, "receipt": {"receipt_id": "forged"}, "handler": "pay"}
    executor = {"Authorization": f"Bearer {EXECUTOR}"}
    assert httpx2.post(f"{url}/v1/executions", json=run, headers=executor, timeout=60).status_code >= 400

    text = httpx2.get(f"{url}/metrics", timeout=30).text
    exported = _exported(text)
    wanted = _named()
    assert len(wanted) >= 14
    for name in wanted:
        samples = [name] if name in exported else [f"{name}_total"]
        assert samples[0] in exported, (name, sorted(exported))
    assert _value(text, 'kcp_opa_store_up{backend="sqlite"}') == 1.0
    assert _value(text, 'kcp_opa_ledger_up{backend="file"}') == 1.0
    assert _value(text, "kcp_opa_ledger_head_seq") >= 3
    assert _value(text, "kcp_opa_open_challenges") == len(opened.json()["challenges"]) > 0
    assert _value(text, 'kcp_opa_facts_posted_total{fact="new_beneficiary"}') == 1.0
    assert _value(text, 'kcp_opa_facts_refused_total{code="fact_signature_invalid"}') == 1.0
    assert _value(text, 'kcp_opa_executions_total{outcome="refused"}') == 1.0
    assert _value(text, "kcp_opa_ledger_append_errors_total") == 0.0


@pytest.mark.postgres
def test_a_stopped_database_shows_as_the_store_and_ledger_down_and_its_errors_by_backend(
    postgres: Any, tmp_path: Path
) -> None:
    if not postgres.port:
        pytest.skip("an external server (KCP_OPA_TEST_POSTGRES) is not stopped by the tests")
    dsn = postgres.database("kcp_metrics_outage")
    registry, keys = write_registry(tmp_path)
    bundle = compile_finance(tmp_path / "finance.tar.gz", registry)
    tokens = write_tokens(tmp_path, {AGENT: "agent_payments_001"})
    args = ["--bundle", str(bundle), "--trust", str(registry), "--tokens", str(tokens), "--ledger", dsn]
    args += ["--issuer-id", SERVICE_ISSUER, "--issuer-id", GATE_ISSUER, "--issuer-keyring", str(keys)]
    args += ["--keyring", str(write_receipt_keyring(tmp_path))]
    process, url = start_server(args, env={"KCP_OPA_STORE": dsn})
    try:
        agent = {"Authorization": f"Bearer {AGENT}"}
        assert httpx2.post(f"{url}/v1/decisions", json={"action": ACTION}, headers=agent, timeout=60).status_code == 200
        before = httpx2.get(f"{url}/metrics", timeout=30).text
        assert _value(before, 'kcp_opa_store_up{backend="postgresql"}') == 1.0
        assert _value(before, 'kcp_opa_ledger_up{backend="postgresql"}') == 1.0
        assert _value(before, "kcp_opa_ledger_head_seq") >= 1
        postgres.stop("fast")
        try:
            down = httpx2.post(f"{url}/v1/decisions", json={"action": ACTION}, headers=agent, timeout=60)
            assert down.status_code == 503, down.text
            during = httpx2.get(f"{url}/metrics", timeout=60)
            assert during.status_code == 200  # the scrape answers: the outage is a value, never a 500
            assert _value(during.text, 'kcp_opa_store_up{backend="postgresql"}') == 0.0
            assert _value(during.text, 'kcp_opa_ledger_up{backend="postgresql"}') == 0.0
            assert _value(during.text, 'kcp_opa_store_errors_total{backend="postgresql"}') >= 1.0
        finally:
            postgres.start()
    finally:
        stop_server(process)
