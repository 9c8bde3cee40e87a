"""Commands over declarations and bundles: validate, explain, compile, inspect."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kcp_opa.cli import render
from kcp_opa.cli.bundlekeys import load_verified, signing_of, signing_options, verification_options
from kcp_opa.cli.options import ANY_PATH, FILE, FORMAT, MAX_BYTES, dir_option, output_option
from kcp_opa.cli.output import EXIT_INVALID, EXIT_USAGE, as_json, console
from kcp_opa.compile.compiler import CompileOptions, compile_bundle, default_output
from kcp_opa.compile.overlay import overlaid
from kcp_opa.compile.policyfiles import default_policies
from kcp_opa.core.errors import KcpOpaError, ManifestIntegrityError, ValidationFailedError
from kcp_opa.core.files import read_regular
from kcp_opa.declare.diagnostics import UNENFORCED_CODES, Diagnostic, Report, Severity
from kcp_opa.declare.effective import effective_unit
from kcp_opa.declare.exceptionfile import (
    EXCEPTIONS_KIND_NAME,
    ExceptionsFile,
    unknown_task_types,
    validate_exceptions,
    verify_exceptions,
)
from kcp_opa.declare.integrity import declared as integrity_declared
from kcp_opa.declare.integrity import load_manifest_key, verify_manifest
from kcp_opa.declare.manifest import Manifest, validate_manifest
from kcp_opa.declare.matrix import DelegationMatrix, load_matrix, validate_matrix
from kcp_opa.declare.matrixcoverage import coverage_gaps, unreachable_cells
from kcp_opa.declare.parameters import DEFAULT_MAX_LIFETIME_SECONDS
from kcp_opa.declare.taskfields import unlisted_task_types
from kcp_opa.declare.trust import TRUST_KIND_NAME, TrustRegistry, validate_trust
from kcp_opa.declare.unenforced import as_acknowledged, as_refusal, finding_name
from kcp_opa.declare.yamlsource import read_bounded

MATRIX_KIND = "kcp-opa/delegation-matrix"


MANIFEST_KEY = click.option(
    "--manifest-key",
    "manifest_keys",
    multiple=True,
    type=FILE,
    help="An Ed25519 public key (PEM or base64) that may sign manifests declaring "
    "trust.content_integrity.signing (repeatable).",
)


@click.command()
@click.argument("files", nargs=-1, required=True, type=ANY_PATH)
@FORMAT
@MAX_BYTES
@click.option(
    "--strict",
    is_flag=True,
    help="Report every warning as an error (exit 1), as compile refuses what the gate would not enforce; "
    "notes (advisory blocks, acknowledged gaps) stay notes.",
)
@MANIFEST_KEY
def validate(
    files: Sequence[Path], fmt: str | None, max_bytes: int, strict: bool, manifest_keys: Sequence[Path]
) -> None:
    """Validate KCP manifests (and delegation matrices, trust registries and exceptions, recognised by their `kind`).

    Unknown keys in a policy-bearing block (`restrictons:`) and values no rule reads are
    warnings here, as KCP asks, each with a did-you-mean; `compile` refuses them unless the
    matrix's `unenforced` list acknowledges them (then they are notes). Given a manifest with its
    matrix, every data category and sensitivity the manifest declares that no matrix row covers
    is a warning (matrix_not_covered: each action on it would be denied), and so is every matrix
    cell no action can meet (matrix_cell_unreachable). --strict makes warnings errors. Given
    exceptions with a trust registry (and a matrix), each exception's signature, issuer,
    grantor and lifetime are checked too; given exceptions with a matrix, an exception scoped to a
    task type the matrix lacks is an error (exception_task_type_unknown).

    Every finding names the file, the YAML path and the line. A declared manifest hash is
    checked, and a declared signature too when --manifest-key is given. Exit 0 when all are
    valid, 1 when one is invalid, 2 when a file cannot be read.
    """
    keys = [load_manifest_key(k) for k in manifest_keys] if manifest_keys else None
    reports: list[Report[Any]] = []
    unreadable: list[str] = []
    for path in files:
        try:
            reports.append(_with_integrity(path, _validate_one(path, max_bytes), keys, max_bytes))
        except KcpOpaError as exc:
            unreadable.append(str(exc))
    reports = _with_coverage(reports)
    reports = _with_trust(reports)
    reports = _with_task_types(reports)
    if strict:
        reports = [_strict(r) for r in reports]
    if as_json(fmt):
        payload = [r.to_dict() for r in reports]
        render.print_json(payload[0] if len(files) == 1 and payload else payload)
    else:
        render.reports(console(), reports)
    for message in unreadable:
        click.echo(f"kcp-opa: error: {message}", err=True)
    if unreadable:
        sys.exit(EXIT_USAGE)
    if any(not r.valid for r in reports):
        sys.exit(EXIT_INVALID)


def _strict(report: Report[Any]) -> Report[Any]:
    """Every warning reported as the error compile would make of it; notes stay notes."""
    if not report.warnings:
        return report
    promoted = tuple(
        (as_refusal(d) if d.code in UNENFORCED_CODES else replace(d, severity=Severity.ERROR))
        if d.severity is Severity.WARNING
        else d
        for d in report.diagnostics
    )
    return replace(report, diagnostics=promoted, document=None)


def _with_coverage(reports: list[Report[Any]]) -> list[Report[Any]]:
    """Given manifests and matrices together: each manifest also reports what no matrix row
    covers, the by-task field lists naming a task type no matrix lists (an error), and which of
    its unenforced findings the matrices acknowledge; each matrix, the cells no action can meet."""
    matrices = [r.document for r in reports if isinstance(r.document, DelegationMatrix)]
    if not matrices:
        return reports
    manifests = [r.document for r in reports if isinstance(r.document, Manifest)]
    acknowledged = {at: reason for m in matrices for at, reason in m.unenforced.items()}
    out: list[Report[Any]] = []
    for r in reports:
        if isinstance(r.document, Manifest):
            own = tuple(_acknowledge(d, acknowledged) for d in r.diagnostics)
            listed = {t for m in matrices for t in m.data["task_types"]}
            names = ", ".join(Path(m.file).name for m in matrices)
            unlisted = unlisted_task_types(r.document.file, r.document.data, listed, names)
            gaps = (*coverage_gaps(r.document, matrices), *unlisted)
            r = replace(r, diagnostics=(*own, *gaps))
            if any(d.severity is Severity.ERROR for d in gaps):
                r = replace(r, document=None)
        elif isinstance(r.document, DelegationMatrix) and manifests:
            r = replace(r, diagnostics=(*r.diagnostics, *unreachable_cells(manifests, r.document)))
        out.append(r)
    return out


def _acknowledge(diagnostic: Diagnostic, acknowledged: dict[str, str]) -> Diagnostic:
    reason = acknowledged.get(finding_name(diagnostic))
    if reason is None or diagnostic.code not in UNENFORCED_CODES or diagnostic.severity is not Severity.WARNING:
        return diagnostic
    return as_acknowledged(diagnostic, reason)


def _with_trust(reports: list[Report[Any]]) -> list[Report[Any]]:
    """Given exceptions with a trust registry (and a matrix), each exception is verified too:
    its signature, issuer and grantor, and its lifetime against the matrix's maximum."""
    registries = [r.document for r in reports if isinstance(r.document, TrustRegistry)]
    if not registries:
        return reports
    matrices = [r.document for r in reports if isinstance(r.document, DelegationMatrix)]
    lifetime = DEFAULT_MAX_LIFETIME_SECONDS
    if matrices:
        lifetime = matrices[0].parameters().max_exception_lifetime_seconds
    return [
        verify_exceptions(r, registries[0], None, lifetime) if isinstance(r.document, ExceptionsFile) else r
        for r in reports
    ]


