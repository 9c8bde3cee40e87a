"""`kcp-opa audit case --help` teaches gathering: gather is the group's default command, so its
usage and every option are printed by the group's own help, not behind a hidden subcommand."""

from __future__ import annotations

import re

from conftest import run_cli


def test_audit_case_help_shows_how_to_gather_and_every_gather_option() -> None:
    shown = run_cli("audit", "case", "--help")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "Usage: kcp-opa audit case [OPTIONS] LEDGER DECISION_ID" in text
    for option in (
        "--output", "--bundles", "--trust", "--keyring", "--checkpoint", "--receipt", "--receipt-keyring",
        "--verification-key",
    ):  # fmt: skip
        assert re.search(rf"^ +(-\w, )?{option} [A-Z[]", text, re.MULTILINE), option
    assert "gather" in text and "verify" in text  # both commands listed
    gather = run_cli("audit", "case", "gather", "--help")
    assert gather.returncode == 0 and "--checkpoint" in gather.stdout and "newest" in gather.stdout
