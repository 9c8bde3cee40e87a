"""Attack class: a declaration the gate silently does not enforce (issue 49, "Green must mean safe").

Before this, a health insurer's ``compliance: {restrictons: [...]}`` (one letter missing)
validated clean, even with ``--strict``, and compiled into a bundle that ALLOWed an external LLM
to read member health records (``no rule matched``). The same held for ``declard_fields``,
``freshnes_policy``, ``not-for`` and ``article9_condition``. Now ``validate`` warns (KCP says
parsers ignore unknown keys and values) and ``compile`` refuses with one line naming the file,
the line and the nearest known spelling, unless the delegation matrix's ``unenforced`` list
acknowledges the declaration by name; an acknowledgement is recorded in the bundle and shown by
``inspect`` and ``explain``.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from conftest import run_cli

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.declare.unenforced import UnenforcedError

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
DEPLOYMENTS = REPO / "fixtures" / "deployments"

MANIFEST = """kcp_version: "0.30"
project: member-health
version: "1.0.0"
auth:
  methods: [{type: oauth2, issuer: "https://id.example.com", scopes: [health-records]}]
compliance:
  sensitivity: restricted
  data_residency: [EU]
units:
  - id: member-records
    path: members/records.md
    intent: "What is on a member's health record?"
    scope: project
    audience: [agent]
    access: restricted
    auth_scope: health-records
    validated: "2026-11-01"
    compliance:
      data_categories: [health]
      legal_basis: explicit_consent
      article_9_condition: health_or_social_care
      declared_fields: [member_id, diagnosis]
      restrictions: [audit-required, no-external-llm, no-ai-training, no-cross-border]
    freshness_policy: {max_age_days: 30, on_stale: block}
    not_for: [marketing]
"""

MATRIX = """kind: kcp-opa/delegation-matrix
format_version: 1
name: member-health
version: "1"
agreed_by: [{role: cto, name: A, date: "2026-11-01"}, {role: compliance_officer, name: B, date: "2026-11-01"}]
task_types:
  read:
    data_categories: {health: autonomous}
    sensitivity: {restricted: autonomous}
"""

# (what is misspelt, the line as the author wrote it, the name validate gives it, the spelling meant)
MISSPELT = [
    ("restrictons", "      restrictons: [", "units[0].compliance.restrictons", "restrictions"),
    ("declard_fields", "      declard_fields: [", "units[0].compliance.declard_fields", "declared_fields"),
    ("freshnes_policy", "    freshnes_policy: {", "units[0].freshnes_policy", "freshness_policy"),
    ("not-for", "    not-for: [", "units[0].not-for", "not_for"),
    ("article9_condition", "      article9_condition: ", "units[0].compliance.article9_condition",
     "article_9_condition"),
]  # fmt: skip


def _misspell(meant: str, wrong: str) -> str:
    text = MANIFEST.replace(f" {meant}: ", f" {wrong}: ")
    assert text != MANIFEST
    return text


def _write(tmp_path: Path, manifest: str, matrix: str = MATRIX) -> tuple[Path, Path]:
    (tmp_path / "knowledge.yaml").write_text(manifest, encoding="utf-8")
    (tmp_path / "matrix.yaml").write_text(matrix, encoding="utf-8")
    return tmp_path / "knowledge.yaml", tmp_path / "matrix.yaml"


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(needle))


def _compile_cli(tmp_path: Path, knowledge: Path, matrix: Path) -> tuple[int, str, Path]:
    out = tmp_path / "b.tar.gz"
    proc = run_cli("compile", str(knowledge), "--matrix", str(matrix), "-o", str(out), "--no-engine-check")
    return proc.returncode, proc.stderr, out


@pytest.mark.parametrize(("wrong", "written", "at", "meant"), MISSPELT, ids=[m[0] for m in MISSPELT])
def test_a_misspelt_key_is_refused_by_compile_naming_file_line_and_the_spelling_meant(
    tmp_path: Path, wrong: str, written: str, at: str, meant: str
) -> None:
    text = _misspell(meant, wrong)
    knowledge, matrix = _write(tmp_path, text)
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 1, stderr
    refusal = [line for line in stderr.splitlines() if "unknown_key" in line]
    assert len(refusal) == 1, stderr  # one line per refused declaration
    assert f"knowledge.yaml:{_line_of(text, written)}: {at}: error:" in refusal[0], stderr
    assert f"did you mean {meant!r}" in refusal[0], stderr
    assert "Traceback" not in stderr and not out.exists()
    # validate keeps KCP conformance (unknown keys are ignored, with a warning), --strict refuses
    validated = run_cli("validate", str(knowledge), "--format", "json")
    assert validated.returncode == 0, validated.stdout
    warned = [w for w in json.loads(validated.stdout)["warnings"] if w["code"] == "unknown_key"]
    assert [w["path"] for w in warned] == [at] and f"did you mean {meant!r}" in warned[0]["message"]
    strict = run_cli("validate", "--strict", str(knowledge), str(matrix), "--format", "text")
    assert strict.returncode == 1 and f"did you mean {meant!r}" in strict.stdout, strict.stdout


def test_the_python_api_refuses_the_same(tmp_path: Path) -> None:
    knowledge, matrix = _write(tmp_path, _misspell("restrictions", "restrictons"))
    with pytest.raises(UnenforcedError, match=r"did you mean 'restrictions'"):
        compile_bundle([knowledge], matrix, POLICIES, tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists()


ACKNOWLEDGED = (
    MATRIX
    + """unenforced:
  - at: "knowledge.yaml:units[0].compliance.restrictons"
    reason: "legacy key read by the publisher's own tooling; the gate is not asked to enforce it (SEC-12)"