def _with_task_types(reports: list[Report[Any]]) -> list[Report[Any]]:
    """Given exceptions with a matrix: each exception's scope.task_type is one of its task types."""
    matrices = [r.document for r in reports if isinstance(r.document, DelegationMatrix)]
    if not matrices:
        return reports
    known = {t for m in matrices for t in m.data["task_types"]}
    names = ", ".join(m.file for m in matrices)
    return [unknown_task_types(r, known, names) if isinstance(r.document, ExceptionsFile) else r for r in reports]


def _validate_one(path: Path, max_bytes: int) -> Report[Any]:
    head = _head(path)
    if TRUST_KIND_NAME.encode() in head:
        return validate_trust(path, max_bytes=max_bytes)
    if EXCEPTIONS_KIND_NAME.encode() in head:
        return validate_exceptions(path, max_bytes=max_bytes)
    if MATRIX_KIND.encode() in head:
        return validate_matrix(path, max_bytes=max_bytes)
    return validate_manifest(path, max_bytes=max_bytes)


def _with_integrity(
    path: Path, report: Report[Any], keys: Sequence[Ed25519PublicKey] | None, max_bytes: int
) -> Report[Any]:
    """A valid manifest declaring content_integrity is checked against its bytes; a failure is an error."""
    manifest = report.document
    if not isinstance(manifest, Manifest) or (integrity_declared(manifest.data) is None and not keys):
        return report  # with --manifest-key an unsigned manifest is refused (verify_manifest)
    try:
        raw = read_bounded(path, manifest.file, max_bytes)
        notes = verify_manifest(path, raw, manifest.data, keys)
    except ManifestIntegrityError as exc:
        at = ("trust", "content_integrity")
        found = Diagnostic(Severity.ERROR, "content_integrity", str(exc), at, file=report.file)
        return replace(report, diagnostics=(*report.diagnostics, found), document=None)
    unverified = [n for n in notes if "not verified" in n]
    if not unverified:
        return report
    found = Diagnostic(
        Severity.WARNING, "signature_unverified", unverified[0], ("trust", "content_integrity"), file=report.file
    )
    return replace(report, diagnostics=(*report.diagnostics, found))


