"""Attack class: talking the gate into a waiver it was never granted, or keeping one past its time.

An exception lifts a finding only when a registered issuer allowed to sign exceptions signed it,
a registered human with a granting role granted it, it runs no longer than the matrix allows,
and it waives no terminal denial. A forged, edited, unsigned or over-long file is refused whole
at load with one line; a terminal waiver is refused at load and a policy that marks a terminal
code waivable is refused by `kcp-opa check`. Applied, a waiver covers its scope only and stops
at expires_at to the second, on both engines, and the archived input replays it on OPA.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEPLOYMENTS, POLICIES, REPO, opa_query, run_cli
from exceptionkit import AGENT, exception, key, write_file, write_registry

from kcp_opa.authoring.casecontext import case_sources
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.context import SignedExceptions
from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.decide.gate import Gate
from kcp_opa.declare.exceptionfile import load_exceptions

NOW = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)
ISSUED, EXPIRES = NOW - dt.timedelta(hours=1), NOW + dt.timedelta(days=2)


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Any, Any]:
    signer = key()
    return signer, write_registry(tmp_path / "registry.yaml", signer)


def _refused(path: Path, registry: Any) -> str:
    with pytest.raises(ValidationFailedError) as caught:
        load_exceptions(path, registry)
    return str(caught.value)


def test_a_forged_file_is_refused_with_one_line(tmp_path: Path, signed: tuple[Any, Any]) -> None:
    _, registry = signed
    forger = key()  # same kid, not the registered key
    path = write_file(tmp_path / "forged.yaml", [exception(forger, issued=ISSUED, expires=EXPIRES)])
    assert "signature does not verify" in _refused(path, registry)
    proc = run_cli("exceptions", "check", str(path), "--trust", str(tmp_path / "registry.yaml"), "--format", "text")
    assert proc.returncode == 1 and "signature does not verify" in proc.stdout, proc.stdout + proc.stderr
    validated = run_cli("validate", str(path), str(tmp_path / "registry.yaml"), "--format", "json")
    report = json.loads(validated.stdout)[0]
    assert validated.returncode == 1 and report["errors"][0]["code"] == "exception_refused"
    assert report["errors"][0]["line"] == 5  # the entry's first line, under `exceptions:`


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda e: e.update(expires_at="2027-01-01T00:00:00Z"), id="expiry-extended-after-signing"),
        pytest.param(lambda e: e["scope"].pop("unit"), id="scope-widened-after-signing"),
        pytest.param(lambda e: e["waives"].append("unit_stale"), id="code-added-after-signing"),
        pytest.param(lambda e: e["signature"].update(value="00" * 64), id="signature-replaced"),
    ],
)
def test_an_exception_edited_after_signing_is_refused(tmp_path: Path, signed: tuple[Any, Any], edit: Any) -> None:
    signer, registry = signed
    item = exception(signer, issued=ISSUED, expires=EXPIRES)
    edit(item)
    path = write_file(tmp_path / "edited.yaml", [item])
    refused = _refused(path, registry)
    assert "the signature does not verify" in refused and "[exception_refused]" in refused


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"issuer": "other-app"}, "may not sign exceptions"),
        ({"grantor": "clerk@example.com"}, "no role the registry allows"),
        ({"grantor": AGENT}, "no role the registry allows"),
        ({"grantor": "nobody@example.com"}, "not a registered principal"),
    ],
)
def test_a_validly_signed_but_misattributed_exception_is_refused(
    tmp_path: Path, signed: tuple[Any, Any], fields: dict[str, str], why: str
) -> None:
    signer, registry = signed
    path = write_file(tmp_path / "misattributed.yaml", [exception(signer, issued=ISSUED, expires=EXPIRES, **fields)])
    assert why in _refused(path, registry)


def test_an_unsigned_exception_is_refused(tmp_path: Path, signed: tuple[Any, Any]) -> None:
    signer, registry = signed
    item = exception(signer, issued=ISSUED, expires=EXPIRES)
    del item["signature"]
    path = write_file(tmp_path / "unsigned.yaml", [item])
    assert "signature" in _refused(path, registry)


@pytest.mark.parametrize("field", ["id", "ticket"])
def test_a_signed_id_ending_in_a_line_break_is_refused(tmp_path: Path, signed: tuple[Any, Any], field: str) -> None:
    """jsonschema read `^...$` as Python does: `$` also matched before a final newline, so a signed
    `EXC-1\n` loaded, and regopy orders it unlike OPA (`min` picks the waiver's id: the engines
    named different exceptions). The schema's patterns now end where ECMA-262 ends them."""
    signer, registry = signed
    item = exception(signer, issued=ISSUED, expires=EXPIRES, **{field: "EXC-1\n" if field == "id" else "CHG-1\n"})
    path = write_file(tmp_path / "newline.yaml", [item])
    refusal = _refused(path, registry)
    assert "does not match" in refusal and field in refusal


