"""The package layout shows the pipeline, and imports only point down it.

Each stage package has a rank; a module may import its own package and any package of a lower
rank, never a higher one, and no two modules of one package import each other (directly or round
a longer cycle). The checks read every import statement (function-level ones included)
from the source, so it holds without importing anything.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "kcp_opa"

#: Lowest first: the shared leaves, the contract's models, then the pipeline, then what sits on top.
LAYERS: tuple[str, ...] = (
    "core",
    "schemas",
    "models",
    "stores",
    "declare",
    "compile",
    "trail",
    "context",
    "decide",
    "authorize",
    "execute",
    "audit",
    "authoring",
    "analysis",
    "service",
    "cli",
)
TOP = len(LAYERS)  # kcp_opa/__init__.py, __main__.py: the public API sits above all
MAX_LINES = 400


def _rank(module: str) -> int:
    """kcp_opa.decide.gate -> rank of 'decide'; the package root and its top modules rank TOP."""
    parts = module.split(".")
    if parts[0] != "kcp_opa":
        raise ValueError(module)
    if len(parts) == 1 or parts[1] not in LAYERS:
        return TOP
    return LAYERS.index(parts[1])


def _module_name(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every kcp_opa import; `from kcp_opa import x` names kcp_opa.x."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kcp_opa"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "kcp_opa":
                found += [(node.lineno, f"kcp_opa.{a.name}") for a in node.names]
            elif node.module.split(".")[0] == "kcp_opa":
                found.append((node.lineno, node.module))
    return found


def upward_imports(module: str, source: str) -> list[str]:
    """Every import in SOURCE (the text of MODULE) that points up the pipeline."""
    own = _rank(module)
    problems = []
    for line, target in _imported(ast.parse(source)):
        if target == "kcp_opa.__version__":
            problems.append(f"{module}:{line} imports the package root for its version (use kcp_opa.core.version)")
            continue
        rank = _rank(target)
        if rank > own:
            where = LAYERS[own] if own < TOP else "the API"
            problems.append(f"{module}:{line} ({where}) imports {target}, a later stage")
    return problems


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_imports_a_later_stage() -> None:
    problems = [p for path in _modules() for p in upward_imports(_module_name(path), path.read_text("utf-8"))]
    assert problems == []


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("kcp_opa.trail.entries", "from kcp_opa.decide.gate import Gate\n", True),
        ("kcp_opa.core.errors", "def f():\n    import kcp_opa.declare.manifest\n", True),
        ("kcp_opa.compile.compiler", "from kcp_opa import __version__\n", True),
        ("kcp_opa.declare.manifest", "from kcp_opa import schemas\n", False),
        ("kcp_opa.decide.gate", "from kcp_opa.trail.ledger import AuditLedger\n", False),
        ("kcp_opa.cli.decide", "from kcp_opa.decide.gate import Gate\n", False),
    ],
)
def test_the_check_catches_an_upward_import(module: str, source: str, bad: bool) -> None:
    assert bool(upward_imports(module, source)) is bad


def _module_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of its own package it imports (``from pkg import mod`` names pkg.mod)."""
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        package = module.rsplit(".", 1)[0]
        targets = set()
        for _, target in _imported(ast.parse(source)):
            if target not in sources and target.rsplit(".", 1)[0] in sources:
                target = target.rsplit(".", 1)[0]  # `from kcp_opa.x.mod import name`: names a module's member
            if target != module and target in sources and target.rsplit(".", 1)[0] == package:
                targets.add(target)
        for node in ast.walk(ast.parse(source)):  # from kcp_opa.service import tools
            if isinstance(node, ast.ImportFrom) and node.module == package and node.level == 0:
                targets |= {f"{package}.{a.name}" for a in node.names if f"{package}.{a.name}" in sources}
        graph[module] = targets - {module}
    return graph


def import_cycles(sources: dict[str, str]) -> list[list[str]]:
    """Every cycle of imports among the modules of one package (function-level imports included)."""
    graph = _module_graph(sources)
    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for target in sorted(graph.get(node, ())):
            if target == start and frozenset(path) not in seen:
                seen.add(frozenset(path))
                cycles.append([*path, start])
            elif target not in path and target > start:  # each cycle once, from its smallest module
                walk(start, target, [*path, target])

    for module in sorted(graph):
        walk(module, module, [module])
    return cycles


def test_no_import_cycle_inside_a_package() -> None:
    sources = {_module_name(path): path.read_text("utf-8") for path in _modules()}
    assert import_cycles(sources) == []


def test_the_cycle_check_catches_a_cycle() -> None:
    sources = {
        "kcp_opa.service.desk": "def open():\n    from kcp_opa.service.loading import open_service\n",
        "kcp_opa.service.loading": "from kcp_opa.service.desk import GateService\n",
        "kcp_opa.service.http": "from kcp_opa.service import ui\n",
        "kcp_opa.service.ui": "from kcp_opa.service.http import principal_of\n",
        "kcp_opa.service.tools": "from kcp_opa.service.desk import GateService\n",
        "kcp_opa.decide.gate": "from kcp_opa.service.desk import GateService\n",
    }
    assert import_cycles(sources) == [
        ["kcp_opa.service.desk", "kcp_opa.service.loading", "kcp_opa.service.desk"],
        ["kcp_opa.service.http", "kcp_opa.service.ui", "kcp_opa.service.http"],
    ]


