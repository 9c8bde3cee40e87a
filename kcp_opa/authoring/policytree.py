"""Which ``.rego`` files a run loads: a directory, a file, or a sub-path of a policies tree.

A policies tree is the directory holding ``VERSION``. Modules are keyed by their path inside the
directory given (as in a compiled bundle), so tests, bundles and coverage name files alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def load_modules(paths: Sequence[str | Path]) -> dict[str, str]:
    """Every ``.rego`` file under ``paths``, keyed by its path inside the directory given (as in
    a compiled bundle, so test and bundle coverage name files alike)."""
    modules: dict[str, str] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        files = sorted(path.rglob("*.rego")) if path.is_dir() else [path]
        for file in files:
            name = file.relative_to(path).as_posix() if path.is_dir() else file.name
            modules[name] = file.read_text(encoding="utf-8")
    return modules


def policy_root(path: Path) -> Path | None:
    """The policies tree PATH lies in: the nearest directory at or above it holding VERSION."""
    here = path.resolve() if path.is_dir() else path.resolve().parent
    return next((d for d in (here, *here.parents) if (d / "VERSION").is_file()), None)


def load_selection(paths: Sequence[Path]) -> tuple[dict[str, str], Path | None]:
    """The modules to test PATHS with, and the policies root they belong to (None if none).

    A sub-path of a policies tree (``policies/kcp/evaluators/``) selects the tests under it but
    loads every policy module of the tree, named from its root as in the bundle: the tests
    import ``data.kcp.lib`` and coverage names files the same way either way.
    """
    roots = {policy_root(path) for path in paths}
    root = roots.pop() if len(roots) == 1 else None
    if root is None:
        return load_modules(paths), None
    modules = {n: src for n, src in load_modules([root]).items() if not n.endswith("_test.rego")}
    for path in paths:
        files = sorted(path.rglob("*_test.rego")) if path.is_dir() else [path]
        for file in files:
            if file.name.endswith("_test.rego"):
                modules[file.resolve().relative_to(root).as_posix()] = file.read_text(encoding="utf-8")
    return modules, root
