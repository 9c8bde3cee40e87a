"""``kcp-opa compile``: validated declarations + Rego modules -> one deterministic OPA bundle."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kcp_opa.compile.bundle import (
    BundleFile,
    content_revision,
    is_content_revision,
    tarball_bytes,
    write_atomically,
)
from kcp_opa.compile.datadoc import DATA_ROOT, build_data
from kcp_opa.compile.decisionplan import PLAN_MOUNT, build_plan
from kcp_opa.compile.evaluatorgen import EVALUATORS_DIR
from kcp_opa.compile.evaluatorgen import stale as union_stale
from kcp_opa.compile.policyfiles import POLICY_ROOT, PolicyModule, collect_policies, policy_version
from kcp_opa.compile.resolution import refuse_unresolved
from kcp_opa.compile.signatures import SIGNATURES_NAME, signatures_file
from kcp_opa.core.bulk import collector_paused
from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.errors import CompileError, KcpOpaError, ValidationFailedError
from kcp_opa.core.jsonread import JsonDict, JsonObject
from kcp_opa.core.keys import Signer
from kcp_opa.core.version import __version__
from kcp_opa.declare.declstrings import check_data_strings
from kcp_opa.declare.diagnostics import Diagnostic
from kcp_opa.declare.integrity import declared as integrity_declared
from kcp_opa.declare.integrity import verify_manifest
from kcp_opa.declare.manifest import Manifest, validate_manifest
from kcp_opa.declare.matrix import DelegationMatrix, validate_matrix
from kcp_opa.declare.taskfields import refuse_unlisted_task_types
from kcp_opa.declare.trust import validate_trust
from kcp_opa.declare.unenforced import Acknowledged, UnenforcedError, finding_name, settle, unused
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES, load_yaml, read_bounded

log = structlog.get_logger(__name__)

BUNDLE_FORMAT = 1
ROOTS = (POLICY_ROOT, DATA_ROOT)


@dataclass(frozen=True)
class CompileResult:
    output: Path
    revision: str
    sha256: str
    size: int
    unit_count: int
    cell_count: int
    module_count: int
    policy_version: str
    manifest: JsonDict
    warnings: tuple[Diagnostic, ...]
    unenforced: tuple[Acknowledged, ...] = ()

    def to_dict(self) -> JsonDict:
        return {
            "output": str(self.output),
            "revision": self.revision,
            "sha256": self.sha256,
            "size": self.size,
            "unit_count": self.unit_count,
            "cell_count": self.cell_count,
            "module_count": self.module_count,
            "policy_version": self.policy_version,
            "warnings": [w.to_dict() for w in self.warnings],
            "unenforced": [a.to_dict() for a in self.unenforced],
        }


def default_output(
    manifest_paths: Sequence[Path], bundles_dir: Path = Path("bundles"), *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Path:
    """``bundles/<project>.tar.gz``, named after what the manifests declare (their ``project``
    ids, joined with ``+`` for several), not the folder they sit in: two deployments kept in
    folders of the same name must not overwrite each other's bundle. A manifest that cannot be
    read names nothing; compile reports it."""
    projects: list[str] = []
    for path in manifest_paths:
        try:
            project = load_yaml(path, max_bytes=max_bytes).data.get("project")
        except (KcpOpaError, AttributeError):
            project = None
        if isinstance(project, str) and project not in projects:
            projects.append(project)
    stem = "+".join(sorted(projects)) if projects else "bundle"
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "-", stem).strip("-.") or "bundle"
    return bundles_dir / f"{safe}.tar.gz"


def _engine_check(candidate: Path) -> None:
    from kcp_opa.compile.enginecheck import check_bundle_in_child

    check_bundle_in_child(candidate)


@dataclass(frozen=True)
class CompileOptions:
    """How ``compile_bundle`` compiles, besides what (``kcp-opa compile``'s options): one value a
    caller builds once and passes, rather than nine keyword arguments."""

    #: The bundle revision; None: a sha256 of its content (64 hex digits are reserved for that).
    revision: str | None = None
    #: The policy version recorded instead of the policies directory's VERSION file.
    policy_version_override: str | None = None
    #: The largest YAML file read, so a declaration cannot exhaust the compiler's memory.
    max_bytes: int = DEFAULT_MAX_BYTES
    #: Plan the written bundle in a child process before it replaces ``output`` (a bundle regopy
    #: cannot load never replaces a good one).
    engine_check: bool = False
    #: A trust registry: its principals, roles and issuers' controls (never keys) go into the data.
    trust_path: Path | None = None
    #: A manifest declaring ``trust.content_integrity`` compiles only when its hash and signature
    #: verify, the signature under one of these keys (kcp_opa.declare.integrity).
    manifest_keys: Sequence[Ed25519PublicKey] = ()
    #: A Signer a public key verifies (a PEM file, an HSM, a KMS): the bundle then carries a
    #: ``.signatures.json`` in OPA's format listing every file (kcp_opa.compile.signatures).
    signing_key: Signer | None = None
    #: With ``signing_key``: extra claims and the scope written into the signature's payload.
    claims: JsonObject | None = None
    scope: str = ""


@collector_paused()  # millions of acyclic objects at 100,000 units (kcp_opa.core.bulk)
def compile_bundle(
    manifest_paths: Sequence[Path],
    matrix_path: Path,
    policies_dir: Path,
    output: Path,
    *,
    options: CompileOptions = CompileOptions(),
) -> CompileResult:
    """Validate everything, build the data document and write the bundle atomically."""
    if not manifest_paths:
        raise CompileError("no manifests given")
    manifests, warnings = _load_manifests(manifest_paths, options.max_bytes, options.manifest_keys)
    matrix, matrix_warnings = _load_matrix(matrix_path, options.max_bytes)
    warnings.extend(matrix_warnings)
    for declared in manifests:  # a by-task field list naming a task type the matrix lacks
        refuse_unlisted_task_types(declared.file, declared.data, matrix.data["task_types"], Path(matrix.file).name)
    acknowledged, refused = settle(warnings, matrix.unenforced)
    if refused:
        raise UnenforcedError(refused)
    accepted = {(a.at, a.code) for a in acknowledged}
    warnings = [w for w in warnings if (finding_name(w), w.code) not in accepted]  # recorded instead
    warnings.extend(unused(matrix.unenforced, acknowledged, matrix.file))
    modules = collect_policies(policies_dir)
    if (policies_dir / EVALUATORS_DIR).is_dir():
        # An evaluator missing from the gate's union would have its DENYs dropped: refuse.
        reason = union_stale(policies_dir)
        if reason is not None:
            raise CompileError(f"{policies_dir}: {reason}")
    version = policy_version(policies_dir, options.policy_version_override)
    trust = None
    if options.trust_path is not None:
        report = validate_trust(options.trust_path, max_bytes=options.max_bytes)
        if report.document is None:
            raise ValidationFailedError(report.file, [str(d) for d in report.errors])
        trust = report.document
    refuse_unresolved({str(policies_dir / m.path): m.source for m in modules}, matrix, trust)
    data = build_data(manifests, matrix, trust)
    check_data_strings(data)  # the backstop: no string regopy would read escaped (declstrings)
    if (policies_dir / EVALUATORS_DIR).is_dir():
        # Which evaluators each profile and action type can need: the policies' applies, run once here.
        data[PLAN_MOUNT] = build_plan({m.path: m.source for m in modules}, data, source=str(policies_dir))
    files = [BundleFile(f"{mount}/data.json", canonical_json(doc)) for mount, doc in data.items()]
    files += [BundleFile(m.path, m.source.encode("utf-8")) for m in modules]
    metadata = _metadata(manifests, matrix, modules, version, sorted(data))
    metadata["unenforced"] = [a.to_dict() for a in acknowledged]
    metadata["files"] = {f.path: hashlib.sha256(f.content).hexdigest() for f in sorted(files, key=lambda f: f.path)}
    if trust is not None:
        metadata["trust"] = {"name": trust.name, "file": Path(trust.file).name, "sha256": trust.sha256}
        metadata["sources"][f"trust/{Path(trust.file).name}"] = trust.sha256
    content = content_revision([*files, BundleFile(".metadata", canonical_json(metadata))])
    rev = options.revision or content
    if rev != content and is_content_revision(rev):
        raise CompileError(f"--revision {rev[:12]}...: 64 hex digits are reserved for the content digest")
    manifest = {
        "revision": rev,
        "roots": list(ROOTS),
        "rego_version": 1,
        "metadata": {"kcp_opa": metadata},
    }
    members = [BundleFile(".manifest", canonical_json(manifest)), *files]
    if options.signing_key is not None:
        listed = [(f.path, f.content) for f in members]
        signed = signatures_file(listed, options.signing_key, claims=options.claims, scope=options.scope)
        members.append(BundleFile(SIGNATURES_NAME, signed))
    packed = tarball_bytes(members)
    write_atomically(output, packed, verify=_engine_check if options.engine_check else None)
    result = CompileResult(
        output=output,
        revision=rev,
        sha256=hashlib.sha256(packed).hexdigest(),
        size=len(packed),
        unit_count=sum(len(m.units) for m in manifests),
        cell_count=metadata["matrix"]["cell_count"],
        module_count=len(modules),
        policy_version=version,
        manifest=manifest,
        warnings=tuple(warnings),
        unenforced=tuple(acknowledged),
    )
    log.info(
        "bundle.compiled",
        output=str(output),
        revision=rev,
        units=result.unit_count,
        bytes=result.size,
    )
    return result


def _load_manifests(
    paths: Sequence[Path], max_bytes: int, keys: Sequence[Ed25519PublicKey]
) -> tuple[list[Manifest], list[Diagnostic]]:
    manifests: list[Manifest] = []
    warnings: list[Diagnostic] = []
    owners: dict[str, str] = {}
    for path in paths:
        report = validate_manifest(path, max_bytes=max_bytes)
        warnings.extend(report.warnings)
        if report.document is None:
            raise ValidationFailedError(report.file, [str(d) for d in report.errors])
        manifest = report.document
        _verify_integrity(path, manifest, keys, max_bytes)
        if manifest.project in owners:
            raise CompileError(
                f"project {manifest.project!r} is declared by both {owners[manifest.project]} and {report.file}; "
                "units are addressed by (project, unit id), so each project may appear once"
            )
        owners[manifest.project] = report.file
        manifests.append(manifest)
    return manifests, warnings


def _verify_integrity(path: Path, manifest: Manifest, keys: Sequence[Ed25519PublicKey], max_bytes: int) -> None:
    if integrity_declared(manifest.data) is None and not keys:
        return  # with keys, a manifest that declares nothing is refused by verify_manifest
    # The bytes verified must be the bytes validated: re-read, and refuse a file that changed.
    raw = read_bounded(path, manifest.file, max_bytes)
    if not hmac.compare_digest(hashlib.sha256(raw).hexdigest(), manifest.sha256):
        raise CompileError(f"{manifest.file} changed while it was being compiled")
    verify_manifest(path, raw, manifest.data, keys)


def _load_matrix(path: Path, max_bytes: int) -> tuple[DelegationMatrix, list[Diagnostic]]:
    report = validate_matrix(path, max_bytes=max_bytes)
    if report.document is None:
        raise ValidationFailedError(report.file, [str(d) for d in report.errors])
    return report.document, list(report.warnings)


def _metadata(
    manifests: Sequence[Manifest],
    matrix: DelegationMatrix,
    modules: Sequence[PolicyModule],
    version: str,
    data_paths: Sequence[str],
) -> dict[str, Any]:
    evaluators: dict[str, str] = {}
    for module in modules:
        for ev_id, ev_version in module.evaluators.items():
            if evaluators.get(ev_id, ev_version) != ev_version:
                raise CompileError(
                    f"{module.path}: evaluator {ev_id!r} version {ev_version} conflicts with {evaluators[ev_id]}"
                )
            evaluators[ev_id] = ev_version
    sources = {f"manifests/{Path(m.file).name}": m.sha256 for m in manifests}
    sources[f"matrix/{Path(matrix.file).name}"] = matrix.sha256
    sources.update({f"policies/{m.path}": m.sha256 for m in modules})
    return {
        "bundle_format": BUNDLE_FORMAT,
        "compiler": f"kcp-opa {__version__}",
        "policy_version": version,
        "manifests": [
            {
                "project": m.project,
                "version": m.version,
                "kcp_version": m.kcp_version,
                "file": Path(m.file).name,
                "sha256": m.sha256,
                "unit_count": len(m.units),
            }
            for m in manifests
        ],
        "matrix": {
            "name": matrix.name,
            "version": matrix.version,
            "file": Path(matrix.file).name,
            "sha256": matrix.sha256,
            "cell_count": sum(1 for _ in matrix.cells()),
        },
        "evaluators": dict(sorted(evaluators.items())),
        "entrypoints": sorted(e for m in modules for e in m.entrypoints),
        "packages": sorted({m.package for m in modules}),
        "data_paths": list(data_paths),
        "sources": dict(sorted(sources.items())),
    }
