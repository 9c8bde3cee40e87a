"""Benchmark: Gate.decide() and the engine step, regopy beside the OPA reference, same run.

Not a test: it measures, prints a table and writes bench/results-decide.json.

For each bundle (the reference deployments, and generated ones of 10 / 1,000 / 100,000 units)
it times, on the same prepared inputs:
- ``decide``: the whole ``Gate.decide()`` (action check, hash, input, regopy, typing; no ledger);
- ``python``: building the input (action check, schema, hash, time, ids), the Python part;
- ``regopy``: the engine step alone (input term + evaluation of the built entrypoint + output);
- ``opa``: the OPA reference engine's ``eval_document`` of the same bundle and input;
measured in interleaved rounds so machine noise hits all three alike, and checks the two
engines return the same decision for every input. Every input is decided with the context a
host vouches for (bench/vouched.py) and must decide as its case expects (never a refusal for
missing context): a benchmark times production's path or fails.

    .venv/bin/python bench/bench_decide.py [--sizes 10,1000,100000] [--rounds 20] [--per-round 50]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import manifest_text, matrix_text, pinned_reads
from vouched import Vouched, expect

from kcp_opa.authoring.cases import load_cases
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate, build_input
from kcp_opa.decide.gateconfig import GateConfig

REPO = Path(__file__).resolve().parent.parent


def signature(decision: dict[str, Any]) -> str:
    """The whole decision document, but the text that names the unit read (a reason's message,
    its ``unit`` reference): what must be equal for two reads to be the same decision."""
    reasons = [
        {k: ("<unit read>" if k == "unit" else v) for k, v in reason.items() if k != "message"}
        for reason in decision.get("reasons", [])
    ]
    return json.dumps({**decision, "reasons": reasons}, sort_keys=True)


NOW = "2026-11-29T10:00:00Z"
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


#: What the synthetic reads (first, middle, last unit: synthetic.pinned_reads) decide at every size.
SYNTHETIC_EXPECTED = ("ALLOW", "ALLOW", "HUMAN_APPROVAL")


def _reference_inputs() -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """Per deployment: the chosen cases' actions and the decision each case expects."""
    chosen = {
        "finance": ["fin-kya-supplier-payment", "fin-supplier-payment-kcp-bound"],
        "support-desk": ["sd-read-clean", "sd-refund-high-risk", "sd-tenant-breach-and-risky-refund"],
    }
    out = []
    for deployment, ids in chosen.items():
        cases = {case.case_id: case for case in load_cases(REPO / "fixtures" / "cases" / f"{deployment}.yaml")}
        out.append((deployment, [dict(cases[i].action) for i in ids], [cases[i].expect.decision for i in ids]))
    return out


def _synthetic_matrix() -> str:
    """The synthetic filler matrix plus a `read` row that covers every unit's cells."""
    base = matrix_text(200)
    read_row = (
        "task_types:\n"
        "  read:\n"
        "    data_categories: {personal: autonomous, contact: autonomous, financial: confirm,"
        " health: approve, location: autonomous}\n"
        "    sensitivity: {public: autonomous, internal: autonomous, confidential: confirm, restricted: approve}\n"
    )
    return base.replace("task_types:\n", read_row, 1)


def _synthetic_action(unit: int) -> dict[str, Any]:
    return {
        "schema_version": "2.0",
        "action_id": f"act_bench_{unit}",
        "idempotency_key": f"idem_bench_{unit:010d}",
        "tenant_id": "tenant_a",
        "subject_id": "user_1",
        "agent_id": "bench-agent/v1",
        "action_type": "read",
        "requested_action": "kb.read",
        "target": {"type": "document", "reference": f"doc_{unit}", "tenant_id": "tenant_a"},
        "authorization_context": {"requested_by": "user_1", "agent_scope": ["kb.read"], "actor_role": "support_agent"},
        "knowledge": {"project": "synthetic", "unit": f"unit-{unit:06d}", "fields_read": ["name", "email"]},
        "runtime": {
            "deployment_region": "EEA",
            "model": {"id": "m", "hosting": "self_hosted"},
            "risk_level": "low",
            "evidence_status": "present",
            "budget_state": "within_budget",
        },
        "trace": {"traceparent": TRACE},
        "created_at": "2026-11-29T09:59:00Z",
    }


def _opa_engine(gate: Gate) -> tuple[Any, float]:
    from opa_bindings import OpaEngine

    start = time.perf_counter()
    engine = OpaEngine()
    for name, source in sorted(gate.bundle.modules.items()):
        engine.add_policy(name, source)
    engine.add_data(gate.bundle.data)
    engine.eval_document("kcp.gate.decision", {})  # prepare the query once
    return engine, time.perf_counter() - start


def _timed(fn: Callable[[], Any], count: int, into: list[float]) -> None:
    for _ in range(count):
        start = time.perf_counter()
        fn()
        into.append(time.perf_counter() - start)


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_us": ordered[len(ordered) // 2] * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
        "mean_us": statistics.fmean(ordered) * 1e6,
        "per_s": len(ordered) / sum(ordered),
        "n": len(ordered),
    }


