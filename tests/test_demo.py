"""`make demo` (examples/demo.py) prints a screen, one line a step, and logs every command's output.

The whole demo runs as `make demo` runs it (a real process, the reference deployments, a bundle
key generated here), in a scratch directory so the checkout's audit/ and bundles/ are untouched;
a failing step shows its tail and exits 1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

DEMO = REPO / "examples" / "demo.py"


def _scratch(tmp_path: Path) -> Path:
    """A working directory that sees the checkout's fixtures, policies and tests, with a bundle key."""
    for name in ("fixtures", "policies", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    key = tmp_path / ".demo-keys" / "bundle-signing.pem"
    made = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "bundle", "keygen", str(key)], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    return key


def _demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, str(DEMO), "--signing-key", ".demo-keys/bundle-signing.pem", *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=900)


def _blocks(log: str) -> list[tuple[str, str, int]]:
    """(command, output, exit code) for each command the log holds."""
    found = re.findall(r"^\$ ([^\n]+)\n(.*?)^\[exit (-?\d+)\]$", log, flags=re.MULTILINE | re.DOTALL)
    return [(command, output, int(code)) for command, output, code in found]


@pytest.mark.slow
def test_the_demo_fits_a_screen_and_its_log_holds_every_commands_whole_output(tmp_path: Path) -> None:
    _scratch(tmp_path)
    done = _demo(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    screen = done.stdout.splitlines()
    assert len(screen) <= 30, done.stdout
    assert screen[-1].endswith("every command and its output: audit/demo.log")
    shown = {line.split()[1] for line in screen[:-1]}
    assert {"validate", "explain", "compile", "inspect", "decide", "decide_demo.py", "audit", "prove", "diff"} <= shown
    assert re.search(
        r"^10 decide +HUMAN_APPROVAL risk HIGH, 5 controls missing \(audit/demo.jsonl\)", done.stdout, re.M
    )

    log = (tmp_path / "audit" / "demo.log").read_text("utf-8")
    blocks = _blocks(log)
    commands = [command for command, _, _ in blocks]
    deployments = sorted(p.name for p in (REPO / "fixtures" / "deployments").iterdir() if p.is_dir())
    # each step's commands, every one exited 0: two per deployment (compile, bundle verify), two for the case
    assert len(blocks) == len(screen) - 1 + len(deployments) + 1
    assert all(code == 0 for _, _, code in blocks)
    assert sum(c.startswith("kcp-opa compile ") for c in commands) == len(deployments)
    decided = next(output for command, output, _ in blocks if command.startswith("kcp-opa decide "))
    assert json.loads(decided)["decision"] == "HUMAN_APPROVAL"  # the whole JSON document, not a summary
    validated = next(output for command, output, _ in blocks if command.startswith("kcp-opa validate "))
    assert validated.count(": valid (") + validated.count(": valid\n") >= 13 and "13 file(s): 13 valid" in validated
    proved = next(output for command, output, _ in blocks if command.startswith("kcp-opa prove "))
    assert "invariants:" in proved and "states:" in proved
    assert len(log.splitlines()) > 10 * len(screen)  # the details went to the log, not the screen
    assert (tmp_path / "audit" / "case" / "case.json").exists() and (tmp_path / "audit" / "report.html").exists()


def test_a_failing_step_shows_its_tail_and_exits_1(tmp_path: Path) -> None:
    _scratch(tmp_path)
    done = _demo(tmp_path, "--only", "validate", "--trust", "fixtures/trust/no-such-registry.yaml")
    assert done.returncode == 1, done.stdout
    screen = done.stdout.splitlines()
    assert screen[0].startswith(" 1 validate") and "FAILED" in screen[0]
    assert any("no-such-registry.yaml" in line for line in screen[1:-1])  # the output's tail, on the screen
    assert screen[-1] == "every command and its output: audit/demo.log"
    log = (tmp_path / "audit" / "demo.log").read_text("utf-8")
    ((command, output, code),) = _blocks(log)
    assert command.startswith("kcp-opa validate ") and code != 0 and "no-such-registry.yaml" in output
    assert "# step validate FAILED" in log


def test_an_unknown_step_is_named_with_the_steps_there_are(tmp_path: Path) -> None:
    _scratch(tmp_path)
    done = _demo(tmp_path, "--only", "validate,nope")
    assert done.returncode == 2 and "no step nope; the steps: validate, explain, compile budget" in done.stderr
