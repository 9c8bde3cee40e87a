"""Benchmark: where the engine step of one decision goes, by probe entrypoints beside the gate.

Not a test: it measures, prints a table and writes bench/results-engine.json (part of
`make bench` through suite.py).

The shipped bundle is loaded into one regopy interpreter and one OPA engine together with a
probe module (``kcp.bench.probe``) whose rules each stop at one stage of a decision:

- ``k := 1``: the per-query floor (also measured in an interpreter holding nothing else);
- ``unit``: finding the unit and its profile (``facts.unit``, ``facts.profile``);
- ``findings``: every evaluator's findings (the union the decision is built from), and one rule
  per evaluator (``count`` of its findings: each includes the lookups it shares with others);
- the decision entrypoint itself, ``kcp.gate.decision``.

On regopy the input is set once and each probe's query (and its output) is timed alone; the
input term (``rego_input``) and ``set_input`` are timed apart, and the whole engine step
(``query_entrypoint``: term, set, query, output, as the gate runs it) beside them. OPA's
``eval_document`` converts the input on every call, so each OPA figure includes it. Stage costs
are differences of probes (unit lookup = ``unit`` - ``k``; evaluators = ``findings`` - ``unit``;
assembling the decision = decision - ``findings``). Inputs: the support-desk read
(``sd-read-clean``), the KYA supplier payment (finance), and support-desk's tenant breach with a
risky refund, whose extra findings give the cost of one finding. Each is prepared with the
context a host vouches for (bench/vouched.py) and must decide as intended (ALLOW,
HUMAN_APPROVAL, DENY), never be held for missing context.

    .venv/bin/python bench/bench_engine.py [--rounds 7] [--per-round 30]
"""

from __future__ import annotations

import argparse
import json
import re
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
from kcp_opa.compile.bundle import LoadedBundle, read_bundle
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.core.canonical import canonical_json
from kcp_opa.decide.engine import query_entrypoint
from kcp_opa.decide.gate import DECISION_ENTRYPOINT, Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.decide.regoinput import read_results, rego_input

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-11-29T10:00:00Z"
PROBE_PACKAGE = "kcp.bench.probe"


def evaluator_names(bundle: LoadedBundle) -> list[str]:
    """Every evaluator module in the bundle (kcp/evaluators/<name>.rego), so a new one is probed too.
    A probe times the evaluator reached on its own, whether or not the decision plan reaches it."""
    found = set()
    for path in bundle.modules:
        found.update(re.findall(r"^kcp/evaluators/(\w+)\.rego$", path))
    return sorted(name for name in found if not name.endswith("_test"))


def probe_module(evaluators: list[str]) -> str:
    lines = [
        f"package {PROBE_PACKAGE}",
        "",
        "import rego.v1",
        "",
        "import data.kcp.lib.facts",
        "",
        "k := 1",
        "",
        "unit := [is_object(facts.unit), is_object(facts.profile)]",
        "",
        "findings := count(data.kcp.gate.findings)",
    ]
    lines += [f"ev_{name} := count(data.kcp.evaluators.{name}.findings)" for name in evaluators]
    return "\n".join(lines) + "\n"