"""
)


def test_an_acknowledged_key_compiles_and_the_bundle_inspect_and_explain_say_so(tmp_path: Path) -> None:
    knowledge, matrix = _write(tmp_path, _misspell("restrictions", "restrictons"), ACKNOWLEDGED)
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 0, stderr
    with tarfile.open(out) as tar:
        member = tar.extractfile(".manifest")
        assert member is not None
        recorded = json.loads(member.read())["metadata"]["kcp_opa"]["unenforced"]
    at = "knowledge.yaml:units[0].compliance.restrictons"
    assert [(r["at"], r["code"]) for r in recorded] == [(at, "unknown_key")]
    assert "SEC-12" in recorded[0]["reason"]
    inspected = run_cli("inspect", str(out), "--format", "text")
    assert inspected.returncode == 0 and "unenforced" in inspected.stdout and "SEC-12" in inspected.stdout
    explained = run_cli("explain", str(knowledge), "member-records", "--matrix", str(matrix), "--format", "json")
    assert explained.returncode == 0, explained.stderr
    gaps = json.loads(explained.stdout)["unenforced"]
    assert [(g["at"], g["acknowledged"]) for g in gaps] == [(at, True)]
    unacknowledged = run_cli("explain", str(knowledge), "member-records", "--format", "json")
    assert [g["acknowledged"] for g in json.loads(unacknowledged.stdout)["unenforced"]] == [False]
    # validate --strict with the matrix: the acknowledged gap is a note, not a failure
    strict = run_cli("validate", "--strict", str(knowledge), str(matrix), "--format", "json")
    assert strict.returncode == 0, strict.stdout


def test_an_acknowledgement_names_one_declaration_not_a_pattern(tmp_path: Path) -> None:
    text = _misspell("restrictions", "restrictons").replace(" declared_fields: ", " declard_fields: ")
    knowledge, matrix = _write(tmp_path, text, ACKNOWLEDGED)
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 1 and "units[0].compliance.declard_fields" in stderr and "restrictons: error" not in stderr
    assert not out.exists()


def test_an_unknown_restriction_value_validates_with_a_warning_but_does_not_compile(tmp_path: Path) -> None:
    text = MANIFEST.replace("no-ai-training, ", "no_ai_training, ")
    knowledge, matrix = _write(tmp_path, text)
    validated = run_cli("validate", str(knowledge), "--format", "json")
    assert validated.returncode == 0, validated.stdout  # KCP: unknown list values are ignored
    warned = [w for w in json.loads(validated.stdout)["warnings"] if w["code"] == "unknown_restriction"]
    assert len(warned) == 1 and "did you mean 'no-ai-training'" in warned[0]["message"]
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 1 and "unknown_restriction" in stderr and "did you mean 'no-ai-training'" in stderr, stderr
    assert f"knowledge.yaml:{_line_of(text, '      restrictions:')}:" in stderr and not out.exists()


def test_an_acknowledged_value_covers_that_value_only(tmp_path: Path) -> None:
    """An acknowledgement names the value as well as its place: a later edit of the acknowledged
    slot to another unknown value (here the typo `no-ai-trainng`, which drops the training
    protection) is a new finding that compile refuses, and the old entry is reported unused."""
    at = "knowledge.yaml:units[0].compliance.restrictions[2]=no_ai_training"
    acknowledged = MATRIX + f"unenforced:\n  - at: '{at}'\n    reason: SEC-14 pending\n"
    first = MANIFEST.replace("no-ai-training, ", "no_ai_training, ")
    knowledge, matrix = _write(tmp_path, first, acknowledged)
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 0, stderr
    out.unlink()
    knowledge.write_text(MANIFEST.replace("no-ai-training, ", "no-ai-trainng, "), encoding="utf-8")
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 1 and "restrictions[2]=no-ai-trainng" in stderr and "unknown_restriction" in stderr, stderr
    assert not out.exists()


@pytest.mark.parametrize("written", ["helth", "special_categry", "biometrics"])
def test_a_misspelt_data_category_is_refused_not_taken_as_a_custom_one(tmp_path: Path, written: str) -> None:
    """`helth` beside a matrix cell for `helth` would route the unit while every rule reading
    the category (Art. 9 makes its restrictions terminal for exceptions) misses it: compile
    refuses a near miss of a known category; a custom category the matrix covers compiles."""
    text = MANIFEST.replace("data_categories: [health]", f"data_categories: [{written}]")
    matrix = MATRIX.replace("{health: autonomous}", f"{{{written}: autonomous}}")
    knowledge, matrix_file = _write(tmp_path, text, matrix)
    code, stderr, out = _compile_cli(tmp_path, knowledge, matrix_file)
    assert code == 1 and "data_category_misspelt" in stderr and "did you mean" in stderr, stderr
    assert not out.exists()
    custom = _write(tmp_path, text.replace(written, "claims_history"), matrix.replace(written, "claims_history"))
    code, stderr, out = _compile_cli(tmp_path, *custom)
    assert code == 0, stderr


def test_the_spelling_meant_compiles(tmp_path: Path) -> None:
    knowledge, matrix = _write(tmp_path, MANIFEST)
    code, stderr, _ = _compile_cli(tmp_path, knowledge, matrix)
    assert code == 0, stderr


@pytest.mark.parametrize("deployment", sorted(p.name for p in DEPLOYMENTS.iterdir() if p.is_dir()))
def test_the_reference_deployments_validate_strictly(deployment: str) -> None:
    base = DEPLOYMENTS / deployment
    files = [str(p) for p in sorted(base.glob("knowledge*.yaml"))] + [str(base / "matrix.yaml")]
    proc = run_cli("validate", "--strict", *files, "--format", "text")
    assert proc.returncode == 0, proc.stdout  # the GDPR advisory is a note: it never fails --strict


def test_an_unenforced_declaration_past_the_report_limit_is_still_refused(tmp_path: Path) -> None:
    """Reports keep the first 200 findings: 250 notes (ids outside the spec pattern) came first,
    and the unknown restriction after them was only counted, so compile saw nothing to refuse."""
    unit = '  - {{id: unit_{0}, path: u{0}.md, intent: "U{0}", scope: project, audience: [agent]}}\n'
    units = "".join(unit.format(i) for i in range(250))
    text = (
        'kcp_version: "0.30"\nproject: crowded\ncompliance:\n  sensitivity: internal\n'
        "  restrictions: [no_ai_training]\nunits:\n" + units
    )
    matrix = MATRIX.replace("{restricted: autonomous}", "{internal: autonomous}")
    knowledge, matrix_path = _write(tmp_path, text, matrix)
    with pytest.raises(UnenforcedError, match="unknown_restriction"):
        compile_bundle([knowledge], matrix_path, POLICIES, tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists()
