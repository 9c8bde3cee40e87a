"""Benchmark rows for kcp-opa prove and diff: decisions per second and time per deployment.

Not a test. For every reference deployment (fixtures/deployments/*): compile, then ``prove``
with the default budget (regopy + OPA + the invariants engine per decision, neighbours and
shrinking included) and ``diff`` of the bundle against itself (regopy, both bundles). Writes
bench/results-analysis.json and prints a table.

    .venv/bin/python bench/bench_analysis.py [--budget N] [--deployments a,b]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import analysis_targets

from kcp_opa.analysis.diff import DEFAULT_BUDGET as DIFF_BUDGET
from kcp_opa.analysis.diff import diff
from kcp_opa.analysis.prove import DEFAULT_BUDGET, prove
from kcp_opa.compile.bundle import read_bundle
from kcp_opa.compile.compiler import compile_bundle

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=None, help="prove and diff budget [defaults: the commands']")
    parser.add_argument("--deployments", default="", help="comma-separated names [default: all]")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results-analysis.json")
    args = parser.parse_args()
    names = [n for n in args.deployments.split(",") if n] or sorted(
        p.name for p in (REPO / "fixtures" / "deployments").iterdir() if p.is_dir()
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="kcp-opa-bench-analysis-") as tmp:
        for name in names:
            base = REPO / "fixtures" / "deployments" / name
            out = Path(tmp) / f"{name}.tar.gz"
            compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", out)
            bundle = read_bundle(out)
            proof = prove(bundle, budget=args.budget or DEFAULT_BUDGET)
            changes = diff(bundle, bundle, budget=args.budget or DIFF_BUDGET)
            rows.append(
                {
                    "deployment": name,
                    "prove_budget": proof.budget,
                    "prove_decisions": proof.decisions,
                    "prove_seconds": round(proof.seconds, 2),
                    "prove_decisions_per_s": round(proof.decisions / proof.seconds, 1),
                    "prove_proved": proof.proved,
                    "prove_meaning": proof.meaning(),
                    "diff_decisions": changes.decisions,
                    "diff_seconds": round(changes.seconds, 2),
                    "diff_decisions_per_s": round(changes.decisions / changes.seconds, 1),
                    "diff_changed": changes.changed,
                }
            )
            row = rows[-1]
            print(
                f"{name:24} prove {row['prove_decisions']:5} dec {row['prove_seconds']:7.1f} s "
                f"{row['prove_decisions_per_s']:6.1f}/s proved={row['prove_proved']}  "
                f"diff {row['diff_decisions']:5} dec {row['diff_seconds']:7.1f} s {row['diff_decisions_per_s']:6.1f}/s"
            )
    args.out.write_text(json.dumps({"machine": platform.platform(), "rows": rows}, indent=2) + "\n", encoding="utf-8")
    suite = REPO / "bench" / "results.json"  # make bench: the suite ran first; its targets gain these rows
    if suite.exists() and not args.deployments:
        results = json.loads(suite.read_text())
        kept = [t for t in results.get("targets", []) if not t["row"].startswith("analysis:")]
        results["targets"] = kept + analysis_targets(rows)
        suite.write_text(json.dumps(results, indent=2) + "\n")
    for item in analysis_targets(rows):
        print(f"{item['row']}: {item['measured']} (target {item['target']})")


if __name__ == "__main__":
    main()
