"""Compile validated manifests and a matrix into the Rego data document the policies read.

Layout (mounted under ``data.kcp_data``; policies live under ``data.kcp``, never here):

- ``deployment``: projects, vocabularies, the country-to-region table (``regions``) and the
  format version.
- ``units``: an index of every unit, keyed ``[project][unit_id]``: the unit's own fields
  (``validated``...) and ``profile``, a position in ``profiles``.
- ``profiles``: the distinct policy profiles (sensitivity, compliance, delegation, trust,
  freshness), sorted by their canonical JSON. Units inherit most of these from their root, so
  a deployment has few: 146 for 100,000 synthetic units. Storing each once cut the data
  document ~6x and regopy's cold start ~5x (docs/performance.md).
  Each profile's ``compliance.residency_places`` is compiled from its ``data_residency`` through
  the region table (``kcp_opa.declare.regions``): the codes it admits, so the residency rule is
  one key lookup per decision.
- ``tasks``: an index of the matrix rows keyed ``[task_type]``; a row is the small object
  ``{dimension: {value: level}}`` (one per data category and sensitivity the matrix covers).
- ``matrix``: the matrix's name, version, task types and parameters.

Why an index and not ``units[project][id]``: regopy looks up an object key in time linear in
the key's position (docs/engine-findings.md item 10; measured here ~0.85 us per position, 85 ms for the
last of 100,000 keys), while array indexing is constant. So entries are spread over nested
arrays of 16 slots, one level per hex digit of ``sha256("a/b/...")``; ``depth`` levels give
16**depth leaves. No arithmetic is involved: regopy 1.5.2 computes ``%`` wrongly on numbers
of 10,000 and up (``49045 % 8`` is 1), so digits index the arrays directly. A leaf holds the
few entries that share it, nested by their key parts, so correctness never depends on the
hash, only speed does. ``policies/kcp/lib/index.rego`` is the other half of this contract.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from kcp_opa.core.canonical import canonical_json
from kcp_opa.core.jsonread import JsonDict
from kcp_opa.declare import regions as region_table
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.effective import UNIT_FIELDS, effective_units
from kcp_opa.declare.manifest import Manifest
from kcp_opa.declare.matrix import DelegationMatrix
from kcp_opa.declare.trust import TrustRegistry

DATA_ROOT = "kcp_data"
#: 2: unit entries name a shared profile (kcp_data/profiles) instead of carrying it.
DATA_FORMAT = 2
#: Aim for at most about this many entries per leaf: small enough that the linear scan inside
#: a leaf is negligible, large enough that small deployments do not ship empty arrays.
ENTRIES_PER_LEAF = 2
MAX_DEPTH = 4  # 65,536 leaves


def index_depth(entries: int) -> int:
    """Smallest depth giving at most ENTRIES_PER_LEAF per leaf on average (capped)."""
    depth = 0
    while 16**depth * ENTRIES_PER_LEAF < entries and depth < MAX_DEPTH:
        depth += 1
    return depth


def leaf_path(parts: Sequence[str], depth: int) -> tuple[int, ...]:
    """The hex digits that lead to a key's leaf; policies/kcp/lib/index.rego computes the same."""
    digest = hashlib.sha256("/".join(parts).encode("utf-8")).hexdigest()
    return tuple(int(digit, 16) for digit in digest[:depth])


def _empty(depth: int) -> Any:
    return {} if depth == 0 else [_empty(depth - 1) for _ in range(16)]


def build_index(entries: Iterable[tuple[Sequence[str], object]]) -> JsonDict:
    items = sorted(((tuple(parts), value) for parts, value in entries), key=lambda item: item[0])
    depth = index_depth(len(items))
    slots = _empty(depth)
    for parts, value in items:
        node = slots
        for digit in leaf_path(parts, depth):
            node = node[digit]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return {"depth": depth, "count": len(items), "slots": slots}


def _profiles(policies: Sequence[JsonDict]) -> tuple[list[JsonDict], list[int]]:
    """The distinct policy profiles in canonical order, and each unit's position among them."""
    encoded = [canonical_json({k: v for k, v in policy.items() if k not in UNIT_FIELDS}) for policy in policies]
    ordered = sorted(set(encoded))
    position = {key: index for index, key in enumerate(ordered)}
    return [with_residency_places(json.loads(key)) for key in ordered], [position[key] for key in encoded]


def with_residency_places(profile: JsonDict) -> JsonDict:
    """The profile with the places its data_residency admits, compiled once here rather than
    looked up in the region table on every decision."""
    compliance = profile.get("compliance")
    regions = compliance.get("data_residency") if isinstance(compliance, dict) else None
    if isinstance(compliance, dict) and isinstance(regions, list):
        names = [region for region in regions if isinstance(region, str)]
        compliance["residency_places"] = region_table.residency_places(names)
    return profile


def build_data(manifests: Sequence[Manifest], matrix: DelegationMatrix, trust: TrustRegistry | None = None) -> JsonDict:
    """Mount path (``kcp_data/units``...) -> document. Callers check project names are unique."""
    units = [unit for manifest in manifests for unit in effective_units(manifest)]
    policies = [unit.to_policy_data() for unit in units]
    profiles, positions = _profiles(policies)
    unit_entries = [
        ((unit.project, unit.unit_id), {"profile": position, **{key: policy.get(key) for key in UNIT_FIELDS}})
        for unit, policy, position in zip(units, policies, positions, strict=True)
    ]
    rows: dict[str, dict[str, dict[str, str]]] = {}
    for c in matrix.cells():
        rows.setdefault(c.task_type, {}).setdefault(c.dimension, {})[c.value] = c.level
    task_entries = [((task_type,), row) for task_type, row in rows.items()]
    projects = {
        m.project: {
            "version": m.version,
            "kcp_version": m.kcp_version,
            "unit_count": len(m.units),
            "sha256": m.sha256,
        }
        for m in manifests
    }
    data: JsonDict = {
        f"{DATA_ROOT}/deployment": {
            "format": DATA_FORMAT,
            "projects": projects,
            "vocabulary": {
                "sensitivity_order": list(vocab.SENSITIVITY_ORDER),
                "autonomy_order": list(vocab.AUTONOMY_LEVELS),
            },
            "regions": region_table.table(),
        },
        f"{DATA_ROOT}/units": build_index(unit_entries),
        f"{DATA_ROOT}/profiles": profiles,
        f"{DATA_ROOT}/tasks": build_index(task_entries),
        f"{DATA_ROOT}/matrix": {
            "name": matrix.name,
            "version": matrix.version,
            "sha256": matrix.sha256,
            "task_types": sorted(matrix.data["task_types"]),
            "kcp_actions": matrix.kcp_actions(),
            "requested_actions": matrix.requested_actions(),
            "parameters": matrix.parameters().to_dict(),
        },
    }
    if trust is not None:
        # Principals, roles and which issuer attests what: never keys (the desk holds those).
        data[f"{DATA_ROOT}/trust"] = trust.to_data()
    return data
