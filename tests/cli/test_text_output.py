"""Text for people, whole: piped text is never wrapped and hashes are never cut (issue 17)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_cli
from deploykit import hr_manifest


def test_piped_text_output_is_never_wrapped(tmp_path: Path) -> None:
    proc = run_cli("validate", "--format", "text", str(hr_manifest(tmp_path)))
    warning = [line for line in proc.stdout.splitlines() if "access_not_declared" in line]
    assert len(warning) == 1 and "units[0]" in warning[0] and "declare access" in warning[0]


def test_inspect_prints_whole_hashes(finance_bundle: Path) -> None:
    sha = json.loads(run_cli("inspect", "--format", "json", str(finance_bundle)).stdout)["sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", sha)
    shown = run_cli("inspect", "--format", "text", str(finance_bundle)).stdout
    assert sha in shown and "…" not in shown
    assert re.search(rf"sha256\s+│\s+{sha}\s+│", shown)
