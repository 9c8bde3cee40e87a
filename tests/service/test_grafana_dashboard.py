"""The Grafana dashboard and the alert rules in docs/grafana read only metrics the service exposes, with
their real labels (tests/service/test_service_metrics.py: a running service exports each of them)."""

from __future__ import annotations

import json
import re

import yaml
from conftest import REPO

from kcp_opa.service.observe import Metrics


def _exposed() -> dict[str, set[str]]:
    metrics = Metrics()
    metrics.decisions.labels(state="DENY").inc()
    metrics.refusals.labels(code="replay").inc()
    metrics.tool_calls.labels(tool="evaluate_action").inc()
    metrics.decision_seconds.observe(0.001)
    metrics.ledger_write_seconds.observe(0.001)
    metrics.refused("store_unavailable", "evaluate_action")  # kcp_opa_store_errors_total{backend}
    metrics.refused("fact_expired", "post_fact")  # kcp_opa_facts_refused_total{code}
    metrics.facts_posted.labels(fact="new_beneficiary").inc()
    metrics.executions.labels(outcome="executed").inc()
    metrics.scraped(True, True, 2)  # store_up{backend}, ledger_up{backend}, open challenges
    found: dict[str, set[str]] = {}
    for line in metrics.exposition().decode().splitlines():
        match = re.match(r"([a-z_]+)(?:\{([^}]*)\})? ", line)
        if match and not line.startswith("#"):
            labels = {pair.split("=")[0] for pair in (match.group(2) or "").split(",") if pair}
            found.setdefault(match.group(1), set()).update(labels)
    return found


def test_every_panel_and_alert_queries_an_exposed_metric_by_its_labels() -> None:
    dashboard = json.loads((REPO / "docs" / "grafana" / "kcp-opa-dashboard.json").read_text())
    exposed = _exposed()
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 18
    rules = yaml.safe_load((REPO / "docs" / "grafana" / "kcp-opa-alerts.yaml").read_text())
    exprs += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    for expr in exprs:
        names = set(re.findall(r"\b(kcp_opa_[a-z_]+)", expr))
        assert names and names <= set(exposed), (expr, sorted(exposed))
        for grouped in re.findall(r"by \(([^)]*)\)", expr):
            for label in grouped.split(","):
                label = label.strip()
                assert label in {"le", "instance"} or any(label in exposed[name] for name in names), (expr, label)
        for matched in re.findall(r"\{([^}]*)\}", expr):
            for label in re.findall(r"([a-z_]+)=~?\"", matched):
                assert label == "job" or any(label in exposed[name] for name in names), (expr, label)
    assert {p["id"] for p in dashboard["panels"]} == set(range(1, len(dashboard["panels"]) + 1))
