"""The targets table (docs/performance.md) as rows computed from one run's results.

Each row: ``row`` (what is measured), ``target``, ``measured`` (text), ``values`` (the numbers),
``met`` (True / False; None when this run did not measure it, e.g. ``--quick`` skips the
100,000-unit deployment). Absolute targets assume an idle machine: the suite records the load
average beside them, and a loaded run's absolute figures say little (its ratios still do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def _row(row: str, target: str, measured: str, values: Mapping[str, float], met: bool | None) -> dict[str, Any]:
    return {"row": row, "target": target, "measured": measured, "values": dict(values), "met": met}


def _safe(build: Callable[[], dict[str, Any]], row: str, target: str) -> dict[str, Any]:
    try:
        return build()
    except (KeyError, IndexError, StopIteration, TypeError, ZeroDivisionError):
        return _row(row, target, "not measured in this run", {}, None)


def suite_targets(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every target of the table the suite's own parts measure (the service adds its two rows)."""
    rows = results["deployments"]
    engine = results.get("engine", {}).get("inputs", {})
    pool = {row["input"]: row for row in results.get("pool", [])}
    named = ("support-desk read", "KYA supplier payment")

    def decide_p50() -> dict[str, Any]:
        values = {f"{n} decide p50 us": pool[n]["inline"]["p50_us"] for n in named}
        text = "; ".join(f"{n}: {v:,.0f} us" for n, v in zip(named, values.values(), strict=True))
        return _row("decide() p50, ledger off", "<= 1.0 ms each", text, values, max(values.values()) <= 1000)

    def decide_p99() -> dict[str, Any]:
        values = {n: pool[n]["inline"]["p99_us"] for n in named}
        text = "; ".join(f"{n}: {v:,.0f} us" for n, v in values.items())
        return _row("decide() p99", "<= 2 ms", text, values, max(values.values()) <= 2000)

    def engine_step(engine_name: str, target_us: float) -> Callable[[], dict[str, Any]]:
        def build() -> dict[str, Any]:
            values = {n: engine[n][engine_name]["engine_step_us"] for n in named}
            text = "; ".join(f"{n}: {v:,.0f} us" for n, v in values.items())
            if engine_name == "regopy" and "floor" in results:
                floor = results["floor"]["floor_regopy_step_us"]
                text += f"; a minimal module doing the read's lookups: {floor:,.0f} us (bench_floor.py)"
                values = values | {"floor_us": floor}
            label = "OPA" if engine_name == "opa" else "regopy"
            return _row(f"engine step on {label}", f"<= {target_us:,.0f} us", text, values,
                        max(values[n] for n in named) <= target_us)  # fmt: skip

        return build

    def largest() -> dict[str, Any]:
        worst = next(r for r in results["hostile"] if r["action"] == "all lists at their caps")
        values = {"regopy_us": worst["regopy_us"], "opa_us": worst["opa_us"]}
        text = f"{worst['regopy_us'] / 1000:,.1f} ms regopy ({worst['opa_us'] / 1000:,.1f} ms OPA)"
        return _row("largest contract-valid action, regopy", "<= 5 ms", text, values, worst["regopy_us"] <= 5000)

    def throughput() -> dict[str, Any]:
        values = {f"{r['units']:,} units / {r['cells']:,} cells": r["two_threads_per_s"] for r in rows}
        text = ", ".join(f"{k}: {v:,.0f}/s" for k, v in values.items())
        return _row("in-process decisions/s, 2 threads", ">= 1,500", text, values, min(values.values()) >= 1500)

    def by_units(units: int) -> dict[str, Any]:
        return next(r for r in rows if r["units"] == units and r["cells"] == 1000)

    def compile_100k() -> dict[str, Any]:
        row = by_units(100000)
        total = row["validate_s"] + row["compile_s"]
        return _row("validate + compile, 100,000 units", "<= 8 s", f"{total:.1f} s", {"s": total}, total <= 8)

    def cold_100k() -> dict[str, Any]:
        row = by_units(100000)
        first, cached = row["cold_start_default_s"], row["cold_start_cached_s"]
        return _row("cold start, 100,000 units, cached plan", "<= 1 s",
                    f"{cached:.2f} s (first build {first:.1f} s)", {"first_s": first, "cached_s": cached},
                    cached <= 1)  # fmt: skip

    def flat() -> dict[str, Any]:
        values = {f"{k} {v['from']:,}->{v['to']:,}": v["decide"] for k, v in results["flatness"].items()}
        text = ", ".join(f"{k}: {v:.2f}" for k, v in values.items())
        return _row("flat from 10 to 100,000 units, 10 to 1,000 cells (decide p50)", "within 25%", text, values,
                    all(0.75 <= v <= 1.25 for v in values.values()) and results["like_for_like"])  # fmt: skip

    plan = [
        (decide_p50, "decide() p50, ledger off", "<= 1.0 ms each"),
        (decide_p99, "decide() p99", "<= 2 ms"),
        (engine_step("opa", 300), "engine step on OPA", "<= 300 us"),
        (engine_step("regopy", 600), "engine step on regopy", "<= 600 us"),
        (largest, "largest contract-valid action, regopy", "<= 5 ms"),
        (throughput, "in-process decisions/s, 2 threads", ">= 1,500"),
        (flat, "flat from 10 to 100,000 units, 10 to 1,000 cells (decide p50)", "within 25%"),
        (compile_100k, "validate + compile, 100,000 units", "<= 8 s"),
        (cold_100k, "cold start, 100,000 units, cached plan", "<= 1 s"),
    ]
    return [_safe(build, row, target) for build, row, target in plan]


def analysis_targets(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``kcp-opa prove`` / ``diff`` decisions/s over the reference deployments (bench_analysis.py)."""
    prove = {r["deployment"]: r["prove_decisions_per_s"] for r in rows}
    diff = {r["deployment"]: r["diff_decisions_per_s"] for r in rows}
    least = min(*prove.values(), *diff.values())
    pairs = (("prove", prove), ("diff", diff))
    text = ", ".join(f"{name} {min(v.values()):,.0f}-{max(v.values()):,.0f}/s" for name, v in pairs)
    values = {f"prove {k}": v for k, v in prove.items()} | {f"diff {k}": v for k, v in diff.items()}
    return [_row("analysis: kcp-opa prove / diff, decisions/s", ">= 500", text, values, least >= 500)]


def service_targets(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """HTTP JSON API / MCP p50 over in-process decide() (one client; ledger on, as served)."""
    one = {r["path"]: r for r in rows if r["clients"] == 1}
    base = one["decide() in-process, ledger (group commit)"]["p50_ms"]
    http = one["HTTP JSON API (OPA-compatible)"]["p50_ms"] / base
    mcp = one["MCP tools/call over streamable HTTP"]["p50_ms"] / base
    return [
        _row("service: HTTP JSON API / MCP p50 over in-process decide()", "<= 1.2x / <= 1.5x",
             f"{http:.2f}x / {mcp:.2f}x", {"http": http, "mcp": mcp}, http <= 1.2 and mcp <= 1.5),
    ]  # fmt: skip
