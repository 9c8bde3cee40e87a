"""kcp-opa: KCP compliance declarations compiled into OPA bundles, decided in Rego.

The pipeline, one module each: manifest (validate) -> effective (merge) -> matrix -> datadoc
(Rego data) -> bundle (deterministic OPA bundle) -> action (check, hash) -> engine (regopy) ->
gate (decide) -> decision (typed) -> controls, receipts, audit (later).
"""

from __future__ import annotations

__version__ = "0.1.0"

from kcp_opa.action import action_hash, check_action, parse_action
from kcp_opa.bundle import LoadedBundle, read_bundle
from kcp_opa.cases import DecisionCase, check_case, load_cases
from kcp_opa.compiler import CompileResult, compile_bundle
from kcp_opa.datadoc import build_data, leaf_path
from kcp_opa.decision import (
    AuthorizationStatus,
    Decision,
    Outcome,
    PolicyVerdict,
    Reason,
    RiskLevel,
    RoutingState,
    Violation,
)
from kcp_opa.diagnostics import Diagnostic, Report, Severity
from kcp_opa.effective import EffectiveUnit, Sourced, effective_unit, effective_units
from kcp_opa.errors import (
    ActionRejectedError,
    BundleError,
    CompileError,
    EngineLoadError,
    KcpOpaError,
    QueryError,
    SourceError,
    SourceUnreadableError,
    UnitNotFoundError,
    ValidationFailedError,
)
from kcp_opa.gate import DecisionInput, Gate, build_input
from kcp_opa.manifest import Manifest, load_manifest, validate_manifest
from kcp_opa.matrix import DelegationMatrix, load_matrix, validate_matrix

__all__ = [
    "ActionRejectedError",
    "AuthorizationStatus",
    "BundleError",
    "CompileError",
    "CompileResult",
    "Decision",
    "DecisionCase",
    "DecisionInput",
    "DelegationMatrix",
    "Diagnostic",
    "EffectiveUnit",
    "EngineLoadError",
    "Gate",
    "KcpOpaError",
    "LoadedBundle",
    "Manifest",
    "Outcome",
    "PolicyVerdict",
    "QueryError",
    "Reason",
    "Report",
    "RiskLevel",
    "RoutingState",
    "Severity",
    "SourceError",
    "SourceUnreadableError",
    "Sourced",
    "UnitNotFoundError",
    "ValidationFailedError",
    "Violation",
    "__version__",
    "action_hash",
    "build_data",
    "build_input",
    "check_action",
    "check_case",
    "compile_bundle",
    "effective_unit",
    "effective_units",
    "leaf_path",
    "load_cases",
    "load_manifest",
    "load_matrix",
    "parse_action",
    "read_bundle",
    "validate_manifest",
    "validate_matrix",
]
