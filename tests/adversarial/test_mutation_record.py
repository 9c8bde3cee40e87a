"""A green CI slice must not rest on a full mutation run of other policies, or on a doctored one.

`make mutate-slice` reads the full run's record (`policies/mutation-score.json`): a record written
for other policies, tests or cases is refused, and a record that claims kills the suite does not
make is caught by the slice re-running the mutants it draws.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cli_json
from mutatekit import TESTS, demo_policies


def _mutate(root: Path, *args: str) -> tuple[int, object, str]:
    code, report, stderr = cli_json(
        "mutate", str(root / "policies"), "--cases", str(root / "cases"), "--jobs", "2", *args
    )
    return code, report, stderr


def test_a_stale_record_fails_the_slice(tmp_path: Path) -> None:
    root = demo_policies(tmp_path)
    record = root / "policies" / "mutation-score.json"
    code, _, stderr = _mutate(root, "--score-file", str(record))
    assert code == 0 and record.is_file(), stderr
    code, _, stderr = _mutate(root, "--sample", "5", "--score-file", str(record))
    assert code == 0, stderr
    # a test is weakened after the full run: the recorded score no longer describes this suite
    weaker = TESTS.replace('test_usd_refused if not demo.allowed with input as {"amount": 5, "currency": "USD"}', "")
    (root / "policies" / "kcp" / "demo_test.rego").write_text(weaker)
    code, report, stderr = _mutate(root, "--sample", "5", "--score-file", str(record))
    assert code == 2 and report is None
    assert "stale" in stderr and "make mutate-policies" in stderr, stderr


def test_a_record_claiming_kills_the_suite_does_not_make_fails_the_slice(tmp_path: Path) -> None:
    root = demo_policies(tmp_path)
    record = root / "policies" / "mutation-score.json"
    code, _, stderr = _mutate(root, "--score-file", str(record))
    assert code == 0, stderr
    document = json.loads(record.read_text())
    survivors = [key for key, status in document["not_killed"].items() if status == "survived"]
    assert survivors
    # doctored: every survivor claimed killed, the score raised to 100
    document["not_killed"] = {k: v for k, v in document["not_killed"].items() if v != "survived"}
    document["score"] = 100.0
    record.write_text(json.dumps(document))
    code, report, stderr = _mutate(root, "--sample", "200", "--score-file", str(record), "--full-threshold", "90")
    assert code == 2, stderr
    assert f"{len(survivors)} sampled mutants the record counts as killed survived" in stderr, stderr
    assert isinstance(report, dict) and sorted(report["disagreements"]) == sorted(survivors)
