"""The decision plan: which evaluators a decision can need, decided once at compile time.

An evaluator whose module defines ``applies(profile, task)`` can only find something for some
unit profiles and action types, and that depends on declarations alone. ``kcp-opa compile``
evaluates the generated ``kcp.gate.plan_table`` (every such ``applies`` over every profile and
every action type the declarations name, plus one they do not) with regopy, in a child process
as every first build of modules is, and stores the answer in the bundle as ``kcp_data/plan``.
A decision then reaches only the evaluators its row names (``kcp.gate.planned``), and
``opa eval`` of the archived input over the same bundle reaches the same ones.

Python decides nothing here: it lists the action types the data names, runs the Rego and
reshapes its answer into lookups (a row per profile, an entry per action type whose evaluators
differ from the row's ``other``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kcp_opa.compile.datadoc import DATA_ROOT
from kcp_opa.compile.enginecheck import query_in_child

PLAN_ENTRYPOINT = "kcp/gate/plan_table"
PLAN_MOUNT = f"{DATA_ROOT}/plan"


def action_types(data: Mapping[str, Any]) -> list[str]:
    """Every action type a declaration names: the matrix's task types, cells and KCP action map,
    and the budgets' task types. Any other action type decides as ``other`` does."""
    matrix = data.get(f"{DATA_ROOT}/matrix", {})
    named: set[str] = set(matrix.get("task_types", []))
    named.update(matrix.get("kcp_actions", {}))
    for budget in matrix.get("parameters", {}).get("budgets", []):
        if isinstance(budget.get("task_types"), list):
            named.update(budget["task_types"])
    named.update(_index_keys(data.get(f"{DATA_ROOT}/tasks", {})))
    return sorted(t for t in named if isinstance(t, str))


def _index_keys(index: Mapping[str, Any]) -> set[str]:
    """The keys stored in a hashed index (kcp_opa.compile.datadoc.build_index)."""
    nodes: list[Any] = [index.get("slots", {})]
    for _ in range(int(index.get("depth", 0))):
        nodes = [child for node in nodes for child in node]
    return {key for node in nodes for key in node}


def unnamed_action_type(named: Sequence[str]) -> str:
    """An action type no declaration names, to stand for every such one."""
    taken = set(named)
    candidate = "kcp-opa:unnamed"
    while candidate in taken:
        candidate += "_"
    return candidate


def nested(mounts: Mapping[str, Any]) -> dict[str, Any]:
    """The data document as the engines see it, from mount path -> document."""
    root: dict[str, Any] = {}
    for mount, document in mounts.items():
        node = root
        *parents, leaf = mount.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = document
    return root


def build_plan(modules: Mapping[str, str], mounts: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``kcp_data/plan``: ``profiles`` (one row per profile, in the profiles' order) and
    ``unbound`` (actions on no known unit); a row is ``{"types": {action type: names},
    "other": names}``, listing a type only where it differs from ``other``."""
    named = action_types(mounts)
    table = query_in_child(
        nested(mounts),
        modules,
        PLAN_ENTRYPOINT,
        {"task_types": named, "other": unnamed_action_type(named)},
        source=source,
    )
    return {
        "profiles": [_row(named, row) for row in table["profiles"]],
        "unbound": _row(named, table["unbound"]),
    }


def _row(named: Sequence[str], row: Mapping[str, Any]) -> dict[str, Any]:
    other = list(row["other"])
    types = {task: list(names) for task, names in zip(named, row["types"], strict=True) if list(names) != other}
    return {"types": types, "other": other}