def test_longer_than_the_matrix_allows_is_refused(tmp_path: Path, signed: tuple[Any, Any]) -> None:
    signer, registry = signed
    item = exception(signer, issued=ISSUED, expires=ISSUED + dt.timedelta(days=30, seconds=1))
    path = write_file(tmp_path / "long.yaml", [item])
    assert "longer than the matrix's maximum of 2592000 s" in _refused(path, registry)
    matrix = yaml.safe_load((DEPLOYMENTS / "support-desk" / "matrix.yaml").read_text())
    matrix.setdefault("parameters", {})["exceptions"] = {"max_lifetime_seconds": 3600}
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    short = write_file(
        tmp_path / "short.yaml", [exception(signer, issued=ISSUED, expires=ISSUED + dt.timedelta(hours=2))]
    )
    proc = run_cli(
        "exceptions", "check", str(short), "--trust", str(tmp_path / "registry.yaml"),
        "--matrix", str(tmp_path / "matrix.yaml"), "--now", "2026-11-29T10:00:00Z", "--format", "text",
    )  # fmt: skip
    assert proc.returncode == 1 and "longer than the matrix's maximum of 3600 s" in proc.stdout


def test_a_terminal_waiver_is_refused_at_load(tmp_path: Path, signed: tuple[Any, Any]) -> None:
    signer, registry = signed
    for code in ("tenant_boundary", "matrix_forbidden", "ai_training_forbidden", "evidence_forbidden"):
        path = write_file(tmp_path / f"{code}.yaml", [exception(signer, issued=ISSUED, expires=EXPIRES, waives=[code])])
        assert f"{code} is a terminal denial" in _refused(path, registry)
        proc = run_cli("validate", str(path), "--format", "json")
        assert proc.returncode == 1 and json.loads(proc.stdout)["errors"][0]["code"] == "terminal_not_waivable"


def test_check_refuses_a_policy_that_marks_a_terminal_code_waivable(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    # The shipped policy without its Rego tests: `check` plans each test file in a child (minutes);
    # the marking is found in the policy; the only other error is the generated union gone stale.
    shutil.copytree(POLICIES, policies, ignore=shutil.ignore_patterns("*_test.rego"))
    runtime = policies / "kcp" / "evaluators" / "runtime.rego"
    source = runtime.read_text(encoding="utf-8")
    marked = source.replace("# custom:\n#   requires:", "# custom:\n#   waivable: [tenant_boundary]\n#   requires:", 1)
    assert marked != source
    runtime.write_text(marked, encoding="utf-8")
    proc = run_cli("check", str(policies), "--format", "json")
    findings = json.loads(proc.stdout)["findings"]
    assert proc.returncode == 1
    assert any(f["code"] == "terminal_waivable" and f["file"] == "kcp/evaluators/runtime.rego" for f in findings)
    assert {f["code"] for f in findings if f["severity"] == "error"} <= {"terminal_waivable", "generated_stale"}
    generated = run_cli("generate", "--policies", str(policies), "--format", "json")
    assert generated.returncode != 0 and "tenant_boundary is a terminal denial" in generated.stderr


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = DEPLOYMENTS / "support-desk"
    out = tmp_path_factory.mktemp("exc") / "support-desk.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return out


# The support-desk cases' base action, reading `phone`, which customer-records does not declare.
_READ: dict[str, Any] = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text())["base_action"]
_READ["knowledge"]["fields_read"] = ["name", "email", "phone"]


