"""GDPR Article 30 records from KCP manifests (`kcp-opa ropa`): what each record says, what it asks
for, and how it prints (issues 17 and 32). Real command processes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from deploykit import SICK_LEAVE_UNIT, hr_manifest


def test_ropa_does_not_call_a_restricted_unit_public_when_access_is_left_to_the_default(tmp_path: Path) -> None:
    proc = run_cli("ropa", str(hr_manifest(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    records = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}
    payroll = records["hr/payroll"]
    assert not any("public" in r and "default" not in r for r in payroll["recipients"])
    assert payroll["recipients"][0].startswith("not declared")
    assert "hr/payroll: access not declared" in proc.stderr
    assert records["hr/sick-leave"]["recipients"][0] == "restricted (hr:health)"


def test_ropa_asks_for_an_article_9_condition_for_health_data(tmp_path: Path) -> None:
    proc = run_cli("ropa", str(hr_manifest(tmp_path)))
    sick = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}["hr/sick-leave"]
    assert sick["special_categories"] is True
    assert sick["article_9_condition"] == "not declared"
    assert "hr/sick-leave: special categories (health)" in proc.stderr and "Article 9(2)" in proc.stderr
    payroll = {r["activity"]: r for r in json.loads(proc.stdout)["records"]}["hr/payroll"]
    assert payroll["article_9_condition"].startswith("not applicable")

    consented = run_cli("ropa", str(hr_manifest(tmp_path, basis="explicit_consent")))
    sick = {r["activity"]: r for r in json.loads(consented.stdout)["records"]}["hr/sick-leave"]
    assert sick["article_9_condition"] == "Art. 9(2)(a) explicit consent"
    assert "Article 9(2)" not in consented.stderr


def test_ropa_text_format_is_accepted_and_keeps_values_whole(tmp_path: Path) -> None:
    proc = run_cli("ropa", str(hr_manifest(tmp_path)), "--format", "text")
    assert proc.returncode == 0, proc.stderr
    assert "hr/sick-leave" in proc.stdout and "restricted (hr:health)" in proc.stdout
    assert "…" not in proc.stdout


ROPA_MANIFEST = """\
kcp_version: "0.14"
project: hr
compliance: {sensitivity: restricted, data_residency: [EU]}
trust:
  provenance: {publisher: "Example HR GmbH"}
units:
"""
ROPA_MANIFEST += SICK_LEAVE_UNIT.format(basis="legal_obligation") + "      article_9_condition: CONDITION\n"


@pytest.mark.parametrize(
    ("condition", "article"),
    [
        ("explicit_consent", "Art. 9(2)(a)"),
        ("employment_social_security", "Art. 9(2)(b)"),
        ("vital_interests", "Art. 9(2)(c)"),
        ("not_for_profit_body", "Art. 9(2)(d)"),
        ("made_public_by_data_subject", "Art. 9(2)(e)"),
        ("legal_claims", "Art. 9(2)(f)"),
        ("substantial_public_interest", "Art. 9(2)(g)"),
        ("health_or_social_care", "Art. 9(2)(h)"),
        ("public_health", "Art. 9(2)(i)"),
        ("archiving_research_statistics", "Art. 9(2)(j)"),
    ],
)
def test_ropa_accepts_every_article_9_condition(tmp_path: Path, condition: str, article: str) -> None:
    manifest = tmp_path / "knowledge.yaml"
    manifest.write_text(ROPA_MANIFEST.replace("CONDITION", condition))
    proc = run_cli("ropa", str(manifest))
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)["records"][0]
    assert record["article_9_condition"].startswith(article), record
    assert record["controller"] == "Example HR GmbH"
    assert "Article 9(2)" not in proc.stderr and "controller" not in proc.stderr


def test_ropa_text_has_no_python_booleans_and_a_missing_controller_is_said(tmp_path: Path) -> None:
    manifest = tmp_path / "knowledge.yaml"
    text = ROPA_MANIFEST.replace("CONDITION", "employment_social_security")
    manifest.write_text(text.replace('trust:\n  provenance: {publisher: "Example HR GmbH"}\n', ""))
    proc = run_cli("ropa", str(manifest), "--format", "text")
    assert proc.returncode == 0
    assert "True" not in proc.stdout and "False" not in proc.stdout, proc.stdout
    assert re.search(r"special categories\s+yes", proc.stdout) and re.search(r"transfer\s+no", proc.stdout)
    assert "no controller: declare trust.provenance.publisher" in proc.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(ROPA_MANIFEST.replace("CONDITION", "employment_law"))
    assert run_cli("validate", str(typo)).returncode == 1


def test_ropa_prints_text_on_a_terminal_like_the_other_commands(tmp_path: Path) -> None:
    import pty
    import subprocess
    import sys

    manifest = tmp_path / "knowledge.yaml"
    manifest.write_text(ROPA_MANIFEST.replace("CONDITION", "employment_social_security"))
    leader, follower = pty.openpty()
    proc = subprocess.run(
        [sys.executable, "-m", "kcp_opa", "ropa", str(manifest)],
        stdout=follower, stderr=subprocess.PIPE, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    os_close = __import__("os").close
    os_close(follower)
    out = __import__("os").read(leader, 65536).decode()
    os_close(leader)
    assert proc.returncode == 0
    assert out.startswith("Records of processing activities") and not out.lstrip().startswith("{"), out[:200]
