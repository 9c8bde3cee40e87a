"""Attack class: declarations. A careless author or an attacker who can edit a manifest, matrix or
trust registry tries to make the two engines disagree, to declare a restriction that decides
nothing, or to switch integrity off. Each attack compiled, or decided, before issue 26:

1. a string the policies read holding ``"``, ``\\``, TAB, CR or LF reached regopy escaped (the
   bundle's data is JSON text, and regopy keeps the escape): a ``not_for`` entry ending in LF was
   an executable ALLOW on regopy and a DENY ``unit_not_for_purpose`` on OPA;
3. ``no-ai-training`` knew three spellings, so ``AI training`` was an executable ALLOW;
   ``no-redistribution`` was read by no rule; ``no-cross-border`` with no ``data_residency``
   checked nothing; ``environment: [""]`` matched environments it does not list;
6. with ``--manifest-key``, a manifest whose ``content_integrity`` was deleted, nulled or
   disabled compiled unsigned, and ``enabled: yes`` skipped the check.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import ManifestIntegrityError, ValidationFailedError
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.declare.manifest import MANIFEST_KIND
from kcp_opa.declare.validation import validate_file

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
NOW = "2026-11-29T10:00:00Z"

MANIFEST = """kcp_version: "0.30"
project: attack
version: "1.0.0"
compliance: {sensitivity: internal, data_residency: [EU]}
units:
  - id: memo
    path: memo.md
    intent: "Agent memory"
    scope: project
    audience: [agent]
    compliance: {restrictions: [no-ai-training]}
  - id: upgrade
    path: upgrade.md
    intent: "How do I upgrade?"
    scope: project
    audience: [agent]
    not_for:
      - |
        Initial adoption
"""

MATRIX = """kind: kcp-opa/delegation-matrix
format_version: 1
name: attack
version: "1"
agreed_by: [{role: cto, name: A, date: "2026-11-01"}, {role: compliance_officer, name: B, date: "2026-11-01"}]
task_types:
  read:
    sensitivity: {public: autonomous, internal: autonomous}
parameters:
  approver_roles: {default: compliance_officer}
"""

TRUST = """kind: kcp-opa/trust-registry
format_version: 1
name: attack
version: "1"
principals:
  - {id: user_1, type: human, roles: [approver]}
issuers:
  - {id: desk, type: system, controls: [independent_human_approval], keys: [{kid: k1, alg: HMAC-SHA256}]}