def _head(path: Path) -> bytes:
    try:
        return read_regular(path, 4096)[:4096]  # a FIFO: refused later with one line, never waited on
    except OSError:
        return b""


@click.command()
@click.argument("manifest", type=ANY_PATH)
@click.argument("unit")
@click.option(
    "--matrix",
    "matrix",
    type=ANY_PATH,
    help="The deployment's delegation matrix: its `unenforced` list marks which gaps it acknowledges.",
)
@FORMAT
@MAX_BYTES
def explain(manifest: Path, unit: str, matrix: Path | None, fmt: str | None, max_bytes: int) -> None:
    """Show the effective compliance, delegation, trust and freshness of UNIT, and where each
    value came from (root, unit or default).

    Below it, what the unit (or the root it inherits from) declares that the gate does not
    enforce: unknown keys and values, each acknowledged (a note, with the matrix's reason) or not
    (a warning `compile` would refuse).
    """
    report = validate_manifest(manifest, max_bytes=max_bytes)
    if report.document is None:
        raise ValidationFailedError(report.file, [str(d) for d in report.errors])
    resolved = effective_unit(report.document, unit)
    acknowledged = load_matrix(matrix, max_bytes=max_bytes).unenforced if matrix is not None else {}
    gaps = [_acknowledge(d, acknowledged) for d in _unenforced_for(report, report.document, unit)]
    if as_json(fmt):
        render.print_json(
            {
                "project": resolved.project,
                "unit": resolved.unit_id,
                "effective": resolved.to_data(),
                "sources": {name: s.source for name, s in resolved.fields.items()},
                "unenforced": [
                    {**d.to_dict(), "at": finding_name(d), "acknowledged": d.severity is Severity.NOTE} for d in gaps
                ],
            }
        )
    else:
        render.effective(console(), resolved, gaps)


def _unenforced_for(report: Report[Any], manifest: Manifest, unit_id: str) -> list[Diagnostic]:
    """The unenforced findings on the unit itself and on the root blocks it inherits."""
    index = next(i for i, u in enumerate(manifest.units) if u.get("id") == unit_id)
    return [
        d
        for d in report.diagnostics
        if d.code in UNENFORCED_CODES and (d.path[:1] != ("units",) or d.path[:2] == ("units", index))
    ]