class Probes:
    """The bundle plus the probe module, planned once on regopy and loaded once on OPA."""

    def __init__(self, bundle: LoadedBundle) -> None:
        from opa_bindings import OpaEngine
        from regopy import Interpreter

        self.evaluators = evaluator_names(bundle)
        self.rules = ["k", "unit", "findings", *(f"ev_{name}" for name in self.evaluators)]
        module = probe_module(self.evaluators)
        self.entrypoints = {rule: f"{PROBE_PACKAGE.replace('.', '/')}/{rule}" for rule in self.rules}
        self.interp = Interpreter()
        self.interp.strict_built_in_errors = True  # as the gate's interpreter
        self.interp.add_data_json(canonical_json(bundle.data).decode("utf-8"))
        for name, source in sorted(bundle.modules.items()):
            self.interp.add_module(name, source)
        self.interp.add_module("kcp/bench/probe.rego", module)
        self.built = self.interp.build(None, [DECISION_ENTRYPOINT, *self.entrypoints.values()])
        assert self.built.ok(), self.built.node()
        self.alone = Interpreter()
        self.alone.add_module("probe.rego", f"package {PROBE_PACKAGE}\n\nimport rego.v1\n\nk := 1\n")
        self.alone_built = self.alone.build(None, [self.entrypoints["k"]])
        self.opa = OpaEngine()
        for name, source in sorted(bundle.modules.items()):
            self.opa.add_policy(name, source)
        self.opa.add_policy("kcp/bench/probe.rego", module)
        self.opa.add_data(bundle.data)

    def query(self, interp: Any, built: Any, entrypoint: str) -> Any:
        """One query on the input already set; the output is read (as the gate reads it)."""
        from regopy import rego_shared as native

        output = native.rego_bundle_query_entrypoint(interp._impl, built._impl, entrypoint)
        try:
            assert native.rego_output_ok(output), native.rego_output_string(output)
            return read_results(native.rego_output_node(output))[0][0]
        finally:
            native.rego_free_output(output)

    def check(self, document: dict[str, Any]) -> int:
        """Both engines agree on every probe for this input; returns the number of findings."""
        self.interp.set_input(rego_input(document))
        for rule, entrypoint in self.entrypoints.items():
            on_regopy = self.query(self.interp, self.built, entrypoint)
            on_opa = self.opa.eval_document(f"{PROBE_PACKAGE}.{rule}", dict(document))
            assert on_regopy == on_opa, f"probe {rule}: regopy {on_regopy!r} != OPA {on_opa!r}"
        decision = query_entrypoint(self.interp, self.built, DECISION_ENTRYPOINT, document).value
        assert decision == self.opa.eval_document("kcp.gate.decision", dict(document)), "decision diverged"
        findings: int = self.opa.eval_document(f"{PROBE_PACKAGE}.findings", dict(document))
        return findings

    def timers(self, name: str, document: dict[str, Any], split: bool) -> dict[str, Callable[[], Any]]:
        """Timed functions for one input; ``split`` adds every probe, not only the whole step."""
        data = dict(document)
        out: dict[str, Callable[[], Any]] = {
            f"{name}/regopy/engine_step": lambda: query_entrypoint(self.interp, self.built, DECISION_ENTRYPOINT, data),
            f"{name}/opa/engine_step": lambda: self.opa.eval_document("kcp.gate.decision", data),
        }
        if not split:
            return out
        out[f"{name}/regopy/input_term"] = lambda: rego_input(data)
        out[f"{name}/regopy/input_term_and_set"] = lambda: self.interp.set_input(rego_input(data))
        out[f"{name}/regopy/k_alone"] = lambda: self.query(self.alone, self.alone_built, self.entrypoints["k"])
        for rule, entrypoint in self.entrypoints.items():
            out[f"{name}/regopy/{rule}"] = lambda e=entrypoint: self.query(self.interp, self.built, e)
            out[f"{name}/opa/{rule}"] = lambda r=rule: self.opa.eval_document(f"{PROBE_PACKAGE}.{r}", data)
        out[f"{name}/regopy/decision"] = lambda: self.query(self.interp, self.built, DECISION_ENTRYPOINT)
        out[f"{name}/opa/decision"] = out[f"{name}/opa/engine_step"]
        return out

    def close(self) -> None:
        self.opa.close()


def _stages(times: dict[str, float], engine: str, evaluators: list[str]) -> dict[str, float]:
    """Stage costs (us) from the probe times of one engine on one input."""
    out = {
        "floor_us": times["k"],
        "unit_lookup_us": times["unit"] - times["k"],
        "evaluators_us": times["findings"] - times["unit"],
        "assembly_us": times["decision"] - times["findings"],
        "engine_step_us": times["engine_step"],
    }
    if engine == "regopy":
        out["floor_alone_us"] = times["k_alone"]
        out["input_term_us"] = times["input_term"]
        out["set_input_us"] = times["input_term_and_set"] - times["input_term"]
    for name in evaluators:
        out[f"ev_{name}_us"] = times[f"ev_{name}"] - times["k"]
    return out


