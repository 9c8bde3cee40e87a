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
from kcp_opa.compile.evaluatorgen import GENERATED
from kcp_opa.core.errors import CompileError
from kcp_opa.core.jsonread import JsonDict, JsonObject, Strict, shown

PLAN_ENTRYPOINT = "kcp/gate/plan_table"
PLAN_MOUNT = f"{DATA_ROOT}/plan"


def action_types(data: JsonObject) -> list[str]:
    """Every action type a declaration names: the matrix's task types, cells and KCP action map,
    and the budgets' task types. Any other action type decides as ``other`` does, so a part of
    the wrong shape (null included) is a CompileError, never read as naming none (its types would
    decide as ``other``, skipping the evaluators that apply only to them)."""
    mounts = Strict(data, _unplannable, nulls=False)
    matrix = mounts.part(f"{DATA_ROOT}/matrix")
    named = set(matrix.strings("task_types"))
    named.update(matrix.part("kcp_actions").raw)
    for budget in matrix.part("parameters").parts("budgets"):
        if budget.get("task_types") != "all":  # compiled: a list of task types, or "all" (names none)
            named.update(budget.strings("task_types"))
    named.update(_index_keys(mounts.part(f"{DATA_ROOT}/tasks")))
    return sorted(named)


def _unplannable(message: str) -> CompileError:
    return CompileError(f"{message} (its action types cannot be planned)")


def _index_keys(index: Strict) -> set[str]:
    """The keys stored in a hashed index (kcp_opa.compile.datadoc.build_index), strictly."""
    nodes: list[object] = [index.get("slots", {})]
    for _ in range(index.integer("depth", 0)):
        if not all(isinstance(node, list) for node in nodes):
            raise _unplannable(f"{index.where} has a slot that is not a list")
        nodes = [child for node in nodes if isinstance(node, list) for child in node]
    leaves = [node for node in nodes if isinstance(node, Mapping)]
    if len(leaves) != len(nodes):
        raise _unplannable(f"{index.where} has a leaf that is not an object")
    return {key for leaf in leaves for key in leaf}


def unnamed_action_type(named: Sequence[str]) -> str:
    """An action type no declaration names, to stand for every such one."""
    taken = set(named)
    candidate = "kcp-opa:unnamed"
    while candidate in taken:
        candidate += "_"
    return candidate


def nested(mounts: JsonObject) -> JsonDict:
    """The data document as the engines see it, from mount path -> document."""
    root: dict[str, Any] = {}
    for mount, document in mounts.items():
        node = root
        *parents, leaf = mount.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = document
    return root


def build_plan(modules: Mapping[str, str], mounts: JsonObject, *, source: str) -> JsonDict:
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
        fix=f": define it (`kcp-opa generate --policies {source}` writes it into {GENERATED})",
    )
    if not isinstance(table, Mapping) or not isinstance(table.get("profiles"), list):
        raise CompileError(f"{source}: {PLAN_ENTRYPOINT} gave no plan table (profiles, unbound): {shown(table)}")
    return {
        "profiles": [_row(named, row, source) for row in table["profiles"]],
        "unbound": _row(named, table.get("unbound"), source),
    }


def _row(named: Sequence[str], row: object, source: str) -> JsonDict:
    """One row, checked: a row that reads as "no evaluator" because it is malformed would be a
    fail-open (every evaluator it leaves out is skipped), so anything else is a CompileError."""
    rows = row.get("types") if isinstance(row, Mapping) else None
    if not isinstance(row, Mapping) or not isinstance(rows, list) or len(rows) != len(named):
        raise CompileError(f"{source}: {PLAN_ENTRYPOINT} gave a malformed row: {shown(row)}")
    other = _names(row.get("other"), source)
    types = {task: found for task, names in zip(named, rows, strict=True) if (found := _names(names, source)) != other}
    return {"types": types, "other": other}


def _names(value: object, source: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise CompileError(f"{source}: {PLAN_ENTRYPOINT} gave names that are not a list of strings: {shown(value)}")
    return value