@click.command(name="compile")
@click.argument("manifests", nargs=-1, required=True, type=ANY_PATH)
@click.option("--matrix", "matrix", required=True, type=ANY_PATH, help="The delegation matrix YAML.")
@click.option(
    "--trust",
    "trust",
    type=ANY_PATH,
    help="A trust registry YAML: its principals, roles and issuers' controls (never keys) go into the data.",
)
@dir_option(
    "--policies",
    help="Directory of .rego modules (*_test.rego files are left out of the bundle) "
    "[default: ./policies if present, else the policies shipped with kcp-opa].",
)
@dir_option(
    "--overlay",
    help="A directory of your own evaluators compiled beside the policies (never replacing one): "
    "docs/extending.md. The bundle's policy version names the overlay's digest.",
)
@output_option("Bundle path [default: bundles/<project>.tar.gz, the manifests' project ids].")
@click.option("--revision", help="Bundle revision [default: a sha256 of the bundle's content].")
@click.option("--policy-version", help="Policy version [default: the policies directory's VERSION file].")
@click.option(
    "--engine-check/--no-engine-check",
    default=True,
    show_default=True,
    help="Check in a child process that regopy can load and plan the bundle.",
)
@MANIFEST_KEY
@signing_options
@FORMAT
@MAX_BYTES
def compile_command(
    manifests: Sequence[Path],
    matrix: Path,
    trust: Path | None,
    policies: Path | None,
    overlay: Path | None,
    output: Path | None,
    revision: str | None,
    policy_version: str | None,
    engine_check: bool,
    manifest_keys: Sequence[Path],
    signing_key: str | None,
    signing_alg: str | None,
    signing_key_id: str | None,
    claims_file: Path | None,
    scope: str,
    fmt: str | None,
    max_bytes: int,
) -> None:
    """Compile MANIFESTS and a delegation matrix with the Rego policies into an OPA bundle.

    The bundle is byte-for-byte deterministic: the same inputs give the same sha256. It is
    written atomically (a failed compile, engine check included, leaves any earlier bundle at
    the output path untouched) and loads with `opa eval -b`. A manifest declaring
    trust.content_integrity compiles only when its hash and signature verify (exit 1 if not).
    """
    keys = [load_manifest_key(k) for k in manifest_keys]
    signer, claims = signing_of(signing_key, signing_alg, signing_key_id, claims_file, scope)
    target = output or default_output(manifests, max_bytes=max_bytes)
    if overlay is not None and policy_version is not None:
        raise click.BadParameter(
            "the policy version names the overlay's digest; drop --policy-version", param_hint="--overlay"
        )
    options = CompileOptions(
        revision=revision,
        policy_version_override=policy_version,
        max_bytes=max_bytes,
        engine_check=engine_check,
        trust_path=trust,
        manifest_keys=keys,
        signing_key=signer,
        claims=claims,
        scope=scope,
    )
    with overlaid(policies or default_policies(), overlay) as tree:
        result = compile_bundle(manifests, matrix, tree, target, options=options)
    if as_json(fmt):
        render.print_json(result.to_dict())
    else:
        render.compiled(console(), result)


@click.command()
@click.argument("bundle", type=FILE)
@verification_options
@FORMAT
def inspect(bundle: Path, verification_keys: Sequence[str], verification_scope: str, fmt: str | None) -> None:
    """Show what a compiled bundle contains: revision, sources, evaluators, entrypoints."""
    loaded = load_verified(bundle, verification_keys, verification_scope)
    if as_json(fmt):
        signature = None if loaded.signature is None else loaded.signature.to_dict()
        render.print_json(
            {"file": str(bundle), "sha256": loaded.sha256, "signature": signature, "manifest": loaded.manifest}
        )
    else:
        render.bundle_summary(console(), loaded.manifest, loaded.sha256, str(bundle))
