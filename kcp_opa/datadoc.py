"""Compile validated manifests and a matrix into the Rego data document the policies read.

Layout (mounted under ``data.kcp_data``; policies live under ``data.kcp``, never here):

- ``deployment``: projects, vocabularies and the format version.
- ``units``: an index of every effective unit, keyed ``[project][unit_id]``.
- ``matrix``: an index of cells keyed ``[task_type][dimension][value]`` plus the parameters.

Why an index and not ``units[project][id]``: regopy looks up an object key in time linear in
the key's position (engine-notes.md item 10; measured here ~0.85 us per position, 85 ms for the
last of 100,000 keys), while array indexing is constant. So entries are spread over an array of
slots by a hash both engines compute the same way: the first four hex digits of
``sha256("a/b/...")`` modulo the slot count. A slot holds the few entries that share it, nested
by their key parts, so correctness never depends on the hash, only speed does.
``policies/kcp/lib/index.rego`` is the other half of this contract.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from kcp_opa import vocabulary as vocab
from kcp_opa.effective import effective_units
from kcp_opa.manifest import Manifest
from kcp_opa.matrix import DelegationMatrix

DATA_ROOT = "kcp_data"
DATA_FORMAT = 1
#: Aim for about this many entries per slot: small enough that the linear scan inside a slot
#: is negligible, large enough that small deployments do not ship thousands of empty slots.
ENTRIES_PER_SLOT = 2
MAX_SLOTS = 1 << 16  # four hex digits of the hash


def slot_count(entries: int) -> int:
    """Smallest power of two giving at most ENTRIES_PER_SLOT per slot on average."""
    size = 1
    while size * ENTRIES_PER_SLOT < entries and size < MAX_SLOTS:
        size <<= 1
    return size


def slot_of(parts: Sequence[str], size: int) -> int:
    """The slot of a key; policies/kcp/lib/index.rego computes the same number."""
    digest = hashlib.sha256("/".join(parts).encode("utf-8")).hexdigest()
    return int(digest[:4], 16) % size


def build_index(entries: Iterable[tuple[Sequence[str], Any]]) -> dict[str, Any]:
    items = sorted(((tuple(parts), value) for parts, value in entries), key=lambda item: item[0])
    size = slot_count(len(items))
    slots: list[dict[str, Any]] = [{} for _ in range(size)]
    for parts, value in items:
        node = slots[slot_of(parts, size)]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return {"size": size, "count": len(items), "slots": slots}


def build_data(manifests: Sequence[Manifest], matrix: DelegationMatrix) -> dict[str, Any]:
    """Mount path (``kcp_data/units``...) -> document. Callers check project names are unique."""
    unit_entries = [
        ((unit.project, unit.unit_id), unit.to_data()) for manifest in manifests for unit in effective_units(manifest)
    ]
    cell_entries = [((c.task_type, c.dimension, c.value), c.level) for c in matrix.cells()]
    projects = {
        m.project: {
            "version": m.version,
            "kcp_version": m.kcp_version,
            "unit_count": len(m.units),
            "sha256": m.sha256,
        }
        for m in manifests
    }
    return {
        f"{DATA_ROOT}/deployment": {
            "format": DATA_FORMAT,
            "projects": projects,
            "vocabulary": {
                "sensitivity_order": list(vocab.SENSITIVITY_ORDER),
                "autonomy_order": list(vocab.AUTONOMY_LEVELS),
            },
        },
        f"{DATA_ROOT}/units": build_index(unit_entries),
        f"{DATA_ROOT}/matrix": {
            "name": matrix.name,
            "version": matrix.version,
            "sha256": matrix.sha256,
            "task_types": sorted(matrix.data["task_types"]),
            "cells": build_index(cell_entries),
            "parameters": matrix.parameters(),
        },
    }
