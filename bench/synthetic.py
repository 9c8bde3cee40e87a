"""Synthetic deployments of any size, for benchmarks and scale tests.

Written as YAML text directly (yaml.dump is far too slow for 100,000 units); every unit varies
a little so inheritance, overrides and the index are all exercised.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

CATEGORIES = ("personal", "contact", "financial", "health", "location")
SENSITIVITIES = ("public", "internal", "confidential", "restricted")
LEVELS = ("autonomous", "confirm", "approve", "forbidden")


def pinned_reads(units: int) -> dict[int, int]:
    """The units a benchmark reads (first, middle, last) and the unit whose attributes each takes.

    Positions move with the size, attributes do not: unit 0, 500 and 999 of a 1,000-unit
    deployment, so a read at 10 units and at 100,000 units is the same decision (like for like).
    """
    return {0: 0, units // 2: 500, units - 1: 999}


def manifest_text(units: int, project: str = "synthetic", pinned: Mapping[int, int] | None = None) -> str:
    """``pinned`` maps a unit position to the unit whose attributes it takes (see pinned_reads)."""
    pinned = pinned or {}
    lines = [
        'kcp_version: "0.20"',
        f"project: {project}",
        'version: "1.0.0"',
        "compliance:",
        "  data_residency: [EEA]",
        "  regulations: [GDPR]",
        "  sensitivity: internal",
        "  restrictions: [audit-required]",
        "trust:",
        "  audit: {agent_must_log: true, require_trace_context: true}",
        "delegation:",
        "  max_depth: 3",
        "  require_capability_attenuation: true",
        "freshness_policy: {max_age_days: 365, on_stale: warn}",
        "units:",
    ]
    for i in range(units):
        k = pinned.get(i, i)
        sensitivity = SENSITIVITIES[k % 4]
        category = CATEGORIES[k % 5]
        lines += [
            f"  - id: unit-{i:06d}",
            f"    path: docs/u{i}.md",
            f'    intent: "What does unit {i} say?"',
            "    scope: project",
            "    audience: [agent]",
            f"    sensitivity: {sensitivity}",
            f'    validated: "2026-{1 + k % 12:02d}-{1 + k % 28:02d}"',
        ]
        if k % 3 == 0:
            lines += [
                "    compliance:",
                f"      declared_fields: [f{k % 7}, name, email]",
                f"      data_categories: [{category}]",
            ]
        if k % 10 == 0:
            lines += ["    delegation: {max_depth: 1}"]
    return "\n".join(lines) + "\n"


def fields_unit_text(unit_id: str, declared: int) -> str:
    """One more unit (append to manifest_text's output) that declares ``declared`` fields:
    name, email, field_0000, field_0001, ... so a growing fields_read reaches the field check."""
    fields = ", ".join(["name", "email", *(f"field_{i:04d}" for i in range(declared - 2))])
    return (
        "\n".join(
            [
                f"  - id: {unit_id}",
                "    path: docs/fields.md",
                '    intent: "Which fields does this unit declare?"',
                "    scope: project",
                "    audience: [agent]",
                "    sensitivity: internal",
                '    validated: "2026-06-01"',
                "    compliance:",
                f"      declared_fields: [{fields}]",
                "      data_categories: [contact]",
            ]
        )
        + "\n"
    )


def matrix_text(cells: int) -> str:
    """A matrix with about ``cells`` cells spread over task types x categories/sensitivities."""
    lines = [
        "kind: kcp-opa/delegation-matrix",
        "format_version: 1",
        "name: synthetic",
        'version: "1"',
        "agreed_by:",
        '  - {role: cto, name: A, date: "2026-11-01"}',
        '  - {role: compliance_officer, name: B, date: "2026-11-01"}',
        "task_types:",
    ]
    per_task = len(SENSITIVITIES) + 16
    task_count = max(1, -(-cells // per_task))
    written = 0
    for t in range(task_count):
        lines.append(f"  task_{t:04d}:")
        lines.append("    sensitivity:")
        for s in SENSITIVITIES:
            if written < cells:
                lines.append(f"      {s}: {LEVELS[(t + written) % 4]}")
                written += 1
        if written < cells:
            lines.append("    data_categories:")
            for c in range(16):
                if written < cells:
                    lines.append(f"      cat_{c:02d}: {LEVELS[(t + c) % 4]}")
                    written += 1
    return "\n".join(lines) + "\n"


def write_deployment(directory: Path, units: int, cells: int) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "knowledge.yaml"
    matrix = directory / "matrix.yaml"
    manifest.write_text(manifest_text(units), encoding="utf-8")
    matrix.write_text(matrix_text(cells), encoding="utf-8")
    return manifest, matrix
