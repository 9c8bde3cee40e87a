"""`kcp-opa check policies --strict` finds nothing on the shipped policies, as CI runs it.

A file of its own so that a parallel run does not queue it behind the other authoring tests."""

from __future__ import annotations

import json

from conftest import run_cli


def test_check_passes_on_the_shipped_policies() -> None:
    proc = run_cli("check", "policies", "--strict", "--format", "json", timeout=1200)  # a hang bound; ~90 s alone
    assert proc.returncode == 0, proc.stdout
    assert json.loads(proc.stdout)["findings"] == []
