"""Benchmark: where one decide() spends its time, and how the engine step grows with the action.

Not a test. Two parts, both written to bench/results-growth.json:

- ``stages``: one ``Gate.decide()`` of the KYA supplier payment (finance deployment), split
  into the steps the gate takes: action checks (refusal walk + schema), the KYA-CJ-1 action
  hash, the context stage (the registry and the attestations' signatures), the whole input
  build (checks, hash, context, ids, time), the engine step (input term,
  evaluation, output), typing the policy's result, and the audit write (fsync per entry).
- ``growth``: a 1,000-unit synthetic deployment read with a growing delegation chain
  (0 / 2 / 4 / 8 hops, 8 the contract's cap) and a growing list of fields read (2 / 16 / 64 /
  256, the cap). The fields
  are read from a unit that DECLARES 1,024 fields (every read is inside the declaration, so the
  field check runs on every size and the decision stays ALLOW; checked: one undeclared field on
  that unit is a ``field_access_violation``) and from a unit that declares two (every extra
  field is a violation, so the DENY's violation list grows with it). regopy and the OPA
  reference on the same bundle and inputs, so the ratio shows what grows in which engine.
- ``hostile``: the worst an agent can send within the action contract's caps (read from its
  schema, :func:`contract_caps`), on the same 1,000-unit bundle: every field read undeclared,
  as many fields of a unit declaring 1,024, a chain at the hop and capability caps that widens
  at every hop / never widens / narrows by a ':' suffix at every hop, ``attributes`` at its
  caps (1,024 ``true`` values under 256 keys; 1,024 strings of 1,024 characters, ~1 MiB), and
  all the lists at once. regopy beside OPA; the suite exits 1 if the two engines' documents
  differ.
- ``slopes``: the cost of one more hop / field (us), between the smallest and the largest size
  of a dimension that give the same decision (state and reason codes), so a change of decision
  is never counted as growth.

Every action is decided with the context a host vouches for (bench/vouched.py); the suite
fails if one is held for missing context instead of decided.

    .venv/bin/python bench/bench_growth.py [--rounds 5] [--per-round 40]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decide import _opa_engine, _synthetic_action, _synthetic_matrix, signature
from synthetic import fields_unit_text, manifest_text
from vouched import Vouched, expect

from kcp_opa.compile.compiler import compile_bundle
from kcp_opa.context.builder import build_context
from kcp_opa.decide.action import action_hash, check_action
from kcp_opa.decide.gate import Gate
from kcp_opa.decide.gateconfig import GateConfig
from kcp_opa.decide.gateinput import decision_time
from kcp_opa.models.decision import PolicyVerdict
from kcp_opa.trail.entries import AuditTrail
from kcp_opa.trail.ledger import AuditLedger

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-11-29T10:00:00Z"
CHAIN_LENGTHS = (0, 2, 4, 8)  # 8: the action contract's cap on delegation_chain
FIELDS_READ = (2, 16, 64, 256)  # 256: its cap on knowledge.fields_read
DECLARING_UNIT = "unit-fields-declared"  # declares name, email and field_0000..field_1021
NARROW_UNIT = "unit-fields-narrow"  # declares name and email only


def _interleaved_p50(
    fns: dict[str, Callable[[], Any]], rounds: int, per_round: int, budget_s: float = 0.25
) -> dict[str, float]:
    """Median of per-round medians (us) for each function, measured in interleaved rounds so a
    noisy moment hits every function alike; each is called a few times untimed first. A function
    slower than ``budget_s / per_round`` runs fewer times a round (at least once), so a
    pathological size costs seconds, not hours."""
    counts: dict[str, int] = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        fn()
        first = time.perf_counter() - start
        counts[name] = max(1, min(per_round, int(budget_s / max(first, 1e-9))))
        for _ in range(min(4, counts[name])):
            fn()
    medians: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples = []
            for _ in range(counts[name]):
                start = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - start)
            samples.sort()
            medians[name].append(samples[len(samples) // 2])
    return {name: sorted(values)[len(values) // 2] * 1e6 for name, values in medians.items()}


def stages(tmp: Path, rounds: int, per_round: int) -> dict[str, float]:
    base = REPO / "fixtures" / "deployments" / "finance"
    bundle = tmp / "finance.tar.gz"
    compile_bundle([base / "knowledge.yaml"], base / "matrix.yaml", REPO / "policies", bundle)
    gate = Gate.from_bundle(bundle, config=GateConfig(preflight=False))
    action = json.loads((REPO / "fixtures" / "kya-supplier-payment-action.json").read_text())
    vouched = Vouched(gate, NOW)
    prepared = vouched.prepare(action)
    raw = gate.engine.evaluate(prepared.document).value
    assert raw is not None
    decision = vouched.decide(action)
    expect(decision, ["HUMAN_APPROVAL"], "the KYA supplier payment")
    trail = AuditTrail(AuditLedger(tmp / "stages.jsonl", durability="fsync"), gate.bundle)
    sources, principal = vouched.context(action)["context"], vouched.context(action)["principal"]
    digest = action_hash(action)
    moment = decision_time(NOW)
    steps: dict[str, Callable[[], Any]] = {
        "decide_us": lambda: vouched.decide(action),
        "check_action_us": lambda: check_action(action),
        "action_hash_us": lambda: action_hash(action),
        "context_us": lambda: build_context(sources, action, principal=principal, action_hash=digest, now=moment),
        "build_input_us": lambda: vouched.prepare(action),
        "engine_us": lambda: gate.engine.evaluate(prepared.document),
        "typing_us": lambda: PolicyVerdict.from_policy(raw),
        "audit_fsync_us": lambda: trail.decision(prepared.document, action, decision, raw),
    }
    return _interleaved_p50(steps, rounds, per_round)


def _with_chain(action: dict[str, Any], hops: int) -> dict[str, Any]:
    out = copy.deepcopy(action)
    if hops:
        out["delegation_chain"] = [
            {"agent_id": f"agent-{i}", "capabilities": ["kb.read", f"kb.read:scope-{i}"]} for i in range(hops)
        ]
    return out


def _with_fields(action: dict[str, Any], fields: int, unit: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    out = copy.deepcopy(action)
    out["knowledge"]["unit"] = unit
    out["knowledge"]["fields_read"] = ["name", "email", *(f"field_{i:04d}" for i in range(fields - 2)), *extra]
    return out


def contract_caps() -> dict[str, int]:
    """The action contract's list caps, read from its schema, so the hostile rows follow a change."""
    from importlib import resources

    schema = json.loads(resources.files("kcp_opa.schemas").joinpath("action-intent.schema.json").read_text("utf-8"))
    chain = schema["properties"]["delegation_chain"]
    return {
        "hops": chain["maxItems"],
        "capabilities": chain["items"]["properties"]["capabilities"]["maxItems"],
        "fields": schema["properties"]["knowledge"]["properties"]["fields_read"]["maxItems"],
        "scopes": schema["properties"]["authorization_context"]["properties"]["agent_scope"]["maxItems"],
    }


