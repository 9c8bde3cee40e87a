"""What the cross-checked gate costs: `Gate.decide()` with and without `cross_check="opa"`.

For each reference deployment, the decision cases' actions are decided alternately by a plain
gate and a cross-checked gate over the same bundle (interleaved rounds, so machine load hits
both alike). The cross-check adds one OPA evaluation and a comparison to every decision. Each
case is decided with the context it declares (bench/vouched.py), and must decide as it
expects: the timed path is the case's, not a hold for missing context.

    .venv/bin/python bench/bench_cross_check.py [--rounds 5] [--output bench/results-cross-check.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decide import _summary, _timed
from vouched import case_context

from kcp_opa.authoring.cases import DecisionCase, case_files, load_cases
from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig

REPO = Path(__file__).resolve().parent.parent


def measure(deployment: str, bundle: Path, cases: list[DecisionCase], rounds: int) -> dict[str, Any]:
    plain = Gate.from_bundle(bundle, config=GateConfig(preflight=False))
    checked = Gate.from_bundle(bundle, config=GateConfig(preflight=False, cross_check="opa"))
    samples: dict[str, list[float]] = {"plain": [], "cross_check": []}
    actions = [(case.action, case.now, case_context(case)) for case in cases]
    for case, (action, now, context) in zip(cases, actions, strict=True):
        decided = plain.decide(action, now=now, **context)
        assert decided.decision == case.expect.decision, f"{case.case_id}: {decided.decision} {decided.reason_codes}"
    divergences = 0
    for _ in range(rounds):
        for action, now, context in actions:
            _timed(lambda a=action, n=now, c=context: plain.decide(a, now=n, **c), 5, samples["plain"])
            _timed(lambda a=action, n=now, c=context: checked.decide(a, now=n, **c), 5, samples["cross_check"])
    for action, now, context in actions:
        divergences += "engine_divergence" in checked.decide(action, now=now, **context).reason_codes
    row: dict[str, Any] = {"deployment": deployment, "actions": len(actions), "divergences": divergences}
    for key, values in samples.items():
        row[key] = _summary(values)
    row["cost_ratio"] = row["cross_check"]["p50_us"] / row["plain"]["p50_us"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-cross-check.json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcp-opa-xcheck-") as tmp:
        for path in case_files(REPO / "fixtures" / "cases"):
            cases = load_cases(path)
            name = cases[0].deployment
            base = REPO / "fixtures" / "deployments" / name
            bundle = Path(tmp) / f"{name}.tar.gz"
            compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle)
            rows.append(measure(name, bundle, cases, args.rounds))
    args.output.write_text(json.dumps({"results": rows}, indent=2) + "\n")
    table = Table(title="decide() with and without cross_check='opa' (us)")
    for column in ("deployment", "actions", "plain p50", "p99", "cross-checked p50", "p99", "cost", "diverge"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["deployment"], str(row["actions"]), f"{row['plain']['p50_us']:.0f}", f"{row['plain']['p99_us']:.0f}",
            f"{row['cross_check']['p50_us']:.0f}", f"{row['cross_check']['p99_us']:.0f}",
            f"{row['cost_ratio']:.2f}x", str(row["divergences"]),
        )  # fmt: skip
    Console(width=160).print(table)
    return 1 if any(row["divergences"] for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
