"""`kcp-opa decide` and `kcp-opa eval` as a shell or CI job meets them: the flags, the usage errors,
one-line messages (issues 17 and 32). Real command processes."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import REPO, VOUCH, run_cli
from deploykit import HR_LEAVE as HR


def test_a_bad_now_is_a_usage_error_not_a_refused_action(finance_bundle: Path) -> None:
    action = REPO / "fixtures" / "kya-supplier-payment-action.json"
    proc = run_cli("decide", *VOUCH, "-b", str(finance_bundle), "-i", str(action), "--now", "yesterday")
    assert proc.returncode == 2
    assert "Invalid value for '--now'" in proc.stderr and "RFC 3339" in proc.stderr
    assert proc.stdout == ""
    receipt = run_cli("receipt", "hash", "--action", str(action))
    assert receipt.returncode == 0


def test_decide_takes_action_like_receipt_and_prints_text_on_request(finance_bundle: Path) -> None:
    action = REPO / "fixtures" / "kya-supplier-payment-action.json"
    base = ("decide", *VOUCH, "-b", str(finance_bundle), "--now", "2026-11-29T10:00:00Z")
    proc = run_cli(*base, "--action", str(action), "--format", "text")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("HUMAN_APPROVAL risk HIGH") and "execution not allowed" in first
    assert "missing controls: authority_verification" in proc.stdout
    piped = run_cli(*base, "-i", str(action))
    assert json.loads(piped.stdout)["decision"] == "HUMAN_APPROVAL"  # JSON stays the default when piped


def test_eval_syntax_error_is_one_line_without_engine_internals(finance_bundle: Path) -> None:
    proc = run_cli("eval", "-b", str(finance_bundle), "x := 1 +")
    assert proc.returncode == 2
    assert proc.stdout == ""  # rego-cpp's report would otherwise land on stdout, before the JSON
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Invalid arithmetic operator at column 8 of `x := 1 +`" in proc.stderr
    assert "wellformed_error" not in proc.stderr and "Pass " not in proc.stderr


def test_eval_still_answers_a_good_query(finance_bundle: Path) -> None:
    proc = run_cli("eval", "-b", str(finance_bundle), "-f", "values", "1 + 1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [2]


def test_a_too_short_value_names_the_minimum(tmp_path: Path) -> None:
    bundle = tmp_path / "hr.tar.gz"
    compiled = run_cli(
        "compile", str(HR / "knowledge.yaml"), "--matrix", str(HR / "matrix.yaml"), "-o", str(bundle),
        "--no-engine-check", "--format", "json",
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    action = json.loads((HR / "action.json").read_text()) | {"idempotency_key": "idem_hr_1"}
    (tmp_path / "a.json").write_text(json.dumps(action))
    proc = run_cli("decide", "--bundle", str(bundle), "--action", str(tmp_path / "a.json"), "--format", "text")
    assert proc.returncode != 0
    assert "'idem_hr_1' has 9 characters; at least 16 are required" in proc.stderr, proc.stderr
