"""Benchmark: the floor of one decision on regopy 1.5.2, with a minimal policy doing the same lookups.

Not a test: it measures, prints a table and writes bench/results-floor.json (part of `make
bench` through suite.py).

The question it answers: how fast can *any* policy decide the support-desk read
(`sd-read-clean`) on the engine we ship? The shipped bundle's data (the unit index, the
profiles, the matrix, the decision plan) is loaded beside one of the minimal modules in
bench/floor/, never beside the shipped policies:

- ``read_document.rego``: every lookup the shipped policy makes for this read, in one rule with
  no set built and no helper rule, answering the shipped decision document byte for byte;
- ``read_compact.rego``: the same lookups answering ``{"decision": "ALLOW"}`` alone (texts could come from data
  templates, typed by Python);
- ``k := 1``: nothing at all, the engine's own per-query cost;
- ``N comparisons``: one rule of N comparisons of input values, for the cost of one expression.

Each is timed as the gate runs its engine step (``query_entrypoint``: the input term, set,
query and output) with two inputs: the gate's whole input for the read, and the input trimmed
to what the minimal module reads (the least any input term can carry). The OPA reference runs
the same module on the same data and input. Both engines must give the same answer, and
``read_document`` must equal the shipped gate's decision document, or the benchmark fails.
The shipped gate's ``decide()`` and ``prepare()`` (the Python before the engine: the action
check, the context stage, the input) are timed in the same rounds: no ``decide()`` can cost less
than the least engine step plus ``prepare()``.

    .venv/bin/python bench/bench_floor.py [--rounds 7] [--per-round 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_growth import _interleaved_p50
from vouched import Vouched, expect

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.decide.engine import query_entrypoint
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

REPO = Path(__file__).resolve().parent.parent
FLOOR = REPO / "bench" / "floor"
ENTRYPOINT = "floor/decision"
#: The issue's target for regopy's engine step; the verdict compares the floor with it.
TARGET_REGOPY_STEP_US = 600.0
COMPARISONS = (0, 16, 32, 64)
#: What the minimal modules read of the context (everything else of the input is dropped).
CONTEXT_READ = ("decision_epoch_seconds", "decision_epoch_day", "action_created_epoch_seconds", "satisfied_controls")
FACTS_READ = ("evidence_status", "deployment_region", "agent_scope")


def comparisons_module(n: int) -> str:
    """One rule of ``n`` comparisons of input values (true for the read), answering ``{"decision": "ALLOW"}``."""
    lines = ["package floor", "", "import rego.v1", "", 'decision := {"decision": "ALLOW"} if {', "\ta := input.action"]
    lines += [f'\ta.tenant_id == "tenant_a"  # {i}' for i in range(n)]
    return "\n".join([*lines, "}", ""])


def trimmed(document: dict[str, Any]) -> dict[str, Any]:
    """The input cut to what the minimal modules read."""
    context = document["context"]
    facts = {name: context["facts"][name] for name in FACTS_READ}
    return {"action": document["action"], "context": {name: context[name] for name in CONTEXT_READ} | {"facts": facts}}


class Floor:
    """One module beside the shipped data, built once on regopy and loaded once on OPA."""

    def __init__(self, data: dict[str, Any], module: str) -> None:
        from opa_bindings import OpaEngine
        from regopy import Interpreter

        self.interp = Interpreter()
        self.interp.strict_built_in_errors = True  # as the gate's interpreter
        self.interp.add_data_json(canonical_json(data).decode("utf-8"))
        self.interp.add_module("floor.rego", module)
        self.built = self.interp.build(None, [ENTRYPOINT])
        assert self.built.ok(), self.built.node()
        self.opa = OpaEngine()
        self.opa.add_policy("floor.rego", module)
        self.opa.add_data(data)

    def regopy(self, document: dict[str, Any]) -> Any:
        return query_entrypoint(self.interp, self.built, ENTRYPOINT, document).value

    def on_opa(self, document: dict[str, Any]) -> Any:
        return self.opa.eval_document("floor.decision", document)


def run(rounds: int, per_round: int, tmp: Path) -> dict[str, Any]:
    cases = {case.case_id: case for case in load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml")}
    case = cases["sd-read-clean"]
    base = REPO / "fixtures" / "deployments" / "support-desk"
    bundle_path = tmp / "support-desk.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle_path)
    data = read_bundle(bundle_path).data
    gate = Gate.from_bundle(bundle_path, config=GateConfig(preflight=False))
    whole = dict(Vouched(gate, case.now).prepare(dict(case.action)).document)
    shipped = gate.engine.evaluate(whole).value or {}
    expect(shipped, ["ALLOW"], "support-desk read")
    inputs = {"the gate's input": whole, "trimmed input": trimmed(whole)}
    modules = {
        "k := 1": 'package floor\n\nimport rego.v1\n\ndecision := {"decision": "ALLOW"}\n',
        "read_document.rego": (FLOOR / "read_document.rego").read_text(),
        "read_compact.rego": (FLOOR / "read_compact.rego").read_text(),
    } | {f"{n} comparisons": comparisons_module(n) for n in COMPARISONS}
    floors = {name: Floor(data, module) for name, module in modules.items()}
    for name, floor in floors.items():
        for label, document in inputs.items():
            answer = floor.regopy(document)
            reference = floor.on_opa(document)
            assert answer == reference, f"{name} on {label}: regopy {answer!r}, OPA {reference!r}"
            wanted = shipped if name == "read_document.rego" else {"decision": "ALLOW"}
            assert answer == wanted, f"{name} on {label}: {answer!r}, not the shipped decision {wanted!r}"
    timed: dict[str, Callable[[], Any]] = {}
    for name, floor in floors.items():
        for label, document in inputs.items():
            timed[f"{name}|{label}|regopy"] = lambda f=floor, d=document: f.regopy(d)
            timed[f"{name}|{label}|opa"] = lambda f=floor, d=document: f.on_opa(d)
    vouched = Vouched(gate, case.now)
    read = dict(case.action)
    expect(vouched.decide(read), ["ALLOW"], "support-desk read")
    timed["shipped|decide"] = lambda: vouched.decide(read)
    timed["shipped|prepare"] = lambda: vouched.prepare(read)
    measured = _interleaved_p50(timed, rounds, per_round)
    shipped_decide, before_engine = measured.pop("shipped|decide"), measured.pop("shipped|prepare")
    rows: dict[str, Any] = {}
    for key, value in measured.items():
        name, label, engine = key.split("|")
        rows.setdefault(name, {}).setdefault(label, {})[f"{engine}_us"] = value
    slope = (rows[f"{COMPARISONS[-1]} comparisons"]["trimmed input"]["regopy_us"]
             - rows["0 comparisons"]["trimmed input"]["regopy_us"]) / COMPARISONS[-1]  # fmt: skip
    least = min(rows[name]["trimmed input"]["regopy_us"] for name in ("read_document.rego", "read_compact.rego"))
    return {
        "case": case.case_id,
        "shipped_decide_us": shipped_decide,
        "python_before_engine_us": before_engine,
        "floor_decide_us": least + before_engine,
        "rows": rows,
        "regopy_us_per_comparison": slope,
        "floor_regopy_step_us": least,
        "target_regopy_step_us": TARGET_REGOPY_STEP_US,
        "floor_exceeds_target": least > TARGET_REGOPY_STEP_US,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-floor.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcp-opa-floor-") as tmp:
        result = run(args.rounds, args.per_round, Path(tmp))
    table = Table(title="One support-desk read's engine step with a minimal module (p50 of per-round medians, us)")
    table.add_column("module beside the shipped data")
    for label in ("the gate's input", "trimmed input"):
        table.add_column(f"{label}: regopy", justify="right")
        table.add_column("OPA", justify="right")
    for name, by_input in result["rows"].items():
        cells = [f"{by_input[label][f'{e}_us']:,.0f}" for label in by_input for e in ("regopy", "opa")]
        table.add_row(name, *cells)
    Console(width=140).print(table)
    print(f"regopy per comparison of two input values: {result['regopy_us_per_comparison']:.1f} us")
    before = result["python_before_engine_us"]
    print(f"the shipped gate: decide() {result['shipped_decide_us']:,.0f} us, of which Python before the engine "
          f"(check, context stage, input: prepare()) {before:,.0f} us; a decide() around the least engine step: "
          f">= {result['floor_decide_us']:,.0f} us")  # fmt: skip
    verdict = "exceeds" if result["floor_exceeds_target"] else "is within"
    print(f"the least engine step doing the read's lookups on regopy, {result['floor_regopy_step_us']:,.0f} us, "
          f"{verdict} the {TARGET_REGOPY_STEP_US:,.0f} us target")  # fmt: skip
    args.output.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
