"""The regopy host: every hazard in engine-notes.md either cannot happen or becomes a
fail-closed DENY with reason engine_error, and the host process survives all of them.

Odd policies are real bundles: the shipped library with kcp/gate/decision.rego replaced.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import DEPLOYMENTS, POLICIES, REPO, vouched_gate

from kcp_opa.compile.bundle import BundleFile, read_bundle, tarball_bytes
from kcp_opa.compile.compiler import CompileOptions, compile_bundle
from kcp_opa.core.errors import CompileError, EngineLoadError
from kcp_opa.decide.engine import RegopyEngine, forbidden_builtin_calls
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.models.decision import RoutingState

KYA = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
NOW = "2026-11-29T10:00:00Z"

_ENTRYPOINT_HEADER = """# METADATA
# title: test decision
# entrypoint: true
"""


def _bundle_with_decision(tmp_path: Path, body: str, *, engine_check: bool = False) -> Path:
    """The finance deployment compiled with ``body`` as the kcp.gate decision module."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "kcp" / "gate" / "decision_test.rego").unlink()
    (policies / "kcp" / "gate" / "decision.rego").write_text(
        "package kcp.gate\n\nimport rego.v1\n\n" + body.replace("@entrypoint\n", _ENTRYPOINT_HEADER)
    )
    base = DEPLOYMENTS / "finance"
    out = tmp_path / "odd.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        policies,
        out,
        options=CompileOptions(engine_check=engine_check),
    )
    return out


def _assert_engine_error(gate: Gate) -> None:
    decision = gate.decide(KYA, now=NOW)
    assert decision.decision is RoutingState.DENY
    assert decision.reason_codes == ("engine_error",)
    assert decision.execution_allowed is False
    assert decision.engine_error
    assert decision.to_dict()["engine_error"] == decision.engine_error


def test_hazard_1_and_2_the_node_api_is_never_used() -> None:
    """Hazards 1 and 2 (.expressions() on a temporary / on undefined) crash the process: the
    package never calls regopy's Node wrappers; ``kcp_opa.decide.regoinput`` reads the node
    tree of an output it owns through the C API, then frees it (engine-findings item 23)."""
    for path in (REPO / "kcp_opa").rglob("*.py"):
        tree = ast.parse(path.read_text())
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"expressions", "binding", "node"}
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "built")
        ]
        assert not calls, f"{path}: Node API call at line {calls[0].lineno}"


def test_undefined_decision_is_an_engine_error(tmp_path: Path) -> None:
    bundle = _bundle_with_decision(tmp_path, '@entrypoint\ndecision := {"decision": "ALLOW"} if input.nope\n')
    _assert_engine_error(Gate.from_bundle(bundle))


def test_hazard_3_error_text_that_is_not_json(tmp_path: Path) -> None:
    body = '@entrypoint\ndecision := {"decision": x} if {\n\tx := io.jwt.decode_verify("a.b.c", {"secret": "s"})\n}\n'
    _assert_engine_error(Gate.from_bundle(_bundle_with_decision(tmp_path, body)))


def test_hazard_4_a_plan_that_aborts_regopy_is_refused_at_load(tmp_path: Path) -> None:
    body = (
        '_f if "a" in input.xs\n\n_g if _f with input as {"xs": ["a"]}\n\n'
        '@entrypoint\ndecision := {"decision": "ALLOW"} if _g\n'
    )
    # compile builds the decision plan with these modules in a child: the crash is a compile error there
    with pytest.raises(CompileError, match="regopy crashed"):
        _bundle_with_decision(tmp_path, body)
    # a bundle compiled from a tree with no evaluators (so no plan is built) meets the gate's own check
    policies = tmp_path / "bare"
    (policies / "kcp" / "gate").mkdir(parents=True)
    shutil.copy(POLICIES / "VERSION", policies / "VERSION")
    (policies / "kcp" / "gate" / "decision.rego").write_text(
        "package kcp.gate\n\nimport rego.v1\n\n" + body.replace("@entrypoint\n", _ENTRYPOINT_HEADER)
    )
    base = DEPLOYMENTS / "finance"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", policies, tmp_path / "bare.tar.gz")
    with pytest.raises(EngineLoadError, match="regopy crashed"):
        Gate.from_bundle(tmp_path / "bare.tar.gz")
    # ... and this process is still here to say so.