def test_every_package_is_a_known_stage_with_a_docstring() -> None:
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert packages == sorted(LAYERS)
    for name in packages:
        assert ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text("utf-8"))), name


def test_no_module_is_a_pile() -> None:
    long = {
        str(p.relative_to(REPO)): n for p in _modules() if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_architecture_doc_lists_every_module() -> None:
    """docs/architecture.md, "Every module": each package's section names each of its modules."""
    text = (REPO / "docs" / "architecture.md").read_text("utf-8")
    sections = dict(
        (part.split("`", 1)[0], part) for part in text.split("\n### `kcp_opa.")[1:]
    )  # "service`\n\n| module | ..." -> {"service": ...}
    missing = []
    for path in _modules():
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) < 2 or path.name == "__init__.py":
            continue
        package, name = relative.parts[0], ".".join(relative.with_suffix("").parts[1:])
        if f"| `{name}` |" not in sections.get(package, ""):
            missing.append(f"kcp_opa.{package}.{name}")
    assert missing == []


#: Test directories that are not a stage: attacks (named in the README's Guarantees table), the
#: differential fuzzer, the conformance corpus, the docs-only deployments and the fixtures.
KEPT_TEST_DIRS = frozenset({"adversarial", "fuzz", "conformance", "deployments", "fixtures"})
#: A test file is named for the behaviour it pins, never for the technique that found the test.
TECHNIQUE = re.compile(
    r"^test_(mutants?|survivors?|mutmut|kills?|killing|regressions?|hypothesis|fuzzed|usability|feedback)(_|$)"
)
#: ... nor for the round of work that wrote it (``_round``, ``round2``, ``usability2``, ``_second``).
ROUND = re.compile(
    r"(^|_)round(?!_?trips?(_|$))(s|_?\d+|_(one|two|three|four|five|six|seven|eight|nine|ten))?(_|$)"
    r"|(usability|feedback|review)_?\d+(_|$)|_(second|third|fourth|fifth)(_|$)"
)


def misfiled_tests(tests: list[str], packages: set[str]) -> list[str]:
    """Test files (paths relative to tests/) named after a technique or a round of work, or in a
    directory that is neither a kept one nor a kcp_opa package (``stage`` or ``stage/sub``)."""
    bad = []
    for name in tests:
        parts = name.split("/")
        stem = parts[-1].removesuffix(".py")
        technique = TECHNIQUE.match(stem) is not None or ROUND.search(stem) is not None
        stray = len(parts) > 1 and parts[0] not in KEPT_TEST_DIRS and "/".join(parts[:-1]) not in packages
        if technique or stray:
            bad.append(name)
    return bad


def test_tests_are_filed_by_behaviour_mirroring_the_packages() -> None:
    tests_dir = REPO / "tests"
    tests = sorted(str(p.relative_to(tests_dir)) for p in tests_dir.rglob("test_*.py"))
    packages = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    assert len(tests) > 100  # the walk found the suite
    assert misfiled_tests(tests, packages) == []


def test_the_filing_check_catches_a_technique_name_a_round_name_and_a_stray_directory() -> None:
    packages = {"authorize", "stores", "stores/sqlite"}
    good = ["test_layout.py", "authorize/test_separation_of_duties.py", "stores/sqlite/test_x.py"]
    good += ["adversarial/test_ledger_attacks.py", "test_mutate.py", "authorize/test_pkcs11_signer.py"]
    good += ["test_json_round_trip.py", "test_round_trips.py", "test_surround.py", "test_ed25519.py"]
    bad = ["test_mutants_controls.py", "test_survivors_runtime.py", "authorize/test_mutants_receipts.py"]
    bad += ["misc/test_receipts.py", "authorize/extra/test_seal.py"]
    bad += ["test_usability.py", "test_usability_round_two.py", "test_usability2.py", "test_ropa_round3.py"]
    bad += ["test_round.py", "cli/test_second_round.py", "test_review_2.py", "test_receipts_second.py"]
    assert misfiled_tests(good + bad, packages) == bad


#: Lines of kcp_opa that mention `Any`: what is read from JSON is an ``object`` (or a
#: ``kcp_opa.core.jsonread.JsonObject``) until it is checked; ``Any`` is left only where a value
#: goes on unread to a caller that checks it. Lower it when you remove one; never raise it.
MAX_ANY_LINES = 139
_ANY = re.compile(r"\bAny\b")


def test_any_stays_at_the_json_boundary() -> None:
    mentions = [
        f"{p.relative_to(REPO)}:{n}"
        for p in _modules()
        for n, line in enumerate(p.read_text("utf-8").splitlines(), 1)
        if _ANY.search(line)
    ]
    assert len(mentions) <= MAX_ANY_LINES, f"{len(mentions)} lines mention Any (at most {MAX_ANY_LINES})"
