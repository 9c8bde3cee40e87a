"""Pin what the fuzzer found: every divergent action the contract still accepts becomes a case.

    .venv/bin/python tests/fuzz/pin.py reports/fuzz-report-divergences.jsonl

Each accepted action is decided again on both engines with the current code; when they agree,
it is written to ``fixtures/cases/fuzz-pinned-<deployment>.yaml`` with the decision it gets
now (one case per deployment, routing state and reason codes: duplicates add nothing). A
divergent action the contract now refuses is counted; the refusal itself is pinned in
``tests/decide/test_engine_fidelity.py`` (a decision case cannot expect a refusal).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from differential import EXCEPTIONS, REPO, Tally, canonical, compare, load_world
from gatecounts import COUNTERS, METERING

from kcp_opa.core.errors import ActionRejectedError
from kcp_opa.decide.action import check_action


def main(report: Path) -> int:
    world = load_world(Path(tempfile.mkdtemp(prefix="kcp-opa-pin-")))
    for deployment in world.values():
        deployment.engines()
    found = [json.loads(line) for line in report.read_text(encoding="utf-8").split("\n") if line.strip()]
    refused, pinned, still, by_hand = 0, {}, 0, 0
    for item in found:
        try:
            check_action(item["action"])
        except ActionRejectedError:
            refused += 1
            continue
        deployment = world[item["deployment"]]
        tally = Tally()
        hidden = {EXCEPTIONS: item.get("exceptions"), COUNTERS: item.get("counters"), METERING: item.get("metering")}
        drawn = {**item["action"], **{k: v for k, v in hidden.items() if v is not None}}
        if compare(deployment, item["case"], drawn, item["now"], item["controls"], tally) is not None:
            still += 1
            continue
        if item.get("exceptions") is not None or (item.get("metering") or [None])[0] is not None:
            by_hand += 1  # a case file states neither exceptions nor attested spend: pin it in a Rego test
            continue
        document = deployment.opa.eval_document("kcp.gate.decision", _input(item))
        key = (item["deployment"], document["decision"], tuple(document["reason_codes"]))
        pinned.setdefault(key, (item, document))
    by_deployment: dict[str, list[Any]] = {}
    for (name, _, _), (item, document) in sorted(pinned.items()):
        number = len(by_deployment.setdefault(name, [])) + 1
        by_deployment[name].append({
            "case_id": f"fuzz-{name}-{number:03d}",
            "description": f"differential fuzzer (issue 13): diverged before the fix, from case {item['case']}",
            "now": item["now"],
            "action": item["action"],
            **({"context": item["context"]} if item.get("context") else {}),
            **({"counters": item["counters"]} if item.get("counters") is not None else {}),
            "expect": {"decision": document["decision"], "reason_codes": document["reason_codes"]},
        })  # fmt: skip
    for name, cases in by_deployment.items():
        path = REPO / "fixtures" / "cases" / f"fuzz-pinned-{name}.yaml"
        header = "# Pinned by tests/fuzz/pin.py: actions the differential fuzzer found divergent (issue 13).\n"
        body = yaml.safe_dump({"deployment": name, "now": cases[0]["now"], "cases": cases}, allow_unicode=True,
                              sort_keys=False, width=120)  # fmt: skip
        path.write_text(header + body, encoding="utf-8")
    print(f"{len(found)} divergences: {refused} now refused by the contract, {sum(map(len, by_deployment.values()))}"
          f" pinned as cases, {by_hand} to pin by hand (exceptions or attested spend in a Rego test),"
          f" {still} still divergent")  # fmt: skip
    return 1 if still else 0


def _input(item: dict[str, Any]) -> dict[str, Any]:
    from differential import prepare

    prepared = prepare(item["action"], item["now"], item["controls"], item.get("context"), item.get("counters"))
    document = json.loads(canonical(prepared.document))
    document["context"]["trace_id"] = "fuzz"
    return dict(document)


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
