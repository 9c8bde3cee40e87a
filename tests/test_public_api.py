"""The public API (`kcp_opa/__init__.py`) and the command table load lazily and stay whole."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click
from conftest import REPO

import kcp_opa
from kcp_opa.cli import COMMANDS, cli


def test_every_public_name_resolves_to_the_object_its_module_defines() -> None:
    import importlib

    for module, names in kcp_opa._EXPORTS.items():
        for name in names:
            assert getattr(kcp_opa, name) is getattr(importlib.import_module(module), name), name
    assert set(kcp_opa.__all__) == {*kcp_opa._HOME, "__version__"}


def test_the_type_checkers_imports_name_exactly_the_exported_table() -> None:
    tree = ast.parse((REPO / "kcp_opa" / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    imported: dict[str, set[str]] = {}
    for node in guarded.body:
        assert isinstance(node, ast.ImportFrom) and node.module
        imported.setdefault(node.module, set()).update(a.name for a in node.names)
    assert imported == {module: set(names) for module, names in kcp_opa._EXPORTS.items()}


def test_importing_the_package_or_the_command_loads_no_stage_it_does_not_use() -> None:
    code = (
        "import sys, kcp_opa.cli; "
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('kcp_opa.') and m.count('.') >= 1}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = set(ast.literal_eval(done.stdout.strip()))
    assert not loaded & {"analysis", "audit", "authoring", "service", "decide", "authorize", "execute"}, loaded


def test_the_command_table_names_each_command_as_it_calls_itself() -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name, name
    assert cli.list_commands(ctx) == sorted(COMMANDS)


def test_a_command_whose_module_cannot_load_fails_alone_in_one_line(tmp_path: Path) -> None:
    """A broken command module: that command says so in one line (exit 2); --help and the other
    commands still work."""
    code = (
        "import sys, kcp_opa.cli as c\n"
        "def broken():\n    raise ImportError('No module named kcp_opa.cli.witness_gone')\n"
        "c.COMMANDS['witness'] = broken\n"
        "c.main(sys.argv[1:])\n"
    )
    script = tmp_path / "run.py"
    script.write_text(code, encoding="utf-8")
    listed = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=REPO)
    assert listed.returncode == 0 and "decide" in listed.stdout and "unavailable" in listed.stdout, listed.stderr
    refused = subprocess.run([sys.executable, str(script), "witness"], capture_output=True, text=True, cwd=REPO)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "unavailable here" in refused.stderr
