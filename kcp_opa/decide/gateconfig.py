"""How a :class:`~kcp_opa.decide.gate.Gate` loads and evaluates its bundles: one :class:`GateConfig`,
read by the gate at start, on every ``activate`` and for a shadow bundle.

A value rather than nine keyword arguments (python-tuf's ``UpdaterConfig``): the host builds it
once from its own configuration, and it is checked here, before any bundle is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kcp_opa.compile.signatures import Verification
from kcp_opa.context.builder import ContextSources
from kcp_opa.core.errors import EngineLoadError
from kcp_opa.decide.crosscheck import CROSS_CHECK_ENGINES
from kcp_opa.decide.pool import ISOLATIONS
from kcp_opa.stores.protocols import LedgerStore


@dataclass(frozen=True)
class GateConfig:
    """Every setting of one gate; the defaults are the library's (``kcp-opa serve`` isolates by process)."""

    #: Plan each bundle in a child process first, so a policy that would abort rego-cpp raises
    #: :class:`EngineLoadError` instead of killing this process. Off only for bundles this
    #: process has already checked.
    preflight: bool = True
    #: Every decision is written here (durably) before ``decide`` returns, and
    #: ``standard_audit_logging`` counts as satisfied; None: that control stays missing.
    ledger: LedgerStore | None = None
    #: A directory keeping rego-cpp's binary plan per bundle sha256: the first start builds and
    #: saves it, later starts load it (3.7x faster at 10,000 units; docs/performance.md).
    plan_cache: Path | None = None
    #: ``"opa"``: also evaluate every decision on the OPA reference engine; any difference is a
    #: DENY ``engine_divergence`` with both results in the ledger.
    cross_check: str | None = None
    #: The keys (and scope) every bundle must be signed with, at start and on every ``activate``
    #: (``Verification.from_specs`` reads ``[KEYID=]PEM`` paths); None: a signed bundle is
    #: refused, as OPA does.
    verification: Verification | None = None
    #: The sources of the gate and attested facts (docs/contract.md, "Facts"), built by the host
    #: from its own configuration, never from model output; None: every gate fact is missing.
    context: ContextSources | None = None
    #: ``"process"`` evaluates in worker processes (kcp_opa.decide.pool): an input that crashes
    #: rego-cpp costs its decision (a DENY ``engine_error``), not this process.
    isolation: str = "inline"

    def __post_init__(self) -> None:
        if self.cross_check is not None and self.cross_check not in CROSS_CHECK_ENGINES:
            raise EngineLoadError(f"cross_check={self.cross_check!r}: the engines are {', '.join(CROSS_CHECK_ENGINES)}")
        if self.isolation not in ISOLATIONS:
            raise EngineLoadError(f"isolation={self.isolation!r}: one of {', '.join(ISOLATIONS)}")