def run(rounds: int, per_round: int, tmp: Path) -> dict[str, Any]:
    cases = {case.case_id: case for case in load_cases(REPO / "fixtures" / "cases" / "support-desk.yaml")}
    kya = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
    breach = cases["sd-tenant-breach-and-risky-refund"]
    inputs = {  # name: (deployment, action, now, split into probes)
        "support-desk read": ("support-desk", dict(cases["sd-read-clean"].action), cases["sd-read-clean"].now, True),
        "KYA supplier payment": ("finance", kya, NOW, True),
        "support-desk tenant breach + risky refund": ("support-desk", dict(breach.action), breach.now, False),
    }
    intended = {"support-desk read": "ALLOW", "KYA supplier payment": "HUMAN_APPROVAL"}
    intended["support-desk tenant breach + risky refund"] = "DENY"
    probes: dict[str, Probes] = {}
    documents: dict[str, dict[str, Any]] = {}
    findings: dict[str, int] = {}
    for name, (deployment, action, now, _) in inputs.items():
        if deployment not in probes:
            base = REPO / "fixtures" / "deployments" / deployment
            bundle = tmp / f"{deployment}.tar.gz"
            compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle)
            probes[deployment] = Probes(read_bundle(bundle))
            gate = Gate.from_bundle(bundle, config=GateConfig(preflight=False))
        documents[name] = dict(Vouched(gate, now).prepare(action).document)
        expect(gate.engine.evaluate(documents[name]).value or {}, [intended[name]], name)
        findings[name] = probes[deployment].check(documents[name])
    # Interleaved rounds; within a round each input's functions run with that input set, since
    # the probe queries read the input already in the interpreter.
    per_round_p50: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, (deployment, _, _, split) in inputs.items():
            probe = probes[deployment]
            probe.interp.set_input(rego_input(documents[name]))
            timed = probe.timers(name, documents[name], split)
            for key, value in _interleaved_p50(timed, 1, per_round).items():
                per_round_p50.setdefault(key, []).append(value)
    for probe in probes.values():
        probe.close()
    measured = {key: sorted(values)[len(values) // 2] for key, values in per_round_p50.items()}
    evaluators = next(iter(probes.values())).evaluators
    result: dict[str, Any] = {"evaluators": evaluators, "inputs": {}}
    for name, (_, _, _, split) in inputs.items():
        row: dict[str, Any] = {"findings": findings[name]}
        for engine in ("regopy", "opa"):
            times = {key.split("/")[2]: value for key, value in measured.items() if key.startswith(f"{name}/{engine}/")}
            row[engine] = _stages(times, engine, evaluators) if split else {"engine_step_us": times["engine_step"]}
        row["engine_ratio"] = row["regopy"]["engine_step_us"] / row["opa"]["engine_step_us"]
        result["inputs"][name] = row
    clean, busy = result["inputs"]["support-desk read"], result["inputs"]["support-desk tenant breach + risky refund"]
    extra = busy["findings"] - clean["findings"]
    result["per_finding"] = {"extra_findings": extra} | {
        f"{engine}_us": (busy[engine]["engine_step_us"] - clean[engine]["engine_step_us"]) / extra
        for engine in ("regopy", "opa")
    }
    return result


STAGES = (
    ("floor_alone_us", "k := 1 in an interpreter holding nothing else"),
    ("floor_us", "k := 1 beside the shipped bundle: the per-query floor"),
    ("input_term_us", "the input term (rego_input)"),
    ("set_input_us", "set_input"),
    ("unit_lookup_us", "finding the unit and its profile"),
    ("evaluators_us", "every evaluator's findings, beyond the lookup"),
    ("assembly_us", "assembling the decision (and its output)"),
    ("engine_step_us", "whole engine step (term, set, query, output)"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=30)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-engine.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcp-opa-engine-") as tmp:
        result = run(args.rounds, args.per_round, Path(tmp))
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    out = Console(width=200)
    split = {name: row for name, row in result["inputs"].items() if "floor_us" in row["regopy"]}
    table = Table(title="The engine step by probe entrypoint (p50 of per-round medians, us; OPA includes its input)")
    table.add_column("stage")
    for name in split:
        table.add_column(f"{name}: regopy", justify="right")
        table.add_column("OPA", justify="right")
    rows = [*STAGES, *((f"ev_{name}_us", f"evaluator {name} (incl. shared lookups)") for name in result["evaluators"])]
    for key, label in rows:
        cells = []
        for row in split.values():
            cells += [f"{row['regopy'][key]:,.0f}", f"{row['opa'][key]:,.0f}" if key in row["opa"] else "-"]
        table.add_row(label, *cells)
    out.print(table)
    for name, row in result["inputs"].items():
        print(f"{name}: {row['findings']} findings, engine step regopy/OPA {row['engine_ratio']:.2f}")
    item = result["per_finding"]
    print(
        f"one more finding ({item['extra_findings']} extra, tenant breach + risky refund vs read): "
        f"regopy {item['regopy_us']:.0f} us, OPA {item['opa_us']:.0f} us"
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
