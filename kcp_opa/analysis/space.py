"""The abstract input space of one bundle: the actions that matter, derived from its own data.

Every dimension comes from the bundle (units and their profiles, the matrix's task types and
money thresholds, residency regions, delegation depth, freshness windows, visibility cells), the
action schema's enums (runtime facts) or the policies' text (the attribute flags and task types
a rule names, the facts METADATA ``custom.requires`` lists). Nothing here decides: it only
builds contract-shaped actions and says which facts each one lacks.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kcp_opa.analysis.covering import all_pairs, full_product, product_size, sampled
from kcp_opa.analysis.spacedims import PROBED, DimContext, Edit, dimensions, iso
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.jsonread import JsonDict, JsonObject, items, mapping


@dataclass(frozen=True)
class Choice:
    label: str
    apply: Edit


@dataclass(frozen=True)
class Dimension:
    name: str
    choices: tuple[Choice, ...]


@dataclass
class Sample:
    """One generated action, the decision time, and the facts about it the invariants read."""

    labels: dict[str, str]
    action: JsonDict
    now: str
    facts: JsonDict = field(default_factory=dict)


@dataclass
class Space:
    deployment: str
    dims: list[Dimension]
    base: JsonDict
    now: str
    context: DimContext
    needed: list[str]

    @property
    def size(self) -> int:
        return product_size([len(d.choices) for d in self.dims])

    def rows(self, budget: int, seed: int = 0) -> tuple[list[tuple[int, ...]], bool]:
        """Value indexes per action, and whether they are the whole product (exhaustive)."""
        sizes = [len(d.choices) for d in self.dims]
        if self.size <= budget:
            return list(full_product(sizes)), True
        rows = all_pairs(sizes, seed)[:budget]
        rows += sampled(sizes, max(0, budget - len(rows)), seed + 1)
        return rows, False

    def sample(self, row: Sequence[int]) -> Sample:
        action = copy.deepcopy(self.base)
        ctx = self.context.fresh()
        labels: dict[str, str] = {}
        for dim, index in zip(self.dims, row, strict=True):
            choice = dim.choices[index]
            labels[dim.name] = choice.label
            choice.apply(action, ctx)
        return self.describe(action, ctx.now, labels)

    def describe(self, action: JsonDict, now: str, labels: dict[str, str] | None = None) -> Sample:
        """The facts the built-in invariants read about ACTION (known unit and task, absent needs)."""
        knowledge = action.get("knowledge")
        unit_named = isinstance(knowledge, dict) and "unit" in knowledge
        named = (str(knowledge.get("project")), str(knowledge.get("unit"))) if isinstance(knowledge, dict) else None
        unit_known = unit_named and named in self.context.units
        profile = self.context.units[named][0] if unit_known and named is not None else {}
        temporal = mapping(profile.get("temporal"))
        facts: JsonDict = {
            "knowledge_bound": unit_named,
            "unit_known": bool(unit_known) or not unit_named,
            "task_known": action.get("action_type") in self.context.known_tasks,
            "absent_needed": sorted(p for p in self._needed_for(knowledge) if not present(action, p)),
            # The unit's declared temporal window (epoch seconds or null: an open end).
            "window": {
                "from": temporal.get("from_epoch_seconds"),
                "until": temporal.get("until_epoch_seconds"),
            },
        }
        return Sample(labels or {}, action, now, facts)

    def variants(self, action: JsonObject, only: set[str] | None = None) -> dict[str, list[JsonDict]]:
        """{path: ACTION with each value of its dimension supplied} for every probed fact ACTION
        lacks (``PROBED``; ``only`` narrows the paths): what shows a rule reads it."""
        out: dict[str, list[JsonDict]] = {}
        for dim in self.dims:
            path = PROBED.get(dim.name)
            if path is None or present(action, path) or (only is not None and path not in only):
                continue
            supplied = []
            for choice in dim.choices:
                if choice.label in ("absent", "none"):
                    continue
                variant = copy.deepcopy(dict(action))
                choice.apply(variant, self.context.fresh())
                supplied.append(variant)
            out[path] = supplied
        return out

    def _needed_for(self, knowledge: object) -> set[str]:
        needed = set(self.needed)
        if isinstance(knowledge, dict):
            entry = self.context.units.get((str(knowledge.get("project")), str(knowledge.get("unit"))))
            needs = entry[0].get("effective_visibility", {}) if entry else {}
            for need in items(needs.get("needs") if isinstance(needs, dict) else None):
                if need in self.context.conditional:
                    needed.add(self.context.conditional[need])
        return needed


def derive_space(bundle: LoadedBundle, *, requires_from: Sequence[LoadedBundle] = ()) -> Space:
    """The space for BUNDLE; ``requires_from`` adds other bundles' needed facts (an old policy
    checked against the facts today's rules say they need)."""
    context = DimContext.from_bundle(bundle, builtin_tasks(bundle.modules), attribute_flags(bundle.modules))
    base = _base_action(context)
    needed = sorted({p for b in (bundle, *requires_from) for p in required_facts(b.modules)})
    context.conditional = {k: v for b in (bundle, *requires_from) for k, v in conditional_facts(b.modules).items()}
    context.purposes = forbidden_purposes(bundle.modules)
    dims = [Dimension(name, tuple(Choice(label, fn) for label, fn in choices)) for name, choices in dimensions(context)]
    return Space(context.deployment, dims, base, context.now, context, needed)


