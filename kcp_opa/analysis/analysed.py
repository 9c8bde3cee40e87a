"""What prove and diff analyse: a bundle (signed or not) or declarations compiled on the fly.

A signed bundle is verified as ``kcp-opa bundle verify`` verifies it (kcp_opa.compile.signatures)
when verification keys are given, and refused when it does not verify; without keys its
signature is not checked and the report says so (the analysis decides nothing that executes).
Declarations (a deployment directory or a manifest, with a matrix and a policies directory)
are compiled into a temporary bundle with the same compiler ``kcp-opa compile`` uses.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.compile.policyfiles import default_policies
from kcp_opa.compile.signatures import Verification
from kcp_opa.core.errors import AnalysisError, BundleSignatureError, KcpOpaError, ValidationFailedError


@dataclass(frozen=True)
class Analysed:
    """A loaded bundle and how it was obtained (what the report prints beside its name)."""

    bundle: LoadedBundle
    provenance: str


def load_bundle(path: Path, verification: Verification | None = None) -> Analysed:
    """PATH as a bundle: verified under VERIFICATION when given (an unsigned or failing bundle
    is then refused, a :class:`BundleSignatureError`), its signature unchecked otherwise."""
    if verification is not None:
        bundle = read_bundle(path, verification=verification)
        return Analysed(bundle, f"signature verified (key {bundle.signer})")
    try:
        return Analysed(read_bundle(path), "unsigned")
    except BundleSignatureError as exc:
        if exc.code != "key_not_configured":
            raise
    # Signed, and no key to check it with: the same checks of the content, the signature unread.
    bundle = read_bundle(path, skip_verification=True)
    return Analysed(bundle, "signed, signature NOT verified (no --verification-key)")


def compile_declarations(
    declarations: Path, matrix: Path | None, policies: Path | None, workdir: Path, name: str
) -> Analysed:
    """DECLARATIONS (a directory of knowledge*.yaml and matrix.yaml, or one manifest) with
    MATRIX and POLICIES (default: the directory's matrix.yaml, the shipped policies)."""
    if declarations.is_dir():
        manifests: Sequence[Path] = sorted(declarations.glob("knowledge*.yaml"))
        if not manifests:
            raise AnalysisError(f"{declarations}: no knowledge*.yaml manifest in this directory")
        matrix = matrix or declarations / "matrix.yaml"
    else:
        manifests = [declarations]
        matrix = matrix or declarations.parent / "matrix.yaml"
    if not matrix.is_file():
        raise AnalysisError(f"{matrix}: no delegation matrix (give it with --{name}-matrix)")
    output = workdir / f"{name}.tar.gz"
    try:
        compile_bundle(manifests, matrix, policies or default_policies(), output)
    except ValidationFailedError as exc:  # exit 2, not 1 (which says "weakens"), one line
        raise AnalysisError(f"{exc.file}: the {name} declarations do not compile: {exc}") from None
    except KcpOpaError as exc:
        raise AnalysisError(f"the {name} declarations do not compile: {exc}") from None
    sources = ", ".join(str(m) for m in manifests)
    what = f"compiled from {sources} + {matrix} + {policies or default_policies()}"
    return Analysed(read_bundle(output), what)


def resolve(
    path: Path,
    *,
    name: str,
    verification: Verification | None = None,
    matrix: Path | None = None,
    policies: Path | None = None,
    workdir: Path | None = None,
) -> Analysed:
    """PATH as a bundle file (verified under VERIFICATION when given), or as declarations to
    compile when it is a directory or a YAML manifest (or a matrix or policies are given for
    it): a signed production bundle against a pull request's declarations."""
    is_declaration = path.is_dir() or path.suffix in (".yaml", ".yml") or matrix is not None or policies is not None
    if not is_declaration:
        return load_bundle(path, verification)
    return compile_declarations(path, matrix, policies, workdir or Path(tempfile.mkdtemp(prefix="kcp-opa-")), name)