"""


def _action(unit: str, purpose: str | None = None) -> dict[str, Any]:
    knowledge: dict[str, Any] = {"project": "attack", "unit": unit}
    if purpose is not None:
        knowledge["purpose"] = purpose
    return {
        "schema_version": "2.0", "action_id": "act_0001", "idempotency_key": "idem_attack_0001",
        "tenant_id": "tenant_a",
        "subject_id": "user_1", "agent_id": "agent/v1", "scenario": "declaration_attack", "action_type": "read",
        "requested_action": "kb.read", "target": {"type": "knowledge_unit", "reference": unit, "tenant_id": "tenant_a"},
        "authorization_context": {"requested_by": "user_1", "agent_scope": ["kb.read"], "session_id": "s1"},
        "knowledge": knowledge,
        "runtime": {"deployment_region": "EU", "environment": "production",
                    "model": {"id": "m-1", "hosting": "self_hosted"}, "risk_level": "low",
                    "evidence_status": "present", "budget_state": "within_budget"},
        "created_at": "2026-11-29T09:59:00Z",
    }  # fmt: skip


def _write(tmp_path: Path, manifest: str = MANIFEST, matrix: str = MATRIX) -> tuple[Path, Path]:
    (tmp_path / "knowledge.yaml").write_text(manifest, encoding="utf-8")
    (tmp_path / "matrix.yaml").write_text(matrix, encoding="utf-8")
    return tmp_path / "knowledge.yaml", tmp_path / "matrix.yaml"


def _compile(tmp_path: Path, manifest: str = MANIFEST, matrix: str = MATRIX, **kwargs: Any) -> Path:
    knowledge, matrix_path = _write(tmp_path, manifest, matrix)
    out = tmp_path / "b.tar.gz"
    compile_bundle([knowledge], matrix_path, POLICIES, out, options=CompileOptions(**kwargs))
    return out


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# -- class 1: declaration strings reach both engines alike, or are refused with file:line ---------


def test_data_path_escapes_exactly_the_characters_the_contract_refuses() -> None:
    """The proof on both engines: which characters regopy reads differently in DATA (not input)."""
    from opa_bindings import OpaEngine
    from regopy import Interpreter
    from regopy import rego_shared as native

    from kcp_opa.core import strings
    from kcp_opa.core.canonical import canonical_json
    from kcp_opa.decide.regoinput import read_query_results, rego_input

    module = (
        "package p\nimport rego.v1\n"
        "r := [count(data.d.s), data.d.s == input.s, input.s in data.d.l, data.d.o[input.s]]\n"
    )
    diverging, alike = set(), set()
    probe = [chr(c) for c in range(1, 0x100)] + ["\u2028", "\u200b", "\ufeff", "\U0001f600"]
    for char in probe:
        text = f"a{char}b"
        doc = {"d": {"s": text, "l": [text], "o": {text: True}}}
        interpreter = Interpreter()
        interpreter.add_data_json(canonical_json(doc).decode("utf-8"))
        interpreter.add_module("p.rego", module)
        interpreter.set_input(rego_input({"s": text}))
        output = native.rego_query(interpreter._impl, "x := data.p.r")
        found = read_query_results(native.rego_output_node(output))
        native.rego_free_output(output)
        regopy = found[0][1]["x"] if found else None
        engine = OpaEngine()
        engine.add_policy("p.rego", module)
        engine.add_data(doc)
        opa = engine.eval_document("p.r", {"s": text})
        engine.close()
        assert opa == [3, True, True, True]
        (diverging if regopy != opa else alike).add(char)
    assert diverging == {c for c in probe if strings.DATA_ESCAPED.search(c)}
    assert diverging == set('"\\') | {chr(c) for c in range(1, 0x20)}
    assert all(strings.data_text_problem(c) is not None for c in diverging)


def test_not_for_ending_in_newline_is_refused_or_decided_alike(tmp_path: Path) -> None:
    """The measured attack: regopy executable ALLOW, OPA DENY unit_not_for_purpose."""
    action = _action("upgrade", purpose="Initial adoption\n")
    try:
        bundle = _compile(tmp_path)
    except ValidationFailedError as exc:
        text = str(exc)
        assert "declaration_characters" in text and "U+000A" in text, text
        assert f"knowledge.yaml:{_line_of(MANIFEST, 'not_for:') + 1}:" in text, text
        return
    decision = Gate.from_bundle(bundle, config=GateConfig(cross_check="opa", preflight=False)).decide(action, now=NOW)
    assert "engine_divergence" not in decision.verdict.reason_codes, decision.engine_error
    assert decision.verdict.reason_codes == ("unit_not_for_purpose",)


_HOSTILE_DECLARATIONS = [
    # (what, manifest/matrix/trust, old, new, expected code, the line's needle)
    ("region with a quote", "manifest", "data_residency: [EU]", 'data_residency: [EU, "E\\"U"]',
     "declaration_characters", "data_residency"),
    ("region with a trailing space", "manifest", "data_residency: [EU]", 'data_residency: ["EU "]',
     "declaration_not_identifier", "data_residency"),
    ("category with a backslash", "manifest", "{restrictions: [no-ai-training]}",
     '{restrictions: [no-ai-training], data_categories: ["pers\\\\onal"]}', "declaration_characters",
     "data_categories"),
    ("auth_scope with TAB", "manifest", "    audience: [agent]\n    compliance:",
     '    audience: [agent]\n    access: restricted\n    auth_scope: "kb:read\\t"\n    compliance:',
     "declaration_characters", "auth_scope"),
    ("successor id with CR", "manifest", "    not_for:", '    supersedes: "memo\\r"\n    not_for:',
     "declaration_characters", "supersedes"),
    ("visibility role with a quote", "manifest", "    not_for:",
     "    visibility: {default: internal, conditions: [{when: {agent_role: ['dev\"']}, "
     "then: {sensitivity: public}}]}\n    not_for:", "declaration_characters", "visibility"),
    ("not_for with a quote", "manifest", "      - |\n        Initial adoption\n", "      - 'say \"hi\"'\n",
     "declaration_characters", "say"),
    ("task type ending in LF (the schema's ^...$ lets it pass)", "matrix", "  read:\n", '  "read\\n":\n',
     "declaration_characters", "read"),
    ("task type ending in a space", "matrix", "  read:\n", '  "read ":\n', "declaration_not_identifier", "read"),
    ("approver role ending in LF", "matrix", "{default: compliance_officer}", '{default: "compliance_officer\\n"}',
     "declaration_characters", "approver_roles"),
    ("trust role ending in LF", "trust", "roles: [approver]", 'roles: ["approver\\n"]',
     "declaration_characters", "roles"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "old", "new", "code", "needle"),
    [case[1:] for case in _HOSTILE_DECLARATIONS],
    ids=[case[0] for case in _HOSTILE_DECLARATIONS],
)
def test_hostile_declaration_string_is_refused_with_file_and_line(
    tmp_path: Path, kind: str, old: str, new: str, code: str, needle: str
) -> None:
    source = {"manifest": MANIFEST, "matrix": MATRIX, "trust": TRUST}[kind]
    assert old in source
    text = source.replace(old, new, 1)
    if kind == "manifest":  # keep the other attack (the not_for LF) out of the way
        text = text.replace("      - |\n        Initial adoption\n", "      - Initial adoption\n")
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text, encoding="utf-8")
    proc = run_cli("validate", "--format", "json", str(path))
    assert proc.returncode == 1, proc.stdout
    report = json.loads(proc.stdout)
    found = [(e["code"], e["line"]) for e in report["errors"]]
    assert (code, _line_of(text, needle)) in found, report["errors"]


def test_compile_refuses_a_data_string_no_validator_rule_names(tmp_path: Path) -> None:
    """The backstop: whatever path the validator's rules miss, the data document is checked whole."""
    from kcp_opa.core.errors import CompileError
    from kcp_opa.declare.declstrings import check_data_strings

    check_data_strings({"kcp_data/units": {"ok": ["EU", "é", "a b"]}})
    with pytest.raises(CompileError, match=r"bundle data kcp_data/units/x/0: character U\+0022"):
        check_data_strings({"kcp_data/units": {"x": ['a"b']}})