def test_hazard_5_a_silently_undefined_builtin_cannot_flip_a_guard(tmp_path: Path) -> None:
    """json.match_schema is undefined in regopy; without strict errors `not` would allow."""
    body = (
        "_bad if json.match_schema(input.action, {})[0] == false\n\n"
        "@entrypoint\n"
        'decision := {"decision": "ALLOW", "outcome": "allow", "authorization_status": "APPROVED",'
        ' "execution_allowed": true, "risk_level": "LOW", "required_controls": [], "satisfied_controls": [],'
        ' "missing_controls": [], "reasons": [], "reason_codes": [], "violations": [], "obligations": [],'
        ' "approver_roles": []} if not _bad\n'
    )
    _assert_engine_error(Gate.from_bundle(_bundle_with_decision(tmp_path, body)))


def test_hazard_6_time_reaches_policy_as_integers() -> None:
    gate = Gate.from_bundle(_finance(), config=GateConfig(preflight=False))
    context = gate.prepare(KYA, now="2026-11-29T10:00:00.123+01:00").document["context"]
    assert context["decision_epoch_seconds"] == 1795942800  # calendar.timegm((2026, 11, 29, 9, 0, 0))
    assert context["decision_epoch_day"] == 20786
    assert context["evaluated_at"] == "2026-11-29T09:00:00Z"


def test_hazard_7_data_cannot_shadow_a_policy_package(tmp_path: Path) -> None:
    original = read_bundle(_finance())
    manifest = json.loads(json.dumps(original.manifest))
    del manifest["metadata"]["kcp_opa"]["files"]  # as an older compiler wrote it: the engine check still holds
    manifest["revision"] = "hazard-7"  # a named revision: the content digest would refuse the edit first
    files = [BundleFile(".manifest", json.dumps(manifest).encode())]
    files += [BundleFile(name, source.encode()) for name, source in original.modules.items()]
    files.append(BundleFile("kcp_data/data.json", json.dumps(original.data["kcp_data"]).encode()))
    files.append(BundleFile("kcp/gate/data.json", json.dumps({"decision": {"decision": "ALLOW"}}).encode()))
    path = tmp_path / "shadow.tar.gz"
    path.write_bytes(tarball_bytes(files))
    with pytest.raises(EngineLoadError, match="shadow"):
        Gate.from_bundle(path, config=GateConfig(preflight=False))


@pytest.mark.parametrize("call", ["opa.runtime()", "time.now_ns()", 'http.send({"method": "get", "url": "http://x"})'])
def test_hazard_9_and_replay_breakers_are_refused(tmp_path: Path, call: str) -> None:
    bundle = _bundle_with_decision(tmp_path, f'@entrypoint\ndecision := {{"x": x}} if {{\n\tx := {call}\n}}\n')
    with pytest.raises(EngineLoadError, match=call.split("(")[0].replace(".", r"\.")):
        Gate.from_bundle(bundle)


def test_forbidden_builtins_ignore_comments_and_lookalikes() -> None:
    assert forbidden_builtin_calls({"a.rego": "# opa.runtime() is refused\nx := my.opa.runtime_x(1)\n"}) == []
    assert forbidden_builtin_calls({"a.rego": "x := 1\ny := opa.runtime ()\n"}) == ["a.rego:2: opa.runtime"]


def test_malformed_policy_output_is_an_engine_error(tmp_path: Path) -> None:
    body = '@entrypoint\ndecision := {"decision": "MAYBE", "outcome": "allow"}\n'
    _assert_engine_error(Gate.from_bundle(_bundle_with_decision(tmp_path, body)))


def test_a_bundle_without_the_decision_entrypoint_is_refused(tmp_path: Path) -> None:
    body = "# METADATA\n# title: no entrypoint here\ndecision := 1\n"
    bundle = _bundle_with_decision(tmp_path, body)
    with pytest.raises(EngineLoadError, match="not an entrypoint"):
        Gate.from_bundle(bundle)


def test_threads_share_one_gate(tmp_path: Path) -> None:
    gate = Gate.from_bundle(_finance())
    expected = gate.decide(KYA, now=NOW).to_dict()
    seen: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(25):
                seen.append(gate.decide(KYA, now=NOW).to_dict())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(seen) == 100
    strip = {"decision_id", "trace_id"}
    assert all(
        {k: v for k, v in d.items() if k not in strip} == {k: v for k, v in expected.items() if k not in strip}
        for d in seen
    )


