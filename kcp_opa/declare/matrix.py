"""The delegation matrix: the autonomy level the CTO and the compliance officer agreed per task
type x data category / sensitivity, and the parameters the policies read (thresholds, approver
roles, receipt TTL). Anything the matrix does not list is forbidden by the policies."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcp_opa import schemas
from kcp_opa.core.jsonread import JsonObject, mapping, objects
from kcp_opa.declare import budgets, money
from kcp_opa.declare import vocabulary as vocab
from kcp_opa.declare.declstrings import MATRIX_RULES, check_declaration_strings
from kcp_opa.declare.diagnostics import Findings, Report, did_you_mean
from kcp_opa.declare.parameters import MatrixParameters
from kcp_opa.declare.validation import DocumentKind, load_file, validate_file
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES

DIMENSIONS = ("data_categories", "sensitivity")
KCP_ACTIONS = ("read", "summarize", "modify", "share_externally", "execute")
REQUIRED_SIGNATORIES = ("cto", "compliance_officer")


@dataclass(frozen=True)
class Cell:
    task_type: str
    dimension: str
    value: str
    level: str


@dataclass(frozen=True)
class DelegationMatrix:
    file: str
    sha256: str
    data: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def version(self) -> str:
        return str(self.data["version"])

    def cells(self) -> Iterator[Cell]:
        for task_type in sorted(self.data["task_types"]):
            entry = self.data["task_types"][task_type]
            for dimension in DIMENSIONS:
                for value, level in sorted((entry.get(dimension) or {}).items()):
                    yield Cell(task_type, dimension, value, level)

    @property
    def unenforced(self) -> dict[str, str]:
        """The declarations this deployment acknowledges the gate leaves unenforced: ``at`` -> reason
        (kcp_opa.declare.unenforced; compile refuses any other)."""
        return {str(e["at"]): str(e["reason"]) for e in self.data.get("unenforced") or []}

    def kcp_actions(self) -> dict[str, str]:
        """Task type -> the KCP authority action it performs: declared, or its own name when that
        is a standard action (KCP §4.17). Unmapped task types are absent (authority.rego)."""
        out: dict[str, str] = {}
        for task_type, entry in self.data["task_types"].items():
            declared = entry.get("kcp_action") if isinstance(entry, dict) else None
            if isinstance(declared, str):
                out[task_type] = declared
            elif task_type in KCP_ACTIONS:
                out[task_type] = task_type
        return dict(sorted(out.items()))

    def requested_actions(self) -> dict[str, list[str]]:
        """Task type -> the tools (``requested_action`` values) it may request, for the task types
        that list them; empty when the matrix binds no tool to a task type (action.rego)."""
        out: dict[str, list[str]] = {}
        for task_type, entry in self.data["task_types"].items():
            listed = entry.get("requested_actions") if isinstance(entry, dict) else None
            if isinstance(listed, list):
                out[task_type] = sorted(set(listed))
        return dict(sorted(out.items()))

    def parameters(self) -> MatrixParameters:
        """The parameters with defaults filled in (kcp_opa.declare.parameters), so the policies
        never meet a missing key."""
        return MatrixParameters.from_dict(self.data.get("parameters"))


MatrixReport = Report[DelegationMatrix]


def _counts(data: JsonObject) -> dict[str, int]:
    task_types = mapping(data.get("task_types"))
    cell_count = 0
    for entry in task_types.values():
        for dim in DIMENSIONS:
            cells = entry.get(dim) if isinstance(entry, dict) else None
            cell_count += len(cells) if isinstance(cells, dict) else 0
    return {"task_type_count": len(task_types), "cell_count": cell_count}


def validate_matrix(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> MatrixReport:
    return validate_file(MATRIX_KIND, path, max_bytes)


def load_matrix(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> DelegationMatrix:
    return load_file(MATRIX_KIND, path, max_bytes)


def _check_semantics(doc: JsonObject, findings: Findings) -> None:
    check_declaration_strings(doc, MATRIX_RULES, findings)
    roles = {a.get("role") for a in objects(doc.get("agreed_by"))}
    for role in REQUIRED_SIGNATORIES:
        if role not in roles:
            findings.warn(
                "unsigned",
                f"agreed_by has no {role!r}: the matrix is meant to be agreed by both",
                ("agreed_by",),
            )
    task_types = doc.get("task_types")
    if not isinstance(task_types, dict):
        return
    for task_type, entry in task_types.items():
        here = ("task_types", task_type)
        hint = did_you_mean(task_type, vocab.TASK_TYPES) if task_type not in vocab.TASK_TYPES else ""
        if hint:
            findings.warn(
                "unknown_task_type",
                f"task type {task_type!r} is not a known action_type{hint}",
                here,
            )
        if not isinstance(entry, dict):
            continue
        if not any(entry.get(dim) for dim in DIMENSIONS):
            findings.error(
                "task_type_without_cells",
                "declares no data_categories or sensitivity cells: every action of this type would be denied; "
                "list its cells or remove it",
                here,
            )
        categories = entry.get("data_categories")
        if isinstance(categories, dict):
            for category in categories:
                if category not in vocab.DATA_CATEGORIES:
                    findings.warn(
                        "unknown_data_category",
                        f"data category {category!r} is not known to kcp-opa"
                        f"{did_you_mean(category, vocab.DATA_CATEGORIES)}",
                        (*here, "data_categories", category),
                    )
    _check_requested_actions(task_types, findings)
    params = doc.get("parameters")
    if isinstance(params, dict):
        budgets.check(params, task_types, findings)
        money.check(params, task_types, findings)
        for task_type in mapping(mapping(params.get("approver_roles")).get("by_task_type")):
            if task_type not in task_types:
                findings.warn(
                    "approver_for_unknown_task",
                    f"approver role for {task_type!r}, which the matrix does not list",
                    ("parameters", "approver_roles", "by_task_type", task_type),
                )


def _check_requested_actions(task_types: JsonObject, findings: Findings) -> None:
    """Once any task type lists its tools, the gate decides an action on the task type the caller
    names and the receipt runs the tool it names: a task type that lists none, or a tool listed
    under two task types, would let a caller pick the weakest task type for a tool."""
    listed = {
        task_type: entry["requested_actions"]
        for task_type, entry in task_types.items()
        if isinstance(entry, dict) and isinstance(entry.get("requested_actions"), list)
    }
    if not listed:
        return
    for task_type in task_types:
        if task_type not in listed:
            findings.error(
                "requested_actions_missing",
                "lists no requested_actions while other task types do: every action of this type would be "
                "denied requested_action_not_in_task_type; list the tools it may request",
                ("task_types", task_type),
            )
    owners: dict[str, list[str]] = {}
    for task_type, tools in listed.items():
        for tool in tools:
            if isinstance(tool, str):
                owners.setdefault(tool, []).append(task_type)
    for tool, types in sorted(owners.items()):
        if len(types) > 1:
            findings.error(
                "requested_action_in_several_task_types",
                f"tool {tool!r} is listed under task types {', '.join(sorted(types))}: a caller could name "
                "whichever decides weakest; give each task type its own tools",
                ("task_types", sorted(types)[1], "requested_actions"),
            )


MATRIX_KIND: DocumentKind[DelegationMatrix] = DocumentKind(
    noun="delegation matrix",
    schema=schemas.MATRIX,
    check=_check_semantics,
    counts=_counts,
    build=lambda source: DelegationMatrix(source.file, source.sha256, source.data),
)