def measure(
    name: str, bundle: Path, actions: list[dict[str, Any]], expected: list[str], rounds: int, per_round: int
) -> dict[str, Any]:
    start = time.perf_counter()
    gate = Gate.from_bundle(bundle, config=GateConfig(preflight=False))  # compiled just now by this script
    regopy_load = time.perf_counter() - start
    opa, opa_load = _opa_engine(gate)
    vouched = Vouched(gate, NOW)
    prepared = [vouched.prepare(action) for action in actions]
    divergences = 0
    signatures = []
    for index, item in enumerate(prepared):
        on_regopy = gate.engine.evaluate(item.document)
        on_opa = opa.eval_document("kcp.gate.decision", dict(item.document))
        expect(on_opa, [expected[index]], f"{name} input {index}")
        expect(vouched.decide(actions[index]), [expected[index]], f"{name} input {index}, decide()")
        signatures.append(signature(on_opa))
        if on_regopy.error is not None or on_regopy.value != on_opa:
            divergences += 1
    samples: dict[str, list[float]] = {"decide": [], "python": [], "regopy": [], "opa": []}
    for round_index in range(rounds):
        action = actions[round_index % len(actions)]
        item = prepared[round_index % len(prepared)]
        document = dict(item.document)
        context = vouched.context(action)
        _timed(lambda a=action: vouched.decide(a), per_round, samples["decide"])
        _timed(lambda a=action, c=context: build_input(a, now=NOW, **c), per_round, samples["python"])
        _timed(lambda i=item: gate.engine.evaluate(i.document), per_round, samples["regopy"])
        _timed(lambda d=document: opa.eval_document("kcp.gate.decision", d), per_round, samples["opa"])
    opa.close()
    result = {key: _summary(values) for key, values in samples.items()}
    return {
        "bundle": name,
        "units": gate.bundle.data["kcp_data"]["units"]["count"],
        "bundle_bytes": bundle.stat().st_size,
        "regopy_load_s": regopy_load,
        "opa_load_s": opa_load,
        "divergences": divergences,
        "signatures": signatures,
        "inputs": len(actions),
        **result,
        "engine_ratio_regopy_over_opa": result["regopy"]["p50_us"] / result["opa"]["p50_us"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,100000", help="generated deployment sizes (units)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-decide.json")
    args = parser.parse_args()
    console = Console(stderr=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcp-opa-bench-") as tmp:
        for deployment, actions, expected in _reference_inputs():
            base = REPO / "fixtures" / "deployments" / deployment
            out = Path(tmp) / f"{deployment}.tar.gz"
            compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", out)
            console.print(f"[bold]{deployment}[/]: measuring {len(actions)} inputs ...")
            rows.append(measure(deployment, out, actions, expected, args.rounds, args.per_round))
        for units in (int(size) for size in args.sizes.split(",")):
            directory = Path(tmp) / f"synthetic-{units}"
            directory.mkdir()
            reads = pinned_reads(units)  # the same three reads at every size (like for like)
            (directory / "knowledge.yaml").write_text(manifest_text(units, pinned=reads), encoding="utf-8")
            (directory / "matrix.yaml").write_text(_synthetic_matrix(), encoding="utf-8")
            out = Path(tmp) / f"synthetic-{units}.tar.gz"
            console.print(f"[bold]synthetic {units:,} units[/]: compiling ...")
            start = time.perf_counter()
            compile_bundle([directory / "knowledge.yaml"], directory / "matrix.yaml", REPO / "policies", out)
            compile_s = time.perf_counter() - start
            console.print(f"  compiled in {compile_s:.1f} s; loading both engines and measuring ...")
            synthetic = [_synthetic_action(i) for i in sorted(reads)]
            row = measure(f"synthetic-{units}", out, synthetic, list(SYNTHETIC_EXPECTED), args.rounds, args.per_round)
            row["compile_s"] = compile_s
            rows.append(row)
    _print(rows)
    args.output.write_text(
        json.dumps(
            {
                "machine": {"python": platform.python_version(), "platform": platform.platform()},
                "rounds": args.rounds,
                "per_round": args.per_round,
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.output}")
    return 1 if any(row["divergences"] for row in rows) else 0


def _print(rows: list[dict[str, Any]]) -> None:
    table = Table(title="Gate.decide() and the engine step (microseconds; same bundle and inputs on both engines)")
    for column in (
        "bundle",
        "units",
        "decide p50",
        "decide p99",
        "decide/s",
        "python p50",
        "regopy p50",
        "regopy p99",
        "OPA p50",
        "OPA p99",
        "regopy/OPA",
        "load regopy s",
        "load OPA s",
        "diverge",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["bundle"],
            f"{row['units']:,}",
            f"{row['decide']['p50_us']:.0f}",
            f"{row['decide']['p99_us']:.0f}",
            f"{row['decide']['per_s']:.0f}",
            f"{row['python']['p50_us']:.0f}",
            f"{row['regopy']['p50_us']:.0f}",
            f"{row['regopy']['p99_us']:.0f}",
            f"{row['opa']['p50_us']:.0f}",
            f"{row['opa']['p99_us']:.0f}",
            f"{row['engine_ratio_regopy_over_opa']:.2f}",
            f"{row['regopy_load_s']:.2f}",
            f"{row['opa_load_s']:.2f}",
            str(row["divergences"]),
        )
    Console(width=220).print(table)
    synthetic = [row for row in rows if row["bundle"].startswith("synthetic-")]
    if len(synthetic) >= 2:
        first, last = synthetic[0], synthetic[-1]
        # Like for like: the reads compared must decide the same at both sizes (signature above).
        assert first["signatures"] == last["signatures"], "flatness would compare different decisions"
        for key in ("decide", "regopy", "opa"):
            ratio = last[key]["p50_us"] / first[key]["p50_us"]
            print(f"flatness {key}: p50 at {last['units']:,} units / at {first['units']:,} units = {ratio:.2f}")


if __name__ == "__main__":
    sys.exit(main())