def test_decide_many_with_threads_keeps_order() -> None:
    gate = vouched_gate(_finance(), preflight=False)
    small = {**KYA, "amount": {"value_minor": 100, "currency": "USD"}, "attributes": {}}
    decisions = gate.decide_many([KYA, small] * 10, now=NOW, workers=3)
    assert [d.decision for d in decisions] == [RoutingState.HUMAN_APPROVAL, RoutingState.USER_CONFIRMATION] * 10


def test_an_engine_in_a_fresh_process_survives_thousands_of_decisions() -> None:
    """No leak or crash over many evaluations (a child process, so a crash fails the test)."""
    code = (
        "import json, sys\n"
        "from kcp_opa.decide.gate import Gate\n"
        "from kcp_opa.decide.gateconfig import GateConfig\n"
        # VmHWM is this program's own peak; ru_maxrss also counts the forking parent (the test worker),
        # which can hide any growth below the parent's size
        "def peak(): return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "gate = Gate.from_bundle(sys.argv[1], config=GateConfig(preflight=False))\n"
        "action = json.loads(open(sys.argv[2]).read())\n"
        "for i in range(3000):\n"
        "    d = gate.decide(action, now='2026-11-29T10:00:00Z')\n"
        "    assert d.engine_error is None\n"
        "    if i == 499: base = peak()\n"
        "grown = peak() - base\n"
        "print(grown)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(_finance()), str(REPO / "fixtures" / "kya-supplier-payment-action.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip()) < 50_000, f"max RSS grew {proc.stdout.strip()} KiB over 2,500 decisions"


_FINANCE: list[Path] = []


def _finance() -> Path:
    if not _FINANCE:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="kcp-opa-engine-")) / "finance.tar.gz"
        base = DEPLOYMENTS / "finance"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, out)
        _FINANCE.append(out)
    return _FINANCE[0]


def test_engine_result_for_direct_use() -> None:
    engine = RegopyEngine(read_bundle(_finance()), preflight=False)
    assert engine.evaluate({"action": KYA, "context": {"decision_epoch_day": 20786}}).value is not None
    assert engine.evaluate({"action": 1.5}).error  # a float is refused by the input builder, not a crash


def test_a_cached_plan_decides_exactly_like_a_fresh_build(tmp_path: Path) -> None:
    """rego-cpp's binary plan (the preflight child's, which the default gate decides with, and
    the plan cache's) must give the same result as a fresh build on every decision case; a
    string formatting difference between the two once broke the JSON output
    (docs/engine-findings.md item 19)."""
    from kcp_opa.authoring.casecontext import case_input
    from kcp_opa.authoring.cases import case_files, load_cases

    cases = [case for path in case_files(REPO / "fixtures" / "cases") for case in load_cases(path)]
    for name in ("customer-onboarding", "support-desk", "finance"):
        base = DEPLOYMENTS / name
        bundle = tmp_path / f"{name}.tar.gz"
        compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", POLICIES, bundle)
        fresh = Gate.from_bundle(bundle, config=GateConfig(preflight=False, plan_cache=tmp_path / name))  # builds+saves
        assert list((tmp_path / name).glob("*.rbb"))
        cached = Gate.from_bundle(bundle, config=GateConfig(plan_cache=tmp_path / name))  # loads the saved plan
        preflighted = Gate.from_bundle(bundle)  # loads the plan its preflight child built
        for case in (c for c in cases if c.deployment == name):
            document = case_input(case, bundle_revision=fresh.bundle_revision).document
            built = fresh.engine.evaluate(document)
            for other in (cached, preflighted):
                loaded = other.engine.evaluate(document)
                assert built.error is None and loaded.error is None, (case.case_id, loaded.error)
                assert built.value == loaded.value, case.case_id


def test_a_preflighted_plan_goes_into_the_plan_cache(tmp_path: Path) -> None:
    """With a plan cache, the preflight child's plan is what gets cached (rego-cpp cannot save a
    plan it loaded: it crashes), and the next start loads it without a preflight."""
    bundle = _finance()
    first = vouched_gate(bundle, plan_cache=tmp_path / "plans")
    assert len(list((tmp_path / "plans").glob("*.rbb"))) == 1
    second = vouched_gate(bundle, plan_cache=tmp_path / "plans")
    one, two = first.decide(KYA, now=NOW), second.decide(KYA, now=NOW)
    assert one.decision is two.decision is RoutingState.HUMAN_APPROVAL
    assert (one.reason_codes, one.required_controls) == (two.reason_codes, two.required_controls)
