"""A policy overlay: a deployment's own evaluators beside the shipped policies, without a copy.

An overlay directory holds new evaluator modules (``package kcp.evaluators.<name>``, with the
METADATA docs/extending.md describes) and their tests. :func:`overlaid` lays the base tree and
the overlay out together in a temporary directory and generates the gate's evaluator union for
both, so ``compile``, ``test`` and ``check`` see one policies tree.

An overlay only adds. A module in a package the base tree already holds, or in any ``kcp.``
package other than a new evaluator (the gate, the controls, the library), is refused: an overlay
could otherwise add rules to the gate's own packages and change what every evaluator decides.
The merged tree's version is the base's with the overlay's digest (``0.1.0+overlay.3f2a...``), so
a bundle names the overlay it was built with.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kcp_opa.compile.evaluatorgen import write_union
from kcp_opa.compile.policyfiles import collect_policies, policy_version
from kcp_opa.core.errors import CompileError
from kcp_opa.declare.waivers import declared

#: A module's first statement, as an overlay must write it: Rego requires the package first, so
#: the first line that is neither blank nor a comment is it. Anything else (a bracketed path, a
#: package line in a string further down) is refused rather than guessed at.
_FIRST_STATEMENT = re.compile(r"^package[ \t]+([A-Za-z_][\w.]*)[ \t]*(?:#.*)?$")
_EVALUATOR = re.compile(r"^kcp\.evaluators\.([a-z][a-z0-9_]*)$")
_CODE = re.compile(r'"code"\s*:\s*"([^"]+)"')


@dataclass(frozen=True)
class OverlayModule:
    """One overlay file: where it came from and where it sits in the merged tree."""

    source: Path
    target: str  # path inside the merged tree, "/"-separated


def plan_overlay(base: Path, overlay: Path) -> list[OverlayModule]:
    """Where each overlay module goes, refusing any that would change what the base tree holds."""
    if not overlay.is_dir():
        raise CompileError(f"{overlay}: overlay directory not found")
    files = sorted(p for p in overlay.rglob("*.rego") if p.is_file())
    if not files:
        raise CompileError(f"{overlay}: no .rego modules in the overlay")
    base_modules = collect_policies(base)
    shipped = {m.package for m in base_modules}
    shipped_codes = {code for m in base_modules for code in _CODE.findall(m.source)}
    planned: dict[str, OverlayModule] = {}
    for path in files:
        if path.is_symlink():
            raise CompileError(f"{path}: a symlink; an overlay holds its modules as plain files")
        source, package = _read(path)
        test = path.name.endswith("_test.rego")
        if test and not package.endswith("_test"):
            raise CompileError(f"{path}: a test module's package ends in _test (package {package})")
        found = _EVALUATOR.match(package.removesuffix("_test") if test else package)
        if found is None:
            raise CompileError(
                f"{path}: package {package}: an overlay adds evaluators (package kcp.evaluators.<name>) and their "
                "tests; it cannot add to the gate, the controls or the library"
            )
        if package.removesuffix("_test") in shipped:
            raise CompileError(
                f"{path}: package {package} is a shipped evaluator's; an overlay adds new ones "
                "(rename the package, or change the shipped policies themselves)"
            )
        if not test:
            _refuse_weakening(path, source, shipped_codes)
        target = f"kcp/evaluators/{path.name}"
        if (base / target).exists() or target in planned:
            raise CompileError(f"{path}: {target} already exists in the policies; name the file after its package")
        planned[target] = OverlayModule(path, target)
    return list(planned.values())


def overlay_digest(modules: list[OverlayModule]) -> str:
    """sha256 over the overlay's paths and bytes, in order."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.target.encode("utf-8") + b"\0" + module.source.read_bytes() + b"\0")
    return digest.hexdigest()


@contextlib.contextmanager
def overlaid(base: Path, overlay: Path | None) -> Iterator[Path]:
    """BASE itself without an overlay; else a temporary tree of BASE plus OVERLAY (removed after)."""
    if overlay is None:
        yield base
        return
    modules = plan_overlay(base, overlay)
    version = policy_version(base, None)
    with tempfile.TemporaryDirectory(prefix="kcp-opa-overlay-") as scratch:
        tree = Path(scratch) / "policies"
        shutil.copytree(base, tree, ignore=shutil.ignore_patterns("mutation-score.json"))
        for module in modules:
            shutil.copyfile(module.source, tree / module.target)
        (tree / "VERSION").write_text(f"{version}+overlay.{overlay_digest(modules)[:12]}\n", encoding="utf-8")
        write_union(tree)
        yield tree


def overlay_targets(tree: Path, overlay: Path) -> list[Path]:
    """The overlay's modules as they sit in the merged TREE (placed by :func:`plan_overlay`):
    what `kcp-opa test --overlay` selects, so only the overlay's own tests run."""
    return [tree / "kcp" / "evaluators" / p.name for p in sorted(overlay.rglob("*.rego")) if p.is_file()]


def _refuse_weakening(path: Path, source: str, shipped_codes: set[str]) -> None:
    """What an added evaluator could use to loosen a shipped decision: waiving a code the shipped
    policies emit (``custom.waivable``), or naming who approves (``details.approver_role``, which
    replaces the matrix's approver)."""
    for waivable in declared({path.name: source}):
        if waivable.code in shipped_codes or waivable.code not in _CODE.findall(source):
            raise CompileError(
                f"{path}:{waivable.line}: waivable {waivable.code}: an overlay may mark waivable only codes its own "
                "findings emit, never a shipped one"
            )
    if "approver_role" in source:
        raise CompileError(
            f"{path}: names an approver_role; who approves is the matrix's (parameters.approver_roles), "
            "never an overlay's"
        )


def _read(path: Path) -> tuple[str, str]:
    """The module's text and its package, from its first statement."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompileError(f"{path}: cannot read the overlay module: {exc}") from None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        found = _FIRST_STATEMENT.match(stripped)
        if found is None:
            raise CompileError(f"{path}: the first statement must be `package kcp.evaluators.<name>`: {stripped[:80]}")
        return text, found.group(1)
    raise CompileError(f"{path}: no package line")