class _Decider:
    """A gate whose host vouches for the facts its test actions state (as the decision cases
    do), plus the exceptions file: each decision's context is built through the real sources."""

    def __init__(self, bundle: Path, registry: Any, path: Path) -> None:
        self.gate, self.held = Gate.from_bundle(bundle), SignedExceptions(registry, path=path)

    def prepare(self, action: dict[str, Any], now: dt.datetime) -> Any:
        sources, principal = case_sources(action, {"from_action": True}, now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        assert sources is not None
        return self.gate.prepare(action, now=now, principal=principal, context=replace(sources, exceptions=self.held))

    def decide(self, action: dict[str, Any], now: dt.datetime) -> Any:
        return self.gate.decide_prepared(self.prepare(action, now))


def test_a_waiver_covers_its_scope_only_and_stops_at_expires_at_to_the_second(
    tmp_path: Path, signed: tuple[Any, Any], bundle: Path
) -> None:
    signer, registry = signed
    expires = NOW + dt.timedelta(hours=1)
    path = write_file(tmp_path / "exc.yaml", [exception(signer, issued=ISSUED, expires=expires)])
    gate = _Decider(bundle, registry, path)
    waived = gate.decide(_READ, NOW)
    codes = {r.code: r.waived_by for r in waived.verdict.reasons}
    assert codes == {"field_access_violation": "EXC-1", "exception_applied": None}
    assert waived.verdict.decision.value == "ALLOW"
    last = gate.prepare(_READ, expires - dt.timedelta(seconds=1))
    assert gate.gate.decide_prepared(last).verdict.decision.value == "ALLOW"
    assert gate.decide(_READ, expires).verdict.decision.value == "DENY"
    other_tenant = copy.deepcopy(_READ)
    other_tenant["tenant_id"] = other_tenant["target"]["tenant_id"] = "tenant_b"
    assert "exception_applied" not in gate.decide(other_tenant, NOW).verdict.reason_codes
    other_unit = copy.deepcopy(_READ)
    other_unit["knowledge"]["unit"] = "outbound-email"
    assert "exception_applied" not in gate.decide(other_unit, NOW).verdict.reason_codes
    # The archived input holds the exceptions it saw: OPA replays the waiver from it alone.
    replayed = opa_query(read_bundle(bundle), "data.kcp.gate.decision", json.loads(json.dumps(last.document)))
    assert replayed["decision"] == "ALLOW" and "exception_applied" in replayed["reason_codes"]


def test_an_exception_stated_in_the_action_changes_nothing(
    tmp_path: Path, signed: tuple[Any, Any], bundle: Path
) -> None:
    _, registry = signed
    path = write_file(tmp_path / "none.yaml", [])
    gate = _Decider(bundle, registry, path)
    action = copy.deepcopy(_READ)
    action["attributes"] = {"exception": "EXC-1", "waives": "field_access_violation", "waived": True}
    decision = gate.decide(action, NOW)
    assert decision.verdict.decision.value == "DENY" and "exception_applied" not in decision.verdict.reason_codes


def test_a_forged_reload_keeps_the_verified_exceptions(tmp_path: Path, signed: tuple[Any, Any], bundle: Path) -> None:
    signer, registry = signed
    path = write_file(tmp_path / "exc.yaml", [exception(signer, issued=ISSUED, expires=EXPIRES)])
    gate = _Decider(bundle, registry, path)
    write_file(path, [exception(key(), issued=ISSUED, expires=EXPIRES, id="EXC-2")])
    with pytest.raises(ValidationFailedError):
        gate.held.reload()
    assert [e["id"] for e in gate.held.exceptions()] == ["EXC-1"]
    assert gate.decide(_READ, NOW).verdict.decision.value == "ALLOW"


def test_exceptions_check_exits_1_on_an_expired_entry(tmp_path: Path, signed: tuple[Any, Any]) -> None:
    signer, _ = signed
    current = exception(signer, issued=ISSUED, expires=EXPIRES)
    expired = exception(signer, issued=ISSUED - dt.timedelta(days=2), expires=NOW, id="EXC-old")
    trust = ["--trust", str(tmp_path / "registry.yaml"), "--now", "2026-11-29T10:00:00Z"]
    fine = write_file(tmp_path / "fine.yaml", [current])
    assert run_cli("exceptions", "check", str(fine), *trust, "--format", "text").returncode == 0
    soon = run_cli("exceptions", "check", str(fine), *trust, "--expiring", "14d", "--format", "text")
    assert soon.returncode == 1 and "EXC-1 [expiring]" in soon.stdout
    stale = write_file(tmp_path / "stale.yaml", [current, expired])
    proc = run_cli("exceptions", "check", str(stale), *trust, "--format", "text")
    assert proc.returncode == 1 and "EXC-old [expired]" in proc.stdout and "EXC-1" not in proc.stdout
    listed = json.loads(run_cli("exceptions", "list", str(stale), *trust, "--format", "json").stdout)
    assert [(r["id"], r["state"], r["grantor"], r["expires_at"]) for r in listed["exceptions"]] == [
        ("EXC-1", "active", "dpo@example.com", "2026-12-01T10:00:00Z"),
        ("EXC-old", "expired", "dpo@example.com", "2026-11-29T10:00:00Z"),
    ]
