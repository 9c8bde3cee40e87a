"""The docs read as user documentation: no development machine's paths, and the KCP digest is no
research log (issue 32)."""

from __future__ import annotations

import re

from conftest import REPO


def test_the_docs_and_changelog_name_no_development_machine_and_the_digest_is_no_research_log() -> None:

    texts = {p.name: p.read_text() for p in [REPO / "CHANGELOG.md", REPO / "README.md", *(REPO / "docs").glob("*.md")]}
    for name, text in texts.items():
        found = re.findall(r"(?<![\w.])/(?:work|home|Users|root)/\S+", text)
        assert not found, f"{name} names machine paths: {found[:3]}"
    digest = texts["kcp-spec-digest.md"]
    for research in ("research record", "read_file", "find_files", "commit 03937b2f", "Issue 19", "kcp-opa today"):
        assert research not in digest, research
    assert "what kcp-opa does" in digest
