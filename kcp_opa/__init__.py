"""kcp-opa: KCP compliance declarations compiled into OPA bundles, decided in Rego.

The pipeline, one package per stage, imports pointing down it (docs/architecture.md):
``declare`` (manifests, matrix) -> ``compile`` (Rego data, bundle) -> ``decide`` (action, engine,
gate) -> ``authorize`` (controls, receipts) -> ``execute`` (run once) -> ``audit``
(verify, replay, export, ROPA). ``trail`` (the hash-chained ledger) sits below decide so every
stage can write to it; ``models`` holds the typed decision; ``stores`` the state's Protocols and
their backends; ``core`` the shared leaves; ``authoring`` the policy test tools; ``analysis`` prove,
diff and case pinning over generated input spaces; ``cli`` the command on top. This module is the public API.
"""

from __future__ import annotations

from kcp_opa.analysis.diff import DiffReport, diff
from kcp_opa.analysis.engines import UserInvariants
from kcp_opa.analysis.pin import pin
from kcp_opa.analysis.prove import ProofReport, prove
from kcp_opa.analysis.space import Space, derive_space
from kcp_opa.audit.auditor import export_decision, query, replay
from kcp_opa.audit.case import build_case
from kcp_opa.audit.casecheck import verify_case
from kcp_opa.audit.ropa import build_ropa
from kcp_opa.audit.summary import summarize
from kcp_opa.authoring.cases import DecisionCase, check_case, load_cases
from kcp_opa.authorize.controls import ControlDesk, ControlEvidence, GateDecision
from kcp_opa.authorize.documents import Attestation, Receipt
from kcp_opa.authorize.issuance import issue_receipt
from kcp_opa.authorize.receipts import verify_receipt
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import CompileResult, compile_bundle
from kcp_opa.compile.datadoc import build_data, leaf_path
from kcp_opa.compile.signatures import SignatureInfo, Verification, VerificationKey
from kcp_opa.compile.signkeys import load_bundle_signer
from kcp_opa.context import (
    ContextSources,
    CounterSource,
    MeteringSource,
    RegistrySource,
    SignedAttestations,
    SignedExceptions,
    StaticCounters,
    StaticGateConfig,
    sign_fact,
    sign_spend,
)
from kcp_opa.context.counting import StoreCounters
from kcp_opa.core.errors import (
    ActionRejectedError,
    AnalysisError,
    BundleError,
    BundleProvenanceError,
    BundleSignatureError,
    CompileError,
    EngineLoadError,
    EvidenceRejectedError,
    ExecutionError,
    KcpOpaError,
    KeyringError,
    LedgerError,
    MalformedDocumentError,
    QueryError,
    ReceiptIssueError,
    ReceiptVerificationError,
    SourceError,
    SourceUnreadableError,
    StoreUnavailableError,
    UnitNotFoundError,
    ValidationFailedError,
)
from kcp_opa.core.signing import (
    Ed25519Key,
    HmacKey,
    Keyring,
    Pkcs11Key,
    Signer,
    Verifier,
    generate_ed25519,
    hmac_key,
    load_keyring,
    load_signing_key,
)
from kcp_opa.core.version import __version__
from kcp_opa.decide.action import action_hash, check_action, parse_action
from kcp_opa.decide.checked import CheckedAction
from kcp_opa.decide.follow import BundleFollower, DirectorySource, FileSource, HttpSource
from kcp_opa.decide.gate import ActiveBundle, DecisionInput, Gate, build_input
from kcp_opa.declare.diagnostics import Diagnostic, Report, Severity
from kcp_opa.declare.effective import EffectiveUnit, Sourced, effective_unit, effective_units
from kcp_opa.declare.exceptions import ExceptionsFile, GrantedException, load_exceptions, sign_exception
from kcp_opa.declare.manifest import Manifest, load_manifest, validate_manifest
from kcp_opa.declare.matrix import DelegationMatrix, load_matrix, validate_matrix
from kcp_opa.execute.executor import ExecutionResult, Executor
from kcp_opa.models.decision import (
    AuthorizationStatus,
    Decision,
    Outcome,
    PolicyVerdict,
    Reason,
    RiskLevel,
    RoutingState,
    Violation,
)
from kcp_opa.stores import (
    ChallengeStore,
    CounterStore,
    DecisionStore,
    ExecutionRecord,
    ExecutionStore,
    ExecutorStore,
    HandoffStore,
    LedgerStore,
    NonceStore,
)
from kcp_opa.stores.sqlite import SQLiteCounterStore, SQLiteStore
from kcp_opa.trail.checkpoint import Checkpoint
from kcp_opa.trail.ledger import AuditLedger, verify_ledger
from kcp_opa.trail.locations import open_ledger
from kcp_opa.trail.record import LedgerEntry

