"""Attack class: an action built to the contract's size caps.

An agent that cannot talk its way past the gate may try to stall it: the largest lists the
action schema accepts (now 256 fields read, a delegation chain of 8 hops with 32 capabilities
each; the caps come from the measured cost curve, docs/input-contract.md "Sizes") used to cost
regopy seconds per decision, and a 64-hop chain of 256 capabilities made
regopy fail outright while OPA took 47 s (docs/engine-findings.md item 28). Here every such
action decides on the cross-checked gate, so regopy and OPA must return the same whole
document (an `engine_divergence` or `engine_error` fails the test), and one item past a cap is
refused with a one-line error naming the path. Names are at their maximum length too. The cost
is measured by bench/bench_growth.py (`hostile`).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import VOUCH, vouched_gate

from kcp_opa import ActionRejectedError
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.action import check_action
from kcp_opa.decide.gate import Gate

REPO = Path(__file__).resolve().parents[2]
CASES = yaml.safe_load((REPO / "fixtures" / "cases" / "support-desk.yaml").read_text(encoding="utf-8"))
NOW = CASES["now"]
MAX_HOPS, MAX_CAPABILITIES, MAX_FIELDS = 8, 32, 256  # kcp_opa/schemas/action-intent.schema.json


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = REPO / "fixtures" / "deployments" / "support-desk"
    out = tmp_path_factory.mktemp("oversized") / "support-desk.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", out)
    return out


@pytest.fixture(scope="module")
def gate(bundle: Path) -> Gate:
    return vouched_gate(bundle, cross_check="opa")


def _action(**changes: Any) -> dict[str, Any]:
    action = copy.deepcopy(CASES["base_action"])
    for key, value in changes.items():
        if key == "fields_read":
            action["knowledge"]["fields_read"] = value
        else:
            action[key] = value
    return action


def _chain(hops: int, capabilities: int, *, widen: bool) -> list[dict[str, Any]]:
    return [
        {"agent_id": f"agent-{h}", "capabilities": [f"cap{h if widen else ''}.{c}" for c in range(capabilities)]}
        for h in range(hops)
    ]


def test_fields_read_at_the_cap_all_undeclared(gate: Gate) -> None:
    fields = [f"field_{i:04d}" for i in range(MAX_FIELDS - 1, -1, -1)]
    decision = gate.decide(_action(fields_read=fields), now=NOW)
    assert decision.engine_error is None
    assert decision.reason_codes == ("field_access_violation",)
    (violation,) = decision.verdict.violations
    assert violation.fields == tuple(sorted(fields))


def test_fields_read_at_the_cap_repeating_declared_fields(gate: Gate) -> None:
    fields = ["name", "email", "customer_id", "plan"] * (MAX_FIELDS // 4)
    decision = gate.decide(_action(fields_read=fields), now=NOW)
    assert decision.engine_error is None
    assert decision.decision == "ALLOW", decision.reason_codes


def test_a_chain_at_the_caps_that_widens_at_every_hop(gate: Gate) -> None:
    decision = gate.decide(_action(delegation_chain=_chain(MAX_HOPS, MAX_CAPABILITIES, widen=True)), now=NOW)
    assert decision.engine_error is None
    assert set(decision.reason_codes) == {"capability_widened", "delegation_too_deep"}


def test_a_chain_at_the_caps_that_never_widens(gate: Gate) -> None:
    decision = gate.decide(_action(delegation_chain=_chain(MAX_HOPS, MAX_CAPABILITIES, widen=False)), now=NOW)
    assert decision.engine_error is None
    assert decision.reason_codes == ("delegation_too_deep",)


def test_a_chain_at_the_caps_that_narrows_by_suffix(gate: Gate) -> None:
    """Every hop narrows every capability by one ':' level: covered by prefix, never verbatim."""
    chain = [
        {"agent_id": f"agent-{h}", "capabilities": [f"cap.{c}" + ":n" * h for c in range(MAX_CAPABILITIES)]}
        for h in range(MAX_HOPS)
    ]
    decision = gate.decide(_action(delegation_chain=chain), now=NOW)
    assert decision.engine_error is None
    assert decision.reason_codes == ("delegation_too_deep",)


def test_names_at_their_maximum_length(gate: Gate) -> None:
    """256 fields of 256 characters and 8x32 capabilities of 128: every string at its cap too.

    An anchored regex over the joined names (~30,000 characters and up) crashed regopy with
    SIGSEGV, taking the whole process down (docs/engine-findings.md item 31): this would kill
    the test run, not fail an assertion.
    """
    fields = [f"f{i:04d}_" + "x" * 250 for i in range(MAX_FIELDS)]
    assert {len(f) for f in fields} == {256}
    decision = gate.decide(_action(fields_read=fields), now=NOW)
    assert decision.engine_error is None
    assert decision.reason_codes == ("field_access_violation",)
    chain = [
        {"agent_id": f"agent-{h}", "capabilities": [f"c{h:02d}.{c:02d}." + "y" * 121 for c in range(MAX_CAPABILITIES)]}
        for h in range(MAX_HOPS)
    ]
    assert {len(c) for hop in chain for c in hop["capabilities"]} == {128}
    decision = gate.decide(_action(delegation_chain=chain), now=NOW)
    assert decision.engine_error is None
    assert set(decision.reason_codes) == {"capability_widened", "delegation_too_deep"}


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"fields_read": ["f"] * (MAX_FIELDS + 1)}, "knowledge/fields_read"),
        ({"delegation_chain": _chain(MAX_HOPS + 1, 1, widen=False)}, "delegation_chain"),
        ({"delegation_chain": _chain(2, MAX_CAPABILITIES + 1, widen=False)}, "capabilities"),
    ],
    ids=["fields", "hops", "capabilities"],
)
def test_one_past_a_cap_is_refused(changes: dict[str, Any], path: str, gate: Gate) -> None:
    """Also through ``Gate.decide`` (the library; the CLI, HTTP and MCP go through it): the caps
    were 1,024 fields, 16 hops and 64 capabilities, so each of these was admitted before."""
    for attempt in (lambda: check_action(_action(**changes)), lambda: gate.decide(_action(**changes), now=NOW)):
        with pytest.raises(ActionRejectedError) as refused:
            attempt()
        assert path in str(refused.value)
        assert "\n" not in str(refused.value)
        assert "items; at most" in str(refused.value) and len(str(refused.value)) < 300  # not the list echoed


def test_the_cli_refuses_one_hop_past_the_cap_with_exit_1(bundle: Path, tmp_path: Path) -> None:
    action = tmp_path / "action.json"
    action.write_text(json.dumps(_action(delegation_chain=_chain(MAX_HOPS + 1, 1, widen=False))), encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kcp_opa",
            "decide",
            *VOUCH,
            "-b",
            str(bundle),
            "-i",
            str(action),
            "--now",
            NOW,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-500:])
    assert "delegation_chain" in proc.stderr
    assert "Traceback" not in proc.stderr
