"""Gate.decide(): actions checked before anything is evaluated, the contract's decision JSON,
and the `decide` / `eval` commands as an agent's operator and an auditor run them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, VOUCH, run_cli, vouched_gate

from kcp_opa import ActionRejectedError, Gate
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.action import action_hash, parse_action, trace_id_of
from kcp_opa.models.decision import AuthorizationStatus, Outcome, RiskLevel, RoutingState

KYA_PATH = REPO / "fixtures" / "kya-supplier-payment-action.json"
KYA = json.loads(KYA_PATH.read_text())
KYA_HASH = "sha256:29a918d0341fc6c5fa77914b24525c23becdeef3de7db8e6171f2ebeecc8bf2b"
NOW = "2026-11-29T10:00:00Z"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def finance(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gate") / "finance.tar.gz"
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
    return out


@pytest.fixture(scope="module")
def gate(finance: Path) -> Gate:
    return vouched_gate(finance)


def _with(**changes: Any) -> dict[str, Any]:
    action = copy.deepcopy(KYA)
    action.update(changes)
    return action


def _nest(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


def test_kya_worked_example_typed(gate: Gate) -> None:
    decision = gate.decide(KYA, now=NOW)
    assert decision.action_hash == KYA_HASH == action_hash(KYA)
    assert decision.decision is RoutingState.HUMAN_APPROVAL
    assert decision.outcome is Outcome.REQUIRE_APPROVAL
    assert decision.authorization_status is AuthorizationStatus.PENDING_CONTROLS
    assert decision.risk_level is RiskLevel.HIGH
    assert decision.execution_allowed is False
    assert set(decision.required_controls) == {
        "standard_audit_logging",
        "user_confirmation",
        "identity_verification",
        "authority_verification",
        "beneficiary_verification",
        "independent_human_approval",
    }
    assert decision.evaluated_at == NOW
    assert decision.bundle_revision == gate.bundle_revision and len(gate.bundle_revision) == 64
    assert decision.policy_version == (REPO / "policies" / "VERSION").read_text().strip()


def test_decision_json_has_the_contract_fields_in_order(gate: Gate) -> None:
    document = gate.decide(KYA, now=NOW).to_dict()
    assert list(document) == [
        "schema_version",
        "decision_id",
        "action_hash",
        "decision",
        "outcome",
        "authorization_status",
        "execution_allowed",
        "risk_level",
        "required_controls",
        "satisfied_controls",
        "missing_controls",
        "reasons",
        "reason_codes",
        "violations",
        "obligations",
        "approver_roles",
        "policy_version",
        "bundle_revision",
        "bundle_sha256",
        "trace_id",
        "evaluated_at",
    ]
    assert document["bundle_sha256"] == gate.bundle.sha256
    assert document["schema_version"] == "2.0"
    assert json.loads(json.dumps(document)) == document


def test_the_caller_cannot_claim_satisfied_controls(gate: Gate) -> None:
    action = _with()
    prepared = gate.prepare(action, now=NOW)
    assert prepared.document["context"]["satisfied_controls"] == []
    with pytest.raises(TypeError):
        gate.decide(action, now=NOW, satisfied_controls=["independent_human_approval"])  # type: ignore[call-arg]


def test_same_input_same_decision(gate: Gate) -> None:
    prepared = gate.prepare(KYA, now=NOW)
    first, raw_first = gate.evaluate(prepared)
    second, raw_second = gate.evaluate(prepared)
    assert raw_first == raw_second and first == second


def test_trace_id_comes_from_traceparent_or_is_generated(gate: Gate) -> None:
    traced = gate.decide(_with(trace={"traceparent": TRACEPARENT}), now=NOW)
    assert traced.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    untraced = gate.decide(KYA, now=NOW)
    assert untraced.trace_id is not None and len(untraced.trace_id) == 32
    assert trace_id_of({"trace": {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}}) is None
    assert trace_id_of({"trace": {"traceparent": TRACEPARENT.upper()}}) is None


@pytest.mark.parametrize(
    ("action", "where", "fragment"),
    [
        (_with(amount={"value_minor": 8000.0, "currency": "USD"}), "/amount/value_minor", "float"),
        ({k: v for k, v in KYA.items() if k != "tenant_id"}, "", "'tenant_id' is required"),
        (_with(attributes={"new_beneficiary": True, "Password": "hunter2"}), "/attributes/Password", "secret"),
        (_with(target={**KYA["target"], "meta": [{"ACCESS_TOKEN": "t"}]}), "/target/meta/0/ACCESS_TOKEN", "secret"),
        (["not", "an", "object"], "", "must be a JSON object"),
        (_with(amount={"value_minor": -5, "currency": "USD"}), "/amount/value_minor", "minimum"),
        (_with(amount={"value_minor": 2**64, "currency": "USD"}), "/amount/value_minor", "64-bit"),
        (_with(idempotency_key="short"), "/idempotency_key", "at least 16 are required"),
        (_with(schema_version="1.0"), "/schema_version", "2.0"),
        (_with(attributes={"deep": _nest(40)}), "/attributes/deep", "deeper than 32"),
    ],
)
def test_malformed_actions_are_refused_before_evaluation(gate: Gate, action: Any, where: str, fragment: str) -> None:
    with pytest.raises(ActionRejectedError) as caught:
        gate.decide(action, now=NOW)
    assert caught.value.path.startswith(where)
    assert fragment in str(caught.value)


def test_ten_megabytes_of_nesting_is_refused_without_recursion() -> None:
    with pytest.raises(ActionRejectedError, match="over the 1024 KiB limit"):
        parse_action("[" * 10_000_000)
    with pytest.raises(ActionRejectedError, match="deeper than 32"):
        parse_action("[" * 500_000 + "]" * 500_000)
    with pytest.raises(ActionRejectedError, match="NaN"):
        parse_action('{"amount": NaN}')


def test_decide_many_refuses_the_whole_batch_naming_the_bad_action(gate: Gate) -> None:
    with pytest.raises(ActionRejectedError) as caught:
        gate.decide_many([KYA, _with(amount={"value_minor": 1.5, "currency": "USD"})], now=NOW)
    assert caught.value.path == "[1]/amount/value_minor"


def test_decision_time_must_be_rfc3339_with_zone(gate: Gate) -> None:
    with pytest.raises(ActionRejectedError, match="RFC 3339"):
        gate.decide(KYA, now="yesterday")
    with pytest.raises(ActionRejectedError, match="timezone"):
        gate.decide(KYA, now="2026-11-29T10:00:00")


# --- the CLI -------------------------------------------------------------------------------


def test_cli_decide_prints_the_decision(finance: Path) -> None:
    proc = run_cli("decide", *VOUCH, "-b", str(finance), "-i", str(KYA_PATH), "--now", NOW)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["decision"] == "HUMAN_APPROVAL" and document["action_hash"] == KYA_HASH
    enforced = run_cli("decide", *VOUCH, "-b", str(finance), "-i", str(KYA_PATH), "--enforce")
    assert enforced.returncode == 4


def test_cli_decide_reads_stdin(finance: Path) -> None:
    proc = run_cli("decide", *VOUCH, "-b", str(finance), "-i", "-", input_bytes=KYA_PATH.read_bytes())
    assert proc.returncode == 0 and json.loads(proc.stdout)["action_hash"] == KYA_HASH


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (json.dumps(_with(amount={"value_minor": 1.5, "currency": "USD"})), "float"),
        (json.dumps({k: v for k, v in KYA.items() if k != "tenant_id"}), "tenant_id"),
        (json.dumps(_with(password="x")), "secret"),
        ("[1, 2]", "must be a JSON object"),
        ("{", "not valid JSON"),
        ("[" * 10_000_000, "over the 1024 KiB limit"),
    ],
)
def test_cli_decide_refuses_malformed_actions_in_one_line(
    tmp_path: Path, finance: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "action.json"
    path.write_text(content)
    proc = run_cli("decide", *VOUCH, "-b", str(finance), "-i", str(path))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert fragment in proc.stderr and "nothing evaluated" in proc.stderr


def test_cli_decide_usage_errors(tmp_path: Path, finance: Path) -> None:
    missing = run_cli("decide", *VOUCH, "-b", str(tmp_path / "nope.tar.gz"), "-i", str(KYA_PATH))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    no_input = run_cli("decide", *VOUCH, "-b", str(finance), "-i", str(tmp_path / "nope.json"))
    assert no_input.returncode == 2 and "cannot read action" in no_input.stderr


def test_cli_eval_replays_an_archived_input_like_opa(tmp_path: Path, finance: Path) -> None:
    from opa_bindings import OpaEngine

    from kcp_opa.compile.bundle import read_bundle

    decided = run_cli("decide", *VOUCH, "-b", str(finance), "-i", str(KYA_PATH), "--now", NOW, "--with-input")
    archived = json.loads(decided.stdout)
    input_path = tmp_path / "input.json"
    input_path.write_text(json.dumps(archived["input"]))
    proc = run_cli("eval", "-b", str(finance), "-i", str(input_path), "data.kcp.gate.decision")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    value = result["result"][0]["expressions"][0]["value"]
    assert result["result"][0]["expressions"][0]["text"] == "data.kcp.gate.decision"
    policy_part = {k: archived["decision"][k] for k in value}
    assert value == policy_part

    bundle = read_bundle(finance)
    engine = OpaEngine()
    for name, source in bundle.modules.items():
        engine.add_policy(name, source)
    engine.add_data(bundle.data)
    assert engine.eval_document("kcp.gate.decision", archived["input"]) == value


def test_cli_eval_undefined_and_refused(finance: Path) -> None:
    undefined = run_cli("eval", "-b", str(finance), "data.kcp.nothing_here")
    assert undefined.returncode == 0 and json.loads(undefined.stdout) == {}
    refused = run_cli("eval", "-b", str(finance), "x := opa.runtime()")
    assert refused.returncode == 2 and "opa.runtime" in refused.stderr
    values = run_cli("eval", "-b", str(finance), "-f", "values", "1 + 1")
    assert json.loads(values.stdout) == [2]


def test_cli_eval_engine_opa_answers_as_regopy_does(tmp_path: Path, finance: Path) -> None:
    decided = run_cli("decide", *VOUCH, "-b", str(finance), "-i", str(KYA_PATH), "--now", NOW, "--with-input")
    input_path = tmp_path / "input.json"
    input_path.write_text(json.dumps(json.loads(decided.stdout)["input"]))
    args = ["eval", "-b", str(finance), "-i", str(input_path), "data.kcp.gate.decision"]
    on_regopy = run_cli(*args)
    on_opa = run_cli(*args, "--engine", "opa")
    assert on_opa.returncode == 0, on_opa.stderr
    assert json.loads(on_opa.stdout) == json.loads(on_regopy.stdout)
    assert json.loads(on_opa.stdout)["result"][0]["expressions"][0]["value"]["decision"] == "HUMAN_APPROVAL"
    # OPA's own answers: undefined is {}, values only, and a parse error is one line, exit 2.
    assert json.loads(run_cli("eval", "--engine", "opa", "-b", str(finance), "data.kcp.nothing_here").stdout) == {}
    values = run_cli("eval", "--engine", "opa", "-b", str(finance), "-f", "values", "1 + 1")
    assert json.loads(values.stdout) == [2]
    broken = run_cli("eval", "--engine", "opa", "-b", str(finance), "data.kcp.gate.decision +")
    assert broken.returncode == 2 and "rego_parse_error" in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1 and "Traceback" not in broken.stderr
    refused = run_cli("eval", "--engine", "opa", "-b", str(finance), "x := opa.runtime()")
    assert refused.returncode == 2 and "opa.runtime" in refused.stderr