# -- class 3: every declared restriction is enforced or refused ----------------------------------


@pytest.mark.parametrize(
    "purpose",
    ["AI training", "ai-training", "model-training", "training ", "AI_Training", "Model  Training\n",
     "ai\u2010training", "\tTRAINING\r\n"],
)  # fmt: skip
def test_training_in_any_spelling_is_refused_on_both_engines(tmp_path: Path, purpose: str) -> None:
    bundle = _compile(tmp_path, MANIFEST.replace("      - |\n        Initial adoption\n", "      - Initial adoption\n"))
    decision = Gate.from_bundle(bundle, config=GateConfig(cross_check="opa", preflight=False)).decide(
        _action("memo", purpose), now=NOW
    )
    assert "engine_divergence" not in decision.verdict.reason_codes, decision.engine_error
    assert decision.verdict.decision == "DENY"
    assert "ai_training_forbidden" in decision.verdict.reason_codes


_UNREAD = [
    ("no-redistribution", "{restrictions: [no-ai-training, no-redistribution]}", "restriction_unenforced"),
    ("no-caching", "{restrictions: [no-caching]}", "restriction_unenforced"),
    ("a typo", "{restrictions: [no_ai_training]}", "unknown_restriction"),
    ("no-cross-border, no residency", "{restrictions: [no-cross-border]}", "cross_border_without_residency"),
    (
        "a waivable_restrictions typo",
        "{restrictions: [no-ai-training], waivable_restrictions: [no-extrenal-llm]}",
        "unknown_waivable_restriction",
    ),
]


@pytest.mark.parametrize(("restrictions", "code"), [c[1:] for c in _UNREAD], ids=[c[0] for c in _UNREAD])
def test_a_restriction_nothing_reads_is_a_compile_error(tmp_path: Path, restrictions: str, code: str) -> None:
    text = MANIFEST.replace("      - |\n        Initial adoption\n", "      - Initial adoption\n")
    text = text.replace("{restrictions: [no-ai-training]}", restrictions)
    if code == "cross_border_without_residency":
        text = text.replace(", data_residency: [EU]", "")
    knowledge, matrix = _write(tmp_path, text)
    proc = run_cli("compile", str(knowledge), "--matrix", str(matrix), "-o", str(tmp_path / "b.tar.gz"))
    assert proc.returncode == 1, proc.stderr
    assert code in proc.stderr and f"knowledge.yaml:{_line_of(text, restrictions)}:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "b.tar.gz").exists()


