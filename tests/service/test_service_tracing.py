"""OpenTelemetry: a span per decision with the gate's attributes, parented by the action's traceparent,
inside the SDK's span per tool call; nothing at all when tracing is off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO
from mcp import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from servicekit import local_context, open_local

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.service import observe
from kcp_opa.service.callers import LOCAL_AGENT
from kcp_opa.service.config import HostParts
from kcp_opa.service.desk import GateService
from kcp_opa.service.mcpserver import build_server

#: The supplier payment, made by the caller the tests authenticate as (who acts is the caller).
KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text()) | {"agent_id": "local-agent"}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACED = {**KYA, "trace": {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}}
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> GateService:
    work = tmp_path_factory.mktemp("tracing")
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, work / "finance.tar.gz")
    context = local_context("user_001")
    return open_local(work / "finance.tar.gz", work, HostParts(context=context))


@pytest.fixture
def traced() -> Iterator[InMemorySpanExporter]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)  # once per process; later calls are ignored by the API
    EXPORTER.clear()
    assert observe.enable_tracing(trace.get_tracer_provider())
    yield EXPORTER
    observe.disable_tracing()


def test_off_costs_a_shared_no_op(service: GateService) -> None:
    observe.disable_tracing()
    assert observe.span("x", {}) is observe.span("y", {"a": 1})
    with observe.span("x", {}) as current:
        assert current is None


def test_a_decision_span_carries_the_gate_attributes_under_the_tool_call_span(
    service: GateService, traced: InMemorySpanExporter
) -> None:
    async def main() -> None:
        async with Client(build_server(service, lambda ctx: LOCAL_AGENT)) as client:
            result = await client.call_tool("evaluate_action", {"action": TRACED})
            assert not result.is_error

    anyio.run(main)
    spans = {s.name: s for s in traced.get_finished_spans()}
    decision = spans["kcp_opa.decision"]
    attributes = dict(decision.attributes or {})
    assert attributes["kcp.routing_state"] == "HUMAN_APPROVAL"
    assert str(attributes["kcp.decision_id"]).startswith("dec_")
    assert attributes["kcp.bundle_revision"] == service.gate.bundle_revision
    assert attributes["kcp.policy_version"] == service.gate.policy_version
    assert format(decision.context.trace_id, "032x") == TRACE_ID  # the action's traceparent
    assert "tools/call evaluate_action" in spans  # the SDK's own tool-call span


def test_without_a_traceparent_the_decision_joins_the_tool_call_trace(
    service: GateService, traced: InMemorySpanExporter
) -> None:
    async def main() -> None:
        async with Client(build_server(service, lambda ctx: LOCAL_AGENT)) as client:
            await client.call_tool("evaluate_action", {"action": KYA})

    anyio.run(main)
    spans = {s.name: s for s in traced.get_finished_spans()}
    decision, call = spans["kcp_opa.decision"], spans["tools/call evaluate_action"]
    assert decision.parent is not None and decision.parent.span_id == call.context.span_id


def test_path_is_silent_when_tracing_is_off(service: GateService, tmp_path: Path) -> None:
    observe.disable_tracing()
    EXPORTER.clear()
    service.evaluate(LOCAL_AGENT, TRACED)
    assert not [s for s in EXPORTER.get_finished_spans() if s.name == "kcp_opa.decision"]
