"""The policies ship with the package: compile works outside the repository, --policies still
overrides, and the wheel carries every policy file (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import POLICIES, REPO, run_cli
from deploykit import HR_LEAVE as HR


def test_compile_works_outside_the_repository_and_policies_still_overrides(tmp_path: Path) -> None:
    args = ["compile", str(HR / "knowledge.yaml"), "--matrix", str(HR / "matrix.yaml"), "--no-engine-check"]
    shipped = run_cli(*args, "-o", "shipped.tar.gz", "--format", "json", cwd=tmp_path)
    assert shipped.returncode == 0, shipped.stderr
    explicit = run_cli(*args, "-o", "explicit.tar.gz", "--policies", str(POLICIES), "--format", "json", cwd=tmp_path)
    assert explicit.returncode == 0, explicit.stderr
    assert json.loads(shipped.stdout)["sha256"] == json.loads(explicit.stdout)["sha256"]
    (tmp_path / "empty").mkdir()
    override = run_cli(*args, "-o", "x.tar.gz", "--policies", "empty", cwd=tmp_path)
    assert override.returncode != 0 and "empty" in override.stderr, override.stderr


def test_the_wheel_ships_every_policy_file() -> None:
    # The package's policies are the repository's (a symlink), and package-data takes all of them.
    shipped = REPO / "kcp_opa" / "policies"
    assert shipped.resolve() == POLICIES.resolve()
    text = (REPO / "pyproject.toml").read_text()
    assert '"policies/VERSION", "policies/**/*.rego"' in text