_REQUIRES = re.compile(r"^#\s+requires:\s*\[([^\]]*)\]", re.M)
_NEEDED_SET = re.compile(r"^(?:always|when_bound)\s*:=\s*\{([^}]*)\}", re.M)
_LITERAL = re.compile(r'"(input\.action(?:\.[a-z_]+)+)"')
_CONDITIONAL = re.compile(r'"([a-z_]+)":\s*"(input\.action(?:\.[a-z_]+)+)"')


def required_facts(modules: Mapping[str, str]) -> set[str]:
    """input.action paths the rules say every (knowledge-bound) action needs: METADATA
    ``requires`` and the context evaluator's ``always`` and ``when_bound`` sets."""
    found: set[str] = set()
    for name, source in modules.items():
        if name.endswith("_test.rego"):
            continue
        for listed in _REQUIRES.findall(source):
            found |= {p.strip() for p in listed.split(",") if p.strip().startswith("input.action.")}
        for listed in _NEEDED_SET.findall(source):
            found |= set(_LITERAL.findall(listed))
    return found


def conditional_facts(modules: Mapping[str, str]) -> dict[str, str]:
    """Facts needed only where a unit's visibility condition reads them: {need: path}
    (``effective_visibility.needs`` in the unit's profile names the needs)."""
    found: dict[str, str] = {}
    for name, source in modules.items():
        if not name.endswith("_test.rego"):
            found |= dict(_CONDITIONAL.findall(source))
    return found


_SET = re.compile(r"\{((?:\s*\"[a-z_]+\"\s*,?)+)\}")
_WORD = re.compile(r'"([a-z_]+)"')


def builtin_tasks(modules: Mapping[str, str]) -> set[str]:
    """Task types a policy names itself (a literal set on a line that reads action_type or is a
    money-moving set), beyond the matrix's."""
    found: set[str] = set()
    for name, source in modules.items():
        if name.endswith("_test.rego"):
            continue
        for line in source.splitlines():
            if "action_type" in line or "_money_moving :=" in line:
                for group in _SET.findall(line):
                    found |= set(_WORD.findall(group))
                found |= set(re.findall(r'action_type\s*==\s*"([a-z_]+)"', line))
    return found


_PURPOSES = re.compile(r"folded\.purpose\s+in\s+\{([^}]*)\}")


def forbidden_purposes(modules: Mapping[str, str]) -> list[str]:
    """Purposes a rule forbids by name (``input.context.folded.purpose in {...}``), in order."""
    found: list[str] = []
    for name, source in sorted(modules.items()):
        if not name.endswith("_test.rego"):
            for group in _PURPOSES.findall(source):
                found += [word for word in _WORD.findall(group) if word not in found]
    return found


def attribute_flags(modules: Mapping[str, str]) -> list[str]:
    """Attribute flags a rule raises on: names tested against the raised set or read directly."""
    found: set[str] = set()
    for name, source in modules.items():
        if name.endswith("_test.rego"):
            continue
        lines = source.splitlines()
        for index, line in enumerate(lines):
            found |= set(re.findall(r'"([a-z_]+)"\s+in\s+_raised', line))
            found |= set(re.findall(r"attributes\.([a-z_]+)", line))
            if re.search(r"in\s+_raised\b", line):
                for follow in lines[index + 1 : index + 3]:
                    for group in _SET.findall(follow):
                        found |= set(_WORD.findall(group))
    return sorted(found)


def _base_action(ctx: DimContext) -> JsonDict:
    """A contract-valid action every dimension edits."""
    return {
        "schema_version": "2.0",
        "action_id": "act_analysis_0001",
        "idempotency_key": "idem_analysis_0001",
        "tenant_id": "tenant_a",
        "subject_id": "user_1",
        "agent_id": "analysis-agent",
        "action_type": "read",
        "requested_action": "read",
        "target": {"type": "customer_record", "reference": "ref_1", "tenant_id": "tenant_a"},
        "authorization_context": {
            "requested_by": "user_1",
            "authenticated_principal": "user_1",
            "agent_scope": ["read"],
            "session_id": "sess_1",
        },
        "runtime": {
            "deployment_region": ctx.regions[0] if ctx.regions else "EU",
            "model": {"id": "analysis-model", "hosting": "self_hosted"},
            "risk_level": "low",
            "evidence_status": "present",
            "budget_state": "within_budget",
        },
        "trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        "created_at": iso(ctx.now_seconds - 60),
    }


def present(action: JsonObject, path: str) -> bool:
    """Whether ACTION holds a non-null value at PATH (``input.action.a.b``)."""
    node: object = action
    for part in path.split(".")[2:]:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return node is not None