__all__ = [
    "ActionRejectedError",
    "ActiveBundle",
    "AnalysisError",
    "Attestation",
    "AuditLedger",
    "AuthorizationStatus",
    "BundleError",
    "BundleFollower",
    "BundleProvenanceError",
    "BundleSignatureError",
    "ChallengeStore",
    "CheckedAction",
    "Checkpoint",
    "CompileError",
    "CompileResult",
    "ContextSources",
    "ControlDesk",
    "ControlEvidence",
    "CounterSource",
    "CounterStore",
    "Decision",
    "DecisionCase",
    "DecisionInput",
    "DecisionStore",
    "DelegationMatrix",
    "Diagnostic",
    "DiffReport",
    "DirectorySource",
    "Ed25519Key",
    "EffectiveUnit",
    "EngineLoadError",
    "EvidenceRejectedError",
    "ExceptionsFile",
    "ExecutionError",
    "ExecutionRecord",
    "ExecutionResult",
    "ExecutionStore",
    "Executor",
    "ExecutorStore",
    "FileSource",
    "Gate",
    "GateDecision",
    "GrantedException",
    "HandoffStore",
    "HmacKey",
    "HttpSource",
    "KcpOpaError",
    "Keyring",
    "KeyringError",
    "LedgerEntry",
    "LedgerError",
    "LedgerStore",
    "LoadedBundle",
    "MalformedDocumentError",
    "Manifest",
    "MeteringSource",
    "NonceStore",
    "Outcome",
    "Pkcs11Key",
    "PolicyVerdict",
    "ProofReport",
    "QueryError",
    "Reason",
    "Receipt",
    "ReceiptIssueError",
    "ReceiptVerificationError",
    "RegistrySource",
    "Report",
    "RiskLevel",
    "RoutingState",
    "SQLiteCounterStore",
    "SQLiteStore",
    "Severity",
    "SignatureInfo",
    "SignedAttestations",
    "SignedExceptions",
    "Signer",
    "SourceError",
    "SourceUnreadableError",
    "Sourced",
    "Space",
    "StaticCounters",
    "StaticGateConfig",
    "StoreCounters",
    "StoreUnavailableError",
    "UnitNotFoundError",
    "UserInvariants",
    "ValidationFailedError",
    "Verification",
    "VerificationKey",
    "Verifier",
    "Violation",
    "__version__",
    "action_hash",
    "build_case",
    "build_data",
    "build_input",
    "build_ropa",
    "check_action",
    "check_case",
    "compile_bundle",
    "derive_space",
    "diff",
    "effective_unit",
    "effective_units",
    "export_decision",
    "generate_ed25519",
    "hmac_key",
    "issue_receipt",
    "leaf_path",
    "load_bundle_signer",
    "load_cases",
    "load_exceptions",
    "load_keyring",
    "load_manifest",
    "load_matrix",
    "load_signing_key",
    "open_ledger",
    "parse_action",
    "pin",
    "prove",
    "query",
    "read_bundle",
    "replay",
    "sign_exception",
    "sign_fact",
    "sign_spend",
    "summarize",
    "validate_manifest",
    "validate_matrix",
    "verify_case",
    "verify_ledger",
    "verify_receipt",
]
