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

import importlib
from typing import TYPE_CHECKING

from kcp_opa.core.version import __version__

#: The public API: each name and the module that defines it. ``import kcp_opa`` loads none of
#: them; the first use of a name imports its module (PEP 562), so the command line and a worker
#: process pay only for what they use. ``tests/test_public_api.py`` keeps this table and the
#: imports below for type checkers in step.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "kcp_opa.analysis.diff": ("DiffReport", "diff"),
    "kcp_opa.analysis.engines": ("UserInvariants",),
    "kcp_opa.analysis.pin": ("pin",),
    "kcp_opa.analysis.prove": ("ProofReport", "prove"),
    "kcp_opa.analysis.space": ("Space", "derive_space"),
    "kcp_opa.audit.auditor": ("export_decision", "query", "replay"),
    "kcp_opa.audit.case": ("build_case",),
    "kcp_opa.audit.casecheck": ("verify_case",),
    "kcp_opa.audit.ropa": ("build_ropa",),
    "kcp_opa.audit.summary": ("summarize",),
    "kcp_opa.authoring.cases": ("DecisionCase", "check_case", "load_cases"),
    "kcp_opa.authorize.controls": ("ControlDesk", "ControlEvidence", "GateDecision"),
    "kcp_opa.authorize.documents": ("Attestation", "Receipt"),
    "kcp_opa.authorize.issuance": ("issue_receipt",),
    "kcp_opa.authorize.receipts": ("verify_receipt",),
    "kcp_opa.compile.bundle": ("LoadedBundle", "read_bundle"),
    "kcp_opa.compile.compiler": ("CompileOptions", "CompileResult", "compile_bundle"),
    "kcp_opa.compile.datadoc": ("build_data", "leaf_path"),
    "kcp_opa.compile.signatures": ("SignatureInfo", "Verification", "VerificationKey"),
    "kcp_opa.compile.signkeys": ("load_bundle_signer",),
    "kcp_opa.context": (
        "ContextSources",
        "CounterSource",
        "MeteringSource",
        "RegistrySource",
        "SignedAttestations",
        "SignedExceptions",
        "StaticCounters",
        "StaticGateConfig",
        "sign_fact",
        "sign_spend",
    ),
    "kcp_opa.context.counting": ("StoreCounters",),
    "kcp_opa.core.errors": (
        "ActionRejectedError",
        "AnalysisError",
        "BundleError",
        "BundleProvenanceError",
        "BundleSignatureError",
        "CompileError",
        "EngineLoadError",
        "EvidenceRejectedError",
        "ExecutionError",
        "KcpOpaError",
        "KeyringError",
        "LedgerError",
        "MalformedDocumentError",
        "QueryError",
        "ReceiptIssueError",
        "ReceiptVerificationError",
        "SourceError",
        "SourceUnreadableError",
        "StoreUnavailableError",
        "UnitNotFoundError",
        "ValidationFailedError",
    ),
    "kcp_opa.core.signing": (
        "Ed25519Key",
        "HmacKey",
        "Keyring",
        "Pkcs11Key",
        "Signer",
        "Verifier",
        "generate_ed25519",
        "hmac_key",
        "load_keyring",
        "load_signing_key",
    ),
    "kcp_opa.decide.action": ("action_hash", "check_action", "parse_action"),
    "kcp_opa.decide.checked": ("CheckedAction",),
    "kcp_opa.decide.follow": ("BundleFollower", "DirectorySource", "FileSource", "HttpSource"),
    "kcp_opa.decide.gate": ("ActiveBundle", "DecisionInput", "Gate", "build_input"),
    "kcp_opa.decide.gateconfig": ("GateConfig",),
    "kcp_opa.declare.diagnostics": ("Diagnostic", "Report", "Severity"),
    "kcp_opa.declare.effective": ("EffectiveUnit", "Sourced", "effective_unit", "effective_units"),
    "kcp_opa.declare.exceptionfile": ("ExceptionsFile", "GrantedException", "load_exceptions", "sign_exception"),
    "kcp_opa.declare.manifest": ("Manifest", "load_manifest", "validate_manifest"),
    "kcp_opa.declare.matrix": ("DelegationMatrix", "load_matrix", "validate_matrix"),
    "kcp_opa.execute.executor": ("ExecutionResult", "Executor"),
    "kcp_opa.models.decision": (
        "AuthorizationStatus",
        "Decision",
        "Outcome",
        "PolicyVerdict",
        "Reason",
        "RiskLevel",
        "RoutingState",
        "Violation",
    ),
    "kcp_opa.stores": (
        "ChallengeStore",
        "CounterStore",
        "DecisionStore",
        "ExecutionRecord",
        "ExecutionStore",
        "ExecutorStore",
        "HandoffStore",
        "LedgerStore",
        "NonceStore",
    ),
    "kcp_opa.stores.sqlite": ("SQLiteCounterStore", "SQLiteStore"),
    "kcp_opa.trail.checkpoint": ("Checkpoint",),
    "kcp_opa.trail.ledger": ("AuditLedger", "verify_ledger"),
    "kcp_opa.trail.locations": ("open_ledger",),
    "kcp_opa.trail.record": ("LedgerEntry",),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_HOME, "__version__"])


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'kcp_opa' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


if TYPE_CHECKING:
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
    from kcp_opa.compile.compiler import CompileOptions, CompileResult, compile_bundle
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
    from kcp_opa.decide.action import action_hash, check_action, parse_action
    from kcp_opa.decide.checked import CheckedAction
    from kcp_opa.decide.follow import BundleFollower, DirectorySource, FileSource, HttpSource
    from kcp_opa.decide.gate import ActiveBundle, DecisionInput, Gate, build_input
    from kcp_opa.decide.gateconfig import GateConfig
    from kcp_opa.declare.diagnostics import Diagnostic, Report, Severity
    from kcp_opa.declare.effective import EffectiveUnit, Sourced, effective_unit, effective_units
    from kcp_opa.declare.exceptionfile import ExceptionsFile, GrantedException, load_exceptions, sign_exception
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
