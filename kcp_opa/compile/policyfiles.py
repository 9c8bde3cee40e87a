"""The Rego side of a bundle: which modules ship, their packages, and what their METADATA
declares (entrypoints, evaluator ids and versions) for the bundle's .manifest."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kcp_opa.core.errors import CompileError
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.declare.waivers import metadata_blocks

POLICY_ROOT = "kcp"
_PACKAGE = re.compile(r"^package\s+([A-Za-z_][\w.]*)\s*$", re.MULTILINE)
_RULE_HEAD = re.compile(r"^(?:default\s+)?([A-Za-z_]\w*)\b")


@dataclass(frozen=True)
class PolicyModule:
    path: str  # relative to the policies directory, "/"-separated
    source: str
    package: str
    sha256: str
    entrypoints: tuple[str, ...] = ()
    evaluators: dict[str, str] = field(default_factory=dict)


def default_policies() -> Path:
    """``./policies`` when the current directory has one (the repository, a fork of the policies),
    else the policies shipped inside the installed package, so ``compile`` works anywhere."""
    local = Path("policies")
    if local.is_dir():
        return local
    return Path(__file__).resolve().parent.parent / "policies"


def collect_policies(directory: Path) -> list[PolicyModule]:
    """Every ``*.rego`` under ``directory`` except tests, in a fixed order."""
    if not directory.is_dir():
        raise CompileError(f"{directory}: policies directory not found")
    modules = [
        _read_module(directory, path)
        for path in sorted(directory.rglob("*.rego"))
        if not path.name.endswith("_test.rego") and path.is_file()
    ]
    if not modules:
        raise CompileError(f"{directory}: no .rego modules (tests excluded) to compile")
    return modules


def policy_version(directory: Path, override: str | None) -> str:
    if override:
        return override
    version_file = directory / "VERSION"
    try:
        version = version_file.read_text(encoding="utf-8").strip()
    except OSError:
        raise CompileError(
            f"{version_file}: missing; write the policy version there or pass --policy-version"
        ) from None
    if not version:
        raise CompileError(f"{version_file}: empty; write the policy version (e.g. 1.0.0)")
    return version


def _read_module(directory: Path, path: Path) -> PolicyModule:
    rel = path.relative_to(directory).as_posix()
    raw = path.read_bytes()
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CompileError(f"{rel}: not UTF-8") from None
    match = _PACKAGE.search(source)
    if match is None:
        raise CompileError(f"{rel}: no package declaration")
    package = match.group(1)
    if package.split(".")[0] != POLICY_ROOT:
        raise CompileError(
            f"{rel}: package {package} is outside the policy root {POLICY_ROOT!r}; "
            f"kcp-opa bundles own data.{POLICY_ROOT} (policies) and data.kcp_data (compiled data)"
        )
    entrypoints: list[str] = []
    evaluators: dict[str, str] = {}
    for line, rule, annotation in _annotations(source, rel):
        target = package.replace(".", "/") + (f"/{rule}" if rule else "")
        if annotation.get("entrypoint") is True:
            entrypoints.append(target)
        custom = annotation.get("custom") or {}
        if isinstance(custom, dict) and "evaluator_id" in custom:
            ev_id, ev_version = custom.get("evaluator_id"), custom.get("evaluator_version")
            if not isinstance(ev_id, str) or not isinstance(ev_version, str | int | float):
                raise CompileError(f"{rel}:{line}: METADATA custom.evaluator_id needs a string evaluator_version")
            evaluators[ev_id] = str(ev_version)
    return PolicyModule(rel, source, package, hashlib.sha256(raw).hexdigest(), tuple(entrypoints), evaluators)


def _annotations(source: str, rel: str) -> Iterator[tuple[int, str | None, JsonDict]]:
    """Yield (line, rule name or None for package scope, parsed METADATA) for each block."""
    lines = source.splitlines()
    for start, parsed, end in metadata_blocks(source):
        if isinstance(parsed, yaml.YAMLError):
            raise CompileError(f"{rel}:{start}: METADATA is not YAML ({str(parsed).splitlines()[0]})")
        annotation = parsed or {}
        if not isinstance(annotation, dict):
            raise CompileError(f"{rel}:{start}: METADATA must be a YAML mapping")
        following = lines[end].strip() if end < len(lines) else ""
        if following.startswith("package ") or annotation.get("scope") in ("package", "subpackages"):
            yield start, None, annotation
        else:
            head = _RULE_HEAD.match(following)
            yield start, head.group(1) if head else None, annotation
