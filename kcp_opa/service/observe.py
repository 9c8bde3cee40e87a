"""What the service tells operators: Prometheus metrics and optional OpenTelemetry spans.

Metrics live in a registry of the service's own (two services in one process never share
counters). Tracing is off unless :func:`enable_tracing` is called and ``opentelemetry`` is
installed (the ``[otel]`` extra): when off, :func:`span` is a shared no-op context manager, so
a decision pays one attribute check for it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.decide.action import trace_id_of
from kcp_opa.stores.protocols import LedgerStore
from kcp_opa.stores.storedtypes import LedgerSnapshot

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """Decisions by routing state, decision latency, refusals by code (outages on their own), ledger write latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter(
            "kcp_opa_decisions", "Gate decisions by routing state.", ["state"], registry=self.registry
        )
        self.decision_seconds = Histogram(
            "kcp_opa_decision_seconds", "Time to decide one action.", buckets=_LATENCY_BUCKETS, registry=self.registry
        )
        self.refusals = Counter("kcp_opa_refusals", "Refused calls by error code.", ["code"], registry=self.registry)
        self.ledger_write_seconds = Histogram(
            "kcp_opa_ledger_write_seconds",
            "Time to append one entry to the audit ledger (durable).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tool_calls = Counter("kcp_opa_tool_calls", "Tool calls by tool.", ["tool"], registry=self.registry)
        self.store_unavailable = Counter(
            "kcp_opa_store_unavailable",
            "Calls refused 503 store_unavailable because the store or ledger database could not be reached.",
            ["tool"],
            registry=self.registry,
        )

        self.facts_posted = Counter(
            "kcp_opa_facts_posted",
            "Fact attestations issuers posted and the gate kept (POST /v1/facts), by fact; refused ones are"
            " kcp_opa_refusals_total's fact_* codes.",
            ["fact"],
            registry=self.registry,
        )

        self.facts_refused = Counter(
            "kcp_opa_facts_refused",
            "Fact attestations POST /v1/facts refused (nothing kept), by code.",
            ["code"],
            registry=self.registry,
        )
        self._state_metrics()

    def _state_metrics(self) -> None:
        """The store's, the ledger's, the executions' and the challenges' metrics (dashboards, alerts)."""
        self.store_up = Gauge(
            "kcp_opa_store_up",
            "1 when the store answered at the last scrape, else 0, by backend (sqlite, postgresql).",
            ["backend"],
            registry=self.registry,
        )
        self.store_errors = Counter(
            "kcp_opa_store_errors",
            "Calls refused because the store or the ledger database failed (store_unavailable), by backend.",
            ["backend"],
            registry=self.registry,
        )
        self.ledger_up = Gauge(
            "kcp_opa_ledger_up",
            "1 when the ledger could take an append at the last scrape, else 0, by backend (file, postgresql).",
            ["backend"],
            registry=self.registry,
        )
        self.ledger_append_errors = Counter(
            "kcp_opa_ledger_append_errors",
            "Ledger appends that failed (nothing written; the call failed closed).",
            registry=self.registry,
        )
        self.ledger_head_seq = Gauge(
            "kcp_opa_ledger_head_seq",
            "The seq of the last entry this process appended to the chain.",
            registry=self.registry,
        )
        self.executions = Counter(
            "kcp_opa_executions",
            "Execution calls by outcome: executed, replayed (the kept outcome again), failed (the handler or its"
            " record failed after the claim), refused (nothing ran).",
            ["outcome"],
            registry=self.registry,
        )
        self.open_challenges = Gauge(
            "kcp_opa_open_challenges",
            "Open, unexpired control challenges at the last scrape (at most 500 counted).",
            registry=self.registry,
        )
        self.backend = "sqlite"
        self.ledger_backend = "file"

    def refused(self, code: str, tool: str) -> None:
        """Count a refusal; an outage (``store_unavailable``) also on its own counters, by tool and backend."""
        self.refusals.labels(code=code).inc()
        if code == "store_unavailable":
            self.store_unavailable.labels(tool=tool).inc()
            self.store_errors.labels(backend=self.backend).inc()
        if tool == "post_fact":
            self.facts_refused.labels(code=code).inc()

    def scraped(self, store_ok: bool, ledger_ok: bool, open_challenges: int | None) -> None:
        """What a scrape of ``/metrics`` found: the store and the ledger answer, the open challenges."""
        self.store_up.labels(backend=self.backend).set(1 if store_ok else 0)
        self.ledger_up.labels(backend=self.ledger_backend).set(1 if ledger_ok else 0)
        if open_challenges is not None:
            self.open_challenges.set(open_challenges)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class TimedLedger:
    """The audit ledger (a file or a database), with each durable append timed into the service's metrics."""

    def __init__(self, ledger: LedgerStore, metrics: Metrics) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self.checkpoint_key = ledger.checkpoint_key

    @property
    def location(self) -> str:
        return self.ledger.location

    def append(self, entry: JsonObject) -> JsonDict:
        started = time.perf_counter()
        try:
            written = self.ledger.append(entry)
        except Exception:
            self.metrics.ledger_append_errors.inc()
            raise
        finally:
            self.metrics.ledger_write_seconds.observe(time.perf_counter() - started)
        seq = written.get("seq")
        if isinstance(seq, int):
            self.metrics.ledger_head_seq.set(seq)
        return written

    def close(self) -> JsonDict | None:
        return self.ledger.close()

    def healthy(self) -> bool:
        return self.ledger.healthy()

    def snapshot(self) -> contextlib.AbstractContextManager[LedgerSnapshot | None]:
        return self.ledger.snapshot()


_tracer: Tracer | None = None


def enable_tracing(tracer_provider: TracerProvider | None = None) -> bool:
    """Turn spans on (True) when opentelemetry is installed; the provider defaults to the global one."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    provider = tracer_provider or trace.get_tracer_provider()
    _tracer = provider.get_tracer("kcp_opa.service")
    return True


def disable_tracing() -> None:
    global _tracer
    _tracer = None


_NOOP = contextlib.nullcontext(None)


def span(
    name: str, attributes: JsonObject, traceparent: str | None = None
) -> contextlib.AbstractContextManager[Span | None]:
    """A span when tracing is on (its parent from a W3C ``traceparent`` if given), else a no-op."""
    if _tracer is None:
        return _NOOP
    return _real_span(_tracer, name, attributes, traceparent)


@contextlib.contextmanager
def _real_span(tracer: Tracer, name: str, attributes: JsonObject, traceparent: str | None) -> Iterator[Span]:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent}) if traceparent else None
    clean = {k: v for k, v in attributes.items() if isinstance(v, str | bool | int | float)}
    with tracer.start_as_current_span(name, context=context, attributes=clean) as current:
        yield current


def set_attributes(current: Span | None, attributes: JsonObject) -> None:
    """Add attributes to a span from :func:`span` (nothing when tracing is off)."""
    if current is not None:
        for key, value in attributes.items():
            if isinstance(value, str | bool | int | float):
                current.set_attribute(key, value)


def writable(path: Path) -> bool:
    """Whether the ledger file (or the directory it will be made in) is writable: /v1/status."""
    if path.exists():
        return os.access(path, os.W_OK)
    return os.access(path.parent if path.parent.exists() else Path.cwd(), os.W_OK)


#: The store and ledger part of /v1/status and /ready: whether each answers now (and, for an admin, where).
class Health(TypedDict):
    ok: bool
    store: JsonDict
    ledger: JsonDict


def health(store: str | Path, store_ok: bool, ledger: Path | LedgerStore | None, *, shown: bool) -> Health:
    """The store and ledger part of /v1/status: their paths only when ``shown`` (an admin).

    ``ledger`` is the ledger file, or the ledger itself when it is a database (asked whether it answers).
    """
    if isinstance(ledger, Path) or ledger is None:
        ledger_ok, where = ledger is not None and writable(ledger), str(ledger) if ledger else None
    else:
        ledger_ok, where = ledger.healthy(), ledger.location
    files: Health = {"ok": ledger_ok and store_ok, "store": {"ok": store_ok}, "ledger": {"ok": ledger_ok}}
    if shown:
        files["store"]["path"] = str(store)
        files["ledger"]["path"] = where
    return files


def traceparent_of(action: JsonObject) -> str | None:
    """The W3C traceparent an action carries (only with a valid trace id)."""
    trace = action.get("trace")
    parent = trace.get("traceparent") if isinstance(trace, Mapping) else None
    return parent if isinstance(parent, str) and trace_id_of(action) else None