@pytest.mark.parametrize("when", ['{environment: [""]}', '{environment: ""}', "{agent_role: []}", "{environment: [7]}"])
def test_an_empty_visibility_condition_is_refused(tmp_path: Path, when: str) -> None:
    block = f"{{default: internal, conditions: [{{when: {when}, then: {{sensitivity: public}}}}]}}"
    text = MANIFEST.replace("    not_for:", f"    visibility: {block}\n    not_for:")
    text = text.replace("      - |\n        Initial adoption\n", "      - Initial adoption\n")
    knowledge, _ = _write(tmp_path, text)
    report = validate_file(MANIFEST_KIND, knowledge, 1 << 20)
    codes = {d.code for d in report.errors}
    assert "visibility_condition_empty" in codes, [str(d) for d in report.diagnostics]
    assert all(d.line == _line_of(text, "visibility:") for d in report.errors)


# -- class 6: integrity pinned by the verifier ---------------------------------------------------

SIGNED = """kcp_version: "0.30"
project: signed
version: "1.0.0"
trust:
  content_integrity:
    signing: {enabled: ENABLED, method: jws, key_id: "k1"}
compliance: {sensitivity: internal}
units:
  - {id: u, path: u.md, intent: "U", scope: project, audience: [agent]}
"""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _sign(path: Path, key: Ed25519PrivateKey) -> None:
    raw = path.read_bytes()
    head = _b64url(json.dumps({"alg": "EdDSA", "kid": "k1"}).encode())
    signature = key.sign(f"{head}.{_b64url(raw)}".encode("ascii"))
    path.with_name(path.name + ".sig").write_text(f"{head}..{_b64url(signature)}\n")


def _pem(tmp_path: Path, key: Ed25519PrivateKey) -> Path:
    out = tmp_path / "publisher.pem"
    out.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return out


_STRIPPED = {
    "block deleted": lambda t: t.replace("trust:\n  content_integrity:\n    signing: {enabled: ENABLED, method: jws, "
                                         'key_id: "k1"}\n', ""),
    "block nulled": lambda t: t.replace('\n    signing: {enabled: ENABLED, method: jws, key_id: "k1"}', " null"),
    "signing disabled": lambda t: t.replace("ENABLED", "false"),
    "signing removed": lambda t: t.replace('    signing: {enabled: ENABLED, method: jws, key_id: "k1"}',
                                           "    manifest_hash: null").replace("manifest_hash: null", "{}"),
}  # fmt: skip


@pytest.mark.parametrize("how", sorted(_STRIPPED))
def test_a_pinned_key_refuses_a_manifest_whose_signature_was_switched_off(tmp_path: Path, how: str) -> None:
    key = Ed25519PrivateKey.generate()
    knowledge, matrix = _write(tmp_path, _STRIPPED[how](SIGNED))
    assert "ENABLED" not in knowledge.read_text()
    _sign(knowledge, key)  # even a .sig lying next to it does not matter: nothing declares it
    with pytest.raises(ManifestIntegrityError, match="--manifest-key was given"):
        compile_bundle(
            [knowledge],
            matrix,
            POLICIES,
            tmp_path / "b.tar.gz",
            options=CompileOptions(manifest_keys=[key.public_key()]),
        )
    for command in (
        ("compile", str(knowledge), "--matrix", str(matrix), "-o", str(tmp_path / "c.tar.gz")),
        ("validate", "--format", "json", str(knowledge)),
    ):
        proc = run_cli(*command, "--manifest-key", str(_pem(tmp_path, key)))
        assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
        assert "--manifest-key was given" in proc.stdout + proc.stderr
    assert not (tmp_path / "c.tar.gz").exists()


@pytest.mark.parametrize("enabled", ["yes", '"true"', "1", "on", "'false '"])
def test_enabled_must_be_a_boolean_with_or_without_a_key(tmp_path: Path, enabled: str) -> None:
    key = Ed25519PrivateKey.generate()
    knowledge, matrix = _write(tmp_path, SIGNED.replace("ENABLED", enabled))
    _sign(knowledge, key)
    for keys in ([key.public_key()], []):
        with pytest.raises(ManifestIntegrityError, match="must be true or false"):
            compile_bundle(
                [knowledge], matrix, POLICIES, tmp_path / "b.tar.gz", options=CompileOptions(manifest_keys=keys)
            )
    proc = run_cli("validate", "--format", "json", str(knowledge))
    assert proc.returncode == 1 and "must be true or false" in proc.stdout, proc.stdout


def test_the_signed_manifest_still_compiles_under_its_key(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    knowledge, matrix = _write(tmp_path, SIGNED.replace("ENABLED", "true"))
    _sign(knowledge, key)
    compile_bundle(
        [knowledge], matrix, POLICIES, tmp_path / "b.tar.gz", options=CompileOptions(manifest_keys=[key.public_key()])
    )
    assert (tmp_path / "b.tar.gz").exists()
