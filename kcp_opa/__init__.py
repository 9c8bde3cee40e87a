"""kcp-opa: KCP compliance declarations compiled into OPA bundles, decided in Rego.

The pipeline, one module each: manifest (validate) -> effective (merge) -> matrix -> datadoc
(Rego data) -> bundle (deterministic OPA bundle) -> decide, controls, receipts, audit (later).
"""

from __future__ import annotations

__version__ = "0.1.0"

from kcp_opa.bundle import LoadedBundle, read_bundle
from kcp_opa.compiler import CompileResult, compile_bundle
from kcp_opa.datadoc import build_data, leaf_path
from kcp_opa.diagnostics import Diagnostic, Report, Severity
from kcp_opa.effective import EffectiveUnit, Sourced, effective_unit, effective_units
from kcp_opa.errors import (
    BundleError,
    CompileError,
    KcpOpaError,
    SourceError,
    SourceUnreadableError,
    UnitNotFoundError,
    ValidationFailedError,
)
from kcp_opa.manifest import Manifest, load_manifest, validate_manifest
from kcp_opa.matrix import DelegationMatrix, load_matrix, validate_matrix

__all__ = [
    "BundleError",
    "CompileError",
    "CompileResult",
    "DelegationMatrix",
    "Diagnostic",
    "EffectiveUnit",
    "KcpOpaError",
    "LoadedBundle",
    "Manifest",
    "Report",
    "Severity",
    "SourceError",
    "SourceUnreadableError",
    "Sourced",
    "UnitNotFoundError",
    "ValidationFailedError",
    "__version__",
    "build_data",
    "compile_bundle",
    "effective_unit",
    "effective_units",
    "leaf_path",
    "load_manifest",
    "load_matrix",
    "read_bundle",
    "validate_manifest",
    "validate_matrix",
]
