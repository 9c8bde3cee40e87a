"""The CI slice of ``kcp-opa mutate``: stratified, seeded by the policies, checked against the full run.

The unit tests pin the draw (proportional per file, reproducible, refreshed when the policies
change); the end-to-end ones run the real command over a small policy set: the full run writes
the record, the slice reads it and prints both scores, a stale record is refused.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from mutatekit import POLICY, TESTS, demo_policies

from kcp_opa.authoring.mutate_ops import Mutant
from kcp_opa.authoring.mutate_slice import fingerprint, input_files, quotas, stratified_sample


def _mutants(files: dict[str, int]) -> list[Mutant]:
    return [Mutant(name, n, n, "comparison", f"x{n}", f"y{n}") for name, count in files.items() for n in range(count)]


def test_quotas_are_proportional_and_sum_to_the_sample() -> None:
    shares = quotas({"a.rego": 180, "b.rego": 60, "c.rego": 10, "d.rego": 5}, 40)
    assert sum(shares.values()) == 40
    # 40 * 180/255 = 28.2, 9.4, 1.6, 0.8: floors 28, 9, 1, 0; the two largest remainders (0.8, 0.6) get one more
    assert shares == {"a.rego": 28, "b.rego": 9, "c.rego": 2, "d.rego": 1}
    assert quotas({"a.rego": 3, "b.rego": 2}, 40) == {"a.rego": 3, "b.rego": 2}  # never more than a file holds


def test_the_sample_is_stratified_by_file() -> None:
    mutants = _mutants({"big.rego": 300, "mid.rego": 100, "small.rego": 20})
    drawn = stratified_sample(mutants, 42, "seed")
    per_file = Counter(m.file for m in drawn)
    assert per_file == {"big.rego": 30, "mid.rego": 10, "small.rego": 2}
    assert len({m.key for m in drawn}) == 42 and all(m in mutants for m in drawn)


def test_the_sample_is_reproducible_and_changes_with_its_seed() -> None:
    mutants = _mutants({"a.rego": 200, "b.rego": 200})
    first = stratified_sample(mutants, 20, "f" * 64)
    assert stratified_sample(list(reversed(mutants)), 20, "f" * 64) == first  # input order does not matter
    assert stratified_sample(mutants, 20, "e" * 64) != first


def test_the_fingerprint_covers_policies_tests_and_cases(tmp_path: Path) -> None:
    modules = {"kcp/demo.rego": POLICY, "kcp/demo_test.rego": TESTS}
    cases = [("cases/demo.yaml", b"cases: []\n")]
    base = fingerprint(modules, cases)
    assert fingerprint(dict(reversed(list(modules.items()))), cases) == base  # order-free
    assert fingerprint({**modules, "kcp/demo_test.rego": TESTS + "\n# more\n"}, cases) != base  # a test changed
    assert fingerprint({**modules, "kcp/demo.rego": POLICY.replace("100", "101")}, cases) != base  # a rule changed
    assert fingerprint(modules, [("cases/demo.yaml", b"cases: [x]\n")]) != base  # a case changed
    # deployments are read by name relative to their root: the same tree anywhere has the same files
    for root in (tmp_path / "one", tmp_path / "two"):
        (root / "cases").mkdir(parents=True)
        (root / "cases" / "c.yaml").write_text("cases: []\n")
        (root / "deployments" / "demo" / "units").mkdir(parents=True)
        (root / "deployments" / "demo" / "knowledge.yaml").write_text("project: demo\n")
        (root / "deployments" / "demo" / "units" / "u.md").write_text("unit\n")
    one = input_files([tmp_path / "one/cases/c.yaml"], tmp_path / "one/deployments", ["demo"])
    two = input_files([tmp_path / "two/cases/c.yaml"], tmp_path / "two/deployments", ["demo", "demo"])
    assert one == two and [name for name, _ in one] == [
        "cases/c.yaml",
        "deployments/demo/knowledge.yaml",
        "deployments/demo/units/u.md",
    ]


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    excused = POLICY.replace(
        'kinds contains "eur" if input.currency == "EUR"',
        'kinds contains "eur" if input.currency == "EUR" # mutate: equivalent no decision reads kinds',
    )
    return demo_policies(tmp_path, excused)


def _mutate(policy_dir: Path, *args: str) -> tuple[int, dict[str, object], str]:
    code, report, stderr = cli_json(
        "mutate", str(policy_dir / "policies"), "--cases", str(policy_dir / "cases"), "--jobs", "2", *args
    )
    return code, report, stderr


def test_the_full_run_records_its_score_and_the_slice_reports_both(policy_dir: Path) -> None:
    record_path = policy_dir / "policies" / "mutation-score.json"
    code, full, stderr = _mutate(policy_dir, "--score-file", str(record_path))
    assert code == 0, stderr
    record = json.loads(record_path.read_text())
    summary = full["summary"]
    assert isinstance(summary, dict)
    assert record["score"] == round(summary["score"], 2) and record["counts"]["survived"] == summary["survived"]
    assert record["counts"]["excused"] == summary["excused"] > 0  # excused mutants are counted on their own
    assert all(status != "killed" for status in record["not_killed"].values())
    assert set(record["not_killed"].values()) >= {"survived", "excused"}
    # the full run prints the CI slice's score on the slice's own draw beside its own
    assert full["full_run"] == {"score": record["score"], "mutants": summary["mutants"]}

    code, sliced, stderr = _mutate(
        policy_dir, "--sample", "6", "--score-file", str(record_path), "--full-threshold", "10"
    )
    assert code == 0, stderr
    assert sliced["full_run"] == {"score": record["score"], "mutants": summary["mutants"]}
    the_slice = sliced["slice"]
    assert isinstance(the_slice, dict) and the_slice["size"] == 6
    assert the_slice["score"] == the_slice["recorded_score"]  # the same mutants, the same verdicts
    statuses = {m["status"] for m in sliced["mutants"]}  # type: ignore[attr-defined]
    assert statuses <= {"killed", "survived", "timeout"}  # drawn from what the full run scored

    proc = run_cli(
        "mutate", str(policy_dir / "policies"), "--cases", str(policy_dir / "cases"), "--sample", "6",
        "--score-file", str(record_path), "--format", "text",
    )  # fmt: skip
    assert "full run" in proc.stdout and "CI slice (6 mutants, stratified by file)" in proc.stdout, proc.stdout

    code, _, stderr = _mutate(policy_dir, "--sample", "6", "--score-file", str(record_path), "--full-threshold", "99")
    assert code == 2 and "recorded full score" in stderr and "below 99%" in stderr


def test_the_slice_refuses_a_missing_record(policy_dir: Path) -> None:
    missing = policy_dir / "policies" / "mutation-score.json"
    code, report, stderr = _mutate(policy_dir, "--sample", "6", "--score-file", str(missing))
    assert code == 2 and report is None
    assert "no full mutation run recorded" in stderr and "make mutate-policies" in stderr, stderr


def test_a_record_needs_every_file(policy_dir: Path) -> None:
    proc = run_cli("mutate", str(policy_dir / "policies"), "--only", "demo", "--score-file", "x.json")
    assert proc.returncode == 2 and "drop --only" in proc.stderr