def _hostile_actions(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The largest lists the action contract accepts (schemas/action-intent.schema.json)."""
    caps = contract_caps()
    hops, capabilities, fields, scopes = caps["hops"], caps["capabilities"], caps["fields"], caps["scopes"]

    def chain(kind: str) -> list[dict[str, Any]]:
        def names(h: int) -> list[str]:
            if kind == "widens":
                return [f"cap{h}.{c}" for c in range(capabilities)]
            suffix = ":n" * h if kind == "narrows" else ""
            return [f"cap.{c}{suffix}" for c in range(capabilities)]

        return [{"agent_id": f"agent-{h}", "capabilities": names(h)} for h in range(hops)]

    def undeclared() -> dict[str, Any]:
        out = _with_fields(base, 2, NARROW_UNIT)
        out["knowledge"]["fields_read"] = [f"other_{i:04d}" for i in range(fields)]
        return out

    def changed(action: dict[str, Any], **fields_: Any) -> dict[str, Any]:
        return copy.deepcopy(action) | fields_

    everything = changed(undeclared(), delegation_chain=chain("widens"))
    everything["authorization_context"] |= {
        "agent_scope": [f"scope.{i}" for i in range(scopes)],
        "principal_scopes": [f"scope.{i}" for i in range(scopes)],
    }
    return {
        "baseline (the read)": base,
        f"{fields:,} fields read, none declared": undeclared(),
        f"{fields:,} fields read of a unit declaring 1,024": _with_fields(base, fields, DECLARING_UNIT),
        f"chain {hops}x{capabilities}, widens at every hop": changed(base, delegation_chain=chain("widens")),
        f"chain {hops}x{capabilities}, never widens": changed(base, delegation_chain=chain("same")),
        f"chain {hops}x{capabilities}, narrows by suffix": changed(base, delegation_chain=chain("narrows")),
        "attributes at the caps: 256 keys, 1,024 true values": changed(base, attributes=_flags_at_cap()),
        "attributes at the caps: 1,024 strings (~1 MiB)": changed(
            base, attributes={f"note_{i:02d}": ["n" * 1024] * 63 for i in range(16)}
        ),
        "all lists at their caps": everything,
    }


def _flags_at_cap() -> dict[str, Any]:
    """The worst ``attributes`` the contract admits for the flag reads: 256 keys of 128 characters
    (4 trigger flags among them), 1,024 ``true`` values in all (docs/input-contract.md "Sizes")."""
    triggers = {name: True for name in ("new_beneficiary", "screening_uncertain", "geo_anomaly", "irreversible")}
    flags = {f"flag_{i:03d}".ljust(128, "f"): [True] * (4 if i < 12 else 3) for i in range(256 - len(triggers))}
    return triggers | flags


def hostile(gate: Gate, opa: Any, rounds: int, per_round: int) -> list[dict[str, Any]]:
    rows = []
    timed: dict[str, Callable[[], Any]] = {}
    vouched = Vouched(gate, NOW)
    for index, (label, action) in enumerate(_hostile_actions(_synthetic_action(500)).items()):
        check_action(action)  # inside the contract, or the row measures nothing
        document = vouched.prepare(action).document
        on_regopy = gate.engine.evaluate(document).value
        on_opa = opa.eval_document("kcp.gate.decision", dict(document))
        expect(on_opa, None, f"hostile action {label}")
        rows.append(
            {
                "action": label,
                "decision": on_opa["decision"],
                "reason_codes": on_opa["reason_codes"],
                "diverged": on_regopy != on_opa,
            }
        )
        timed[f"{index}/regopy_us"] = lambda d=document: gate.engine.evaluate(d)
        timed[f"{index}/opa_us"] = lambda d=document: opa.eval_document("kcp.gate.decision", dict(d))
    for key, value in _interleaved_p50(timed, rounds, per_round).items():
        index, name = key.split("/")
        rows[int(index)][name] = value
    return rows


def slopes(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """us per unit of size for each dimension, over the sizes that give the largest size's decision."""
    out: dict[str, dict[str, float]] = {}
    for dimension in dict.fromkeys(row["dimension"] for row in rows):
        series = [row for row in rows if row["dimension"] == dimension]
        last = series[-1]
        first = next(row for row in series if row["signature"] == last["signature"])
        span = last["size"] - first["size"]
        if span <= 0:
            continue
        out[dimension] = {"from": first["size"], "to": last["size"]} | {
            f"{engine}_per_step_us": (last[f"{engine}_us"] - first[f"{engine}_us"]) / span
            for engine in ("decide", "regopy", "opa")
        }
    return out


def growth(tmp: Path, rounds: int, per_round: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    directory = tmp / "synthetic-1000"
    directory.mkdir()
    manifest = manifest_text(1000) + fields_unit_text(DECLARING_UNIT, 1024) + fields_unit_text(NARROW_UNIT, 2)
    (directory / "knowledge.yaml").write_text(manifest, encoding="utf-8")
    (directory / "matrix.yaml").write_text(_synthetic_matrix(), encoding="utf-8")
    bundle = directory / "bundle.tar.gz"
    compile_bundle([directory / "knowledge.yaml"], directory / "matrix.yaml", REPO / "policies", bundle)
    gate = Gate.from_bundle(bundle, config=GateConfig(preflight=False))
    opa, _ = _opa_engine(gate)
    base = _synthetic_action(500)
    points = [("delegation chain hops", n, _with_chain(base, n)) for n in CHAIN_LENGTHS]
    points += [("fields read, all declared", n, _with_fields(base, n, DECLARING_UNIT)) for n in FIELDS_READ]
    points += [("fields read, 2 declared", n, _with_fields(base, n, NARROW_UNIT)) for n in FIELDS_READ]
    # The declaring unit's field check is live: one field outside its declaration is a violation.
    vouched = Vouched(gate, NOW)
    probe = vouched.decide(_with_fields(base, 16, DECLARING_UNIT, extra=("not_declared",)))
    assert "field_access_violation" in probe.reason_codes, f"field check not reached: {probe.reason_codes}"
    rows = []
    timed: dict[str, Callable[[], Any]] = {}
    for index, (dimension, size, action) in enumerate(points):
        document = vouched.prepare(action).document
        on_regopy = gate.engine.evaluate(document).value
        on_opa = opa.eval_document("kcp.gate.decision", dict(document))
        expect(on_opa, None, f"{dimension} {size}")
        rows.append(
            {
                "dimension": dimension,
                "size": size,
                "decision": on_opa["decision"],
                "reason_codes": on_opa["reason_codes"],
                "signature": signature(on_opa),
                "diverged": on_regopy != on_opa,
            }
        )
        timed[f"{index}/decide_us"] = lambda a=action: vouched.decide(a)
        timed[f"{index}/regopy_us"] = lambda d=document: gate.engine.evaluate(d)
        timed[f"{index}/opa_us"] = lambda d=document: opa.eval_document("kcp.gate.decision", dict(d))
    for key, value in _interleaved_p50(timed, rounds, per_round).items():
        index, name = key.split("/")
        rows[int(index)][name] = value
    worst = hostile(gate, opa, rounds, per_round)
    opa.close()
    declared = [row for row in rows if row["dimension"] == "fields read, all declared"]
    assert len({row["signature"] for row in declared}) == 1, "reading declared fields changed the decision"
    assert declared[0]["decision"] == "ALLOW", declared[0]["reason_codes"]
    return rows, worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=30)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results-growth.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kcp-opa-growth-") as tmp:
        stage = stages(Path(tmp), args.rounds, args.per_round)
        rows, worst = growth(Path(tmp), args.rounds, args.per_round)
    per_step = slopes(rows)
    document = {"stages": stage, "growth": rows, "slopes": per_step, "hostile": worst}
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    out = Console(width=200)
    table = Table(title="One decide() of the KYA supplier payment, by step (p50, us)")
    table.add_column("step")
    table.add_column("p50 us", justify="right")
    for key, value in stage.items():
        table.add_row(key.removesuffix("_us"), f"{value:,.0f}")
    out.print(table)
    table = Table(title="Growth at 1,000 units (p50, us; regopy and OPA on the same inputs)")
    for column in ("dimension", "size", "decision", "decide", "regopy", "OPA", "regopy/OPA", "diverged"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["dimension"], f"{row['size']:,}", row["decision"], f"{row['decide_us']:,.0f}",
            f"{row['regopy_us']:,.0f}", f"{row['opa_us']:,.0f}", f"{row['regopy_us'] / row['opa_us']:.2f}",
            str(row["diverged"]),
        )  # fmt: skip
    out.print(table)
    for dimension, item in per_step.items():
        print(
            f"{dimension}, {item['from']:,} -> {item['to']:,} (same decision): per step decide "
            f"{item['decide_per_step_us']:.2f} us, regopy {item['regopy_per_step_us']:.2f} us, "
            f"OPA {item['opa_per_step_us']:.2f} us"
        )
    table = Table(title="The worst within the action contract's caps, 1,000 units (p50, us; same run)")
    for column in ("action", "decision", "regopy", "OPA", "regopy/OPA", "diverged"):
        table.add_column(column, justify="right")
    for row in worst:
        table.add_row(
            row["action"], row["decision"], f"{row['regopy_us']:,.0f}", f"{row['opa_us']:,.0f}",
            f"{row['regopy_us'] / row['opa_us']:.2f}", str(row["diverged"]),
        )  # fmt: skip
    out.print(table)
    print(f"wrote {args.output}")
    return 1 if any(row["diverged"] for row in [*rows, *worst]) else 0


if __name__ == "__main__":
    sys.exit(main())
