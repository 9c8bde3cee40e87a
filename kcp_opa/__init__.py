"""kcp-opa: KCP compliance declarations compiled into OPA bundles, decided in Rego.

The pipeline, one module each: manifest (validate) -> effective (merge) -> matrix -> datadoc
(Rego data) -> bundle (deterministic OPA bundle) -> action (check, hash) -> engine (regopy) ->
gate (decide) -> decision (typed) -> controls (evidence) -> receipts (sign, verify) ->
executor (consume, execute once) -> ledger/audit (hash-chained record) -> auditor, ropa.
"""

from __future__ import annotations

__version__ = "0.1.0"

from kcp_opa.action import action_hash, check_action, parse_action
from kcp_opa.auditor import export_decision, query, replay
from kcp_opa.bundle import LoadedBundle, read_bundle
from kcp_opa.cases import DecisionCase, check_case, load_cases
from kcp_opa.compiler import CompileResult, compile_bundle
from kcp_opa.controls import ControlDesk, ControlEvidence, GateDecision
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
    EvidenceRejectedError,
    ExecutionError,
    KcpOpaError,
    KeyringError,
    LedgerError,
    QueryError,
    ReceiptIssueError,
    ReceiptVerificationError,
    SourceError,
    SourceUnreadableError,
    UnitNotFoundError,
    ValidationFailedError,
)
from kcp_opa.executor import ExecutionResult, Executor
from kcp_opa.gate import DecisionInput, Gate, build_input
from kcp_opa.ledger import AuditLedger, verify_ledger
from kcp_opa.manifest import Manifest, load_manifest, validate_manifest
from kcp_opa.matrix import DelegationMatrix, load_matrix, validate_matrix
from kcp_opa.receipts import issue_receipt, verify_receipt
from kcp_opa.ropa import build_ropa
from kcp_opa.signing import Keyring, ReceiptKey, generate_ed25519, hmac_key, load_keyring
from kcp_opa.store import SQLiteStore

__all__ = [
    "ActionRejectedError",
    "AuditLedger",
    "AuthorizationStatus",
    "BundleError",
    "CompileError",
    "CompileResult",
    "ControlDesk",
    "ControlEvidence",
    "Decision",
    "DecisionCase",
    "DecisionInput",
    "DelegationMatrix",
    "Diagnostic",
    "EffectiveUnit",
    "EngineLoadError",
    "EvidenceRejectedError",
    "ExecutionError",
    "ExecutionResult",
    "Executor",
    "Gate",
    "GateDecision",
    "KcpOpaError",
    "Keyring",
    "KeyringError",
    "LedgerError",
    "LoadedBundle",
    "Manifest",
    "Outcome",
    "PolicyVerdict",
    "QueryError",
    "Reason",
    "ReceiptIssueError",
    "ReceiptKey",
    "ReceiptVerificationError",
    "Report",
    "RiskLevel",
    "RoutingState",
    "SQLiteStore",
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
    "build_ropa",
    "check_action",
    "check_case",
    "compile_bundle",
    "effective_unit",
    "effective_units",
    "export_decision",
    "generate_ed25519",
    "hmac_key",
    "issue_receipt",
    "leaf_path",
    "load_cases",
    "load_keyring",
    "load_manifest",
    "load_matrix",
    "parse_action",
    "query",
    "read_bundle",
    "replay",
    "validate_manifest",
    "validate_matrix",
    "verify_ledger",
    "verify_receipt",
]
