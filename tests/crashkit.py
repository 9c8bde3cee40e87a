"""TEST-ONLY bundles whose policy crashes or stalls rego-cpp on a chosen input (issue 30).

The shipped policies plus one module in ``kcp.gate`` that adds a ``decision`` definition which
never holds but is evaluated on every decision: its body first runs what the input asks for.

- ``crash``: ``regex.match`` with an anchored, repeated character class over the concatenated
  ``knowledge.fields_read``; at ~30,000 characters and more this ends the evaluating process
  with SIGSEGV (docs/engine-findings.md item 31), on regopy only (OPA answers).
- ``slow``: with ``attributes.kcp_test_slow`` set, a comprehension over a few million numbers
  (seconds on regopy): a worker that is busy long enough to be killed mid-decision or to
  overrun a deadline.

Short inputs decide exactly as the shipped policy does.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from conftest import DEPLOYMENTS, POLICIES, REPO

from kcp_opa.compile.compiler import CompileOptions, compile_bundle

PROBE = """package kcp.gate

import rego.v1

# TEST-ONLY (tests/crashkit.py): never defined, evaluated on every decision.
decision := {"kcp_test_probe": true} if {
	regex.match(`^[A-Za-z0-9_.:/@+~=#*-]*$`, concat("", object.get(input.action, ["knowledge", "fields_read"], [])))
	slow_probe
	input.action.action_id == "kcp-test-never"
}

slow_probe if not input.action.attributes.kcp_test_slow

slow_probe if {
	input.action.attributes.kcp_test_slow
	count([x | some x in numbers.range(1, 3000000); x % 7 == 0]) > 0
}
"""
KYA: dict[str, Any] = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
#: Past the ~30,000 characters that crash rego-cpp, well inside the contract (1,024 names of 256).
CRASH_FIELDS = [f"{'f' * 244}{i:06d}" for i in range(200)]


def probe_policies(work: Path) -> Path:
    """The shipped policies and the probe module, in ``work/policies``."""
    policies = work / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "kcp" / "gate" / "kcp_test_probe.rego").write_text(PROBE, encoding="utf-8")
    return policies


def probe_bundle(work: Path, deployment: str = "finance", trust: Path | None = None) -> Path:
    """The deployment compiled over the probe policies (``trust``: the registry to compile with)."""
    base = DEPLOYMENTS / deployment
    out = work / f"{deployment}-probe.tar.gz"
    compile_bundle(
        [base / "knowledge.yaml"],
        base / "matrix.yaml",
        probe_policies(work),
        out,
        options=CompileOptions(trust_path=trust),
    )
    return out


def crashing(action: dict[str, Any] = KYA, action_id: str = "act_crash_001") -> dict[str, Any]:
    """``action`` with 50,000 characters of field names: evaluating it ends the process (SIGSEGV)."""
    out = copy.deepcopy(action)
    out["action_id"] = action_id
    knowledge = out.get("knowledge") or {"project": "treasury", "unit": "supplier-payments"}
    out["knowledge"] = {**knowledge, "fields_read": list(CRASH_FIELDS)}
    return out


def slow(action: dict[str, Any] = KYA, action_id: str = "act_slow_001") -> dict[str, Any]:
    """``action`` whose evaluation keeps regopy busy for seconds."""
    out = copy.deepcopy(action)
    out["action_id"] = action_id
    out["attributes"] = {**out.get("attributes", {}), "kcp_test_slow": True}
    return out
