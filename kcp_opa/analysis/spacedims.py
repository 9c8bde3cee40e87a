"""The dimensions of the input space: each a list of (label, edit) over a contract-valid action.

An edit reads the per-action context (the unit chosen first, so fields, regions, delegation
depth and the clock follow that unit's profile). Values come from the bundle's data and the
action schema's enums; "absent" is a value of every optional fact.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from kcp_opa.analysis.restricted import OTHER_PURPOSE, OUTSIDE_PLACE, branch, inside, not_for, purpose
from kcp_opa.compile.bundle import LoadedBundle
from kcp_opa.core.jsonread import JsonDict, JsonObject, integer, items, mapping, strings
from kcp_opa.schemas import schema as load_schema

Edit = Callable[[JsonDict, "DimContext"], None]
UNKNOWN_UNIT = "analysis-unknown-unit"
UNKNOWN_TASK = "analysis_unknown_task"
UNDECLARED_FIELD = "analysis_undeclared_field"
_DAY = 86400
#: Facts whose absence the contract gives no meaning (unlike no delegation chain, no attributes,
#: no amount on a read, no trace where none is required, and the environment and actor role,
#: which matter only where a unit's visibility conditions read them, and then are needed facts
#: by its profile's ``needs``): where one is absent from an action
#: that allows, ``prove`` decides the action again with each value of its dimension supplied.
#: A value that holds or denies the action shows a rule reads the fact, so the absence is
#: missing context (contract principle 3), whether or not the policies' METADATA lists it.
PROBED = {
    "tenant": "input.action.target.tenant_id",
    "region": "input.action.runtime.deployment_region",
    "principal": "input.action.authorization_context.authenticated_principal",
    "budget_state": "input.action.runtime.budget_state",
    "evidence_status": "input.action.runtime.evidence_status",
    "risk_level": "input.action.runtime.risk_level",
    "hosting": "input.action.runtime.model.hosting",
}
#: The value each runtime fact has in the base action: the first choice of its dimension, so
#: row 0 of every dimension is the clean action the others deviate from.
_BASE_VALUES = {
    "runtime.budget_state": "within_budget",
    "runtime.evidence_status": "present",
    "runtime.risk_level": "low",
    "runtime.model.hosting": "self_hosted",
}


@dataclass
class DimContext:
    """What the bundle declares, and (per action) the unit chosen and the decision time."""

    deployment: str
    units: dict[tuple[str, str], tuple[JsonObject, JsonObject]]
    matrix_tasks: list[str]
    builtin: list[str]
    flags: list[str]
    regions: list[str]
    money: dict[str, list[int]]
    max_age: int
    max_skew: int
    now_seconds: int
    environments: list[str]
    roles: list[str]
    profile: JsonObject = field(default_factory=dict)
    slot: JsonObject = field(default_factory=dict)
    now: str = ""
    conditional: dict[str, str] = field(default_factory=dict)
    #: Purposes a policy forbids by name (no-ai-training's training purposes), from its text.
    purposes: list[str] = field(default_factory=list)
    #: Task type -> the tools the matrix lets it request (empty: the matrix binds none).
    tools: dict[str, list[str]] = field(default_factory=dict)
    #: The task types the matrix says move money (empty: it lists none, any amount moves money).
    money_tasks: list[str] = field(default_factory=list)
    #: The currency of a clean money-moving action's amount: one with a high-value threshold.
    clean_currency: str = "EUR"

    @property
    def known_tasks(self) -> set[str]:
        return set(self.matrix_tasks) | set(self.builtin)

    def fresh(self) -> DimContext:
        return replace(self, profile={}, slot={}, now=iso(self.now_seconds))

    @classmethod
    def from_bundle(cls, bundle: LoadedBundle, builtin: set[str], flags: list[str]) -> DimContext:
        kcp = mapping(bundle.data.get("kcp_data"))
        profiles = items(kcp.get("profiles"))
        units: dict[tuple[str, str], tuple[JsonObject, JsonObject]] = {}
        index_doc = mapping(kcp.get("units"))
        slots = leaves(index_doc.get("slots"), integer(index_doc.get("depth")) or 0)
        for project, unit, slot in ((p, u, s) for p, by_unit in slots for u, s in leaves(by_unit, 0)):
            at = slot.get("profile")
            profile = mapping(profiles[at]) if isinstance(at, int) and at < len(profiles) else {}
            units[(project, unit)] = (profile, slot)
        matrix = mapping(kcp.get("matrix"))
        params = bundle.parameters
        money: dict[str, set[int]] = {}
        for table in (params.high_value_minor, params.confirmation_minor):
            for currency, minor in table.items():
                money.setdefault(currency, set()).update({max(minor - 1, 1), max(minor, 1)})
        regions = sorted({r for p, _ in units.values() for r in strings(_get(p, "compliance", "data_residency"))})
        envs: set[str] = set()
        roles: set[str] = set(params.sender_roles)
        for profile, _ in units.values():
            cells = mapping(_get(profile, "effective_visibility", "cells"))
            envs |= {e for e in cells if e}
            roles |= {r for by_role in cells.values() if isinstance(by_role, Mapping) for r in by_role if r}
        days = [day for _, s in units.values() if (day := integer(s.get("validated_epoch_day"))) is not None]
        now_seconds = ((max(days) + 1) if days else 20786) * _DAY + 36000
        below = sorted(c for c, minor in params.high_value_minor.items() if minor > 1)
        projects = sorted(mapping(mapping(kcp.get("deployment")).get("projects"))) or sorted({p for p, _ in units})
        tasks = strings(matrix.get("task_types"))
        return cls(
            deployment=projects[0] if projects else "deployment",
            units=units,
            matrix_tasks=sorted(tasks),
            tools={t: strings(v) for t, v in mapping(matrix.get("requested_actions")).items() if v},
            money_tasks=sorted(params.money_moving_task_types or ()),
            clean_currency=below[0] if below else "EUR",
            builtin=sorted(builtin - set(tasks)),
            flags=flags,
            regions=regions,
            money={c: sorted(v) for c, v in sorted(money.items())},
            max_age=params.context.max_action_age_seconds,
            max_skew=params.context.max_future_skew_seconds,
            now_seconds=now_seconds,
            environments=sorted(envs),
            roles=sorted(roles),
        )


def leaves(slots: object, depth: int) -> Iterator[tuple[str, JsonObject]]:
    """(key, object) at the leaves of a compiled index hashed DEPTH levels deep (units, tasks), in
    index order: level by level, each leaf's keys sorted."""
    if depth > 0:
        levels = slots if isinstance(slots, list) else list(slots.values()) if isinstance(slots, Mapping) else []
        for level in levels:
            yield from leaves(level, depth - 1)
    elif isinstance(slots, Mapping):
        yield from sorted(((str(k), v) for k, v in slots.items() if isinstance(v, Mapping)), key=lambda kv: kv[0])


def dimensions(ctx: DimContext) -> list[tuple[str, list[tuple[str, Edit]]]]:
    runtime = load_schema("action-intent.schema.json")["properties"]["runtime"]["properties"]
    dims: list[tuple[str, list[tuple[str, Edit]]]] = [
        ("unit", _units(ctx)),
        ("task", [(t, _task(t)) for t in [*ctx.matrix_tasks, *ctx.builtin, UNKNOWN_TASK]]),
        ("fields", [("declared", _fields(0)), ("undeclared", _fields(1)), ("empty", _fields(2))]),
        (
            "tenant",
            [
                ("same", _set("target.tenant_id", "tenant_a")),
                ("other", _set("target.tenant_id", "tenant_b")),
                ("absent", _drop("target.tenant_id")),
            ],
        ),
        ("amount", _amounts(ctx)),
        (
            "region",
            [(r, _set("runtime.deployment_region", r)) for r in [*ctx.regions, "ZZ"]]
            + [("absent", _drop("runtime.deployment_region"))],
        ),
        ("delegation", _delegation()),
        ("attributes", [("none", _drop("attributes"))] + [(f, _set("attributes", {f: True})) for f in ctx.flags]),
        ("clock", _clock(ctx)),
        (
            "principal",
            [
                ("same", _set("authorization_context.authenticated_principal", "user_1")),
                ("other", _set("authorization_context.authenticated_principal", "user_2")),
                ("absent", _drop("authorization_context.authenticated_principal")),
            ],
        ),
        ("trace", [("present", _noop), ("absent", _drop("trace"))]),
        (
            "scopes",
            [
                ("unit_scope", _noop),
                ("none", _drop("authorization_context.principal_scopes")),
                ("other", _set("authorization_context.principal_scopes", ["analysis:other"])),
            ],
        ),
    ]
    for name, path in (
        ("budget_state", "runtime.budget_state"),
        ("evidence_status", "runtime.evidence_status"),
        ("risk_level", "runtime.risk_level"),
        ("hosting", "runtime.model.hosting"),
    ):
        schema = runtime["model"]["properties"]["hosting"] if name == "hosting" else runtime[name]
        base = _BASE_VALUES.get(path)
        values: list[str] = sorted(schema["enum"], key=lambda value: value != base)
        dims.append((name, [(v, _set(path, v)) for v in values] + [("absent", _drop(path))]))
    dims.append(
        (
            "environment",
            [("absent", _noop)] + [(e, _set("runtime.environment", e)) for e in [*ctx.environments, "analysis-env"]],
        )
    )
    dims.append(
        (
            "actor_role",
            [(r, _set("authorization_context.actor_role", r)) for r in [*ctx.roles, "analysis_role"]]
            + [("absent", _noop)],
        )
    )
    # Where the data goes (no-cross-border reads it): the clean action names a place inside the
    # unit's residency, so a unit under no-cross-border is not denied for saying nothing.
    outside = _set("target.country", OUTSIDE_PLACE)
    dims.append(("target_place", [("inside", inside), ("outside", outside), ("absent", _drop("target.country"))]))
    purposes = [(p, purpose(p)) for p in [*ctx.purposes, OTHER_PURPOSE]]
    dims.append(("purpose", [("absent", purpose(None)), *purposes, ("not_for", not_for)]))
    return dims


def _units(ctx: DimContext) -> list[tuple[str, Edit]]:
    choices: list[tuple[str, Edit]] = []
    for (project, unit), (profile, slot) in ctx.units.items():

        def bind(
            action: JsonDict,
            c: DimContext,
            p: str = project,
            u: str = unit,
            pr: JsonObject = profile,
            sl: JsonObject = slot,
        ) -> None:
            action["knowledge"] = {"project": p, "unit": u, "fields_read": []}
            scope = pr.get("auth_scope")
            if isinstance(scope, str) and scope:  # the clean principal holds the unit's scope
                branch(action, "authorization_context")["principal_scopes"] = [scope]
            c.profile, c.slot = pr, sl

        choices.append((f"{project}/{unit}", bind))
    project = next(iter(ctx.units))[0] if ctx.units else ctx.deployment

    def unknown(action: JsonDict, c: DimContext) -> None:
        action["knowledge"] = {"project": project, "unit": UNKNOWN_UNIT, "fields_read": []}

    def none(action: JsonDict, c: DimContext) -> None:
        action.pop("knowledge", None)

    return [*choices, ("unknown", unknown), ("none", none)]


def _task(task: str) -> Edit:
    def edit(action: JsonDict, c: DimContext) -> None:
        tool = (c.tools.get(task) or [task])[0]  # the first tool the matrix binds to the type
        action["action_type"] = task
        action["requested_action"] = tool
        branch(action, "authorization_context")["agent_scope"] = [tool]

    return edit


def _fields(kind: int) -> Edit:
    def edit(action: JsonDict, c: DimContext) -> None:
        knowledge = action.get("knowledge")
        if not isinstance(knowledge, dict):
            return
        task = action.get("action_type")  # set by the task dimension, applied before this one
        # the task type's own list when the unit declares one (field_access.rego reads it), else the unit's
        listed = _get(c.profile, "compliance", "declared_fields_by_task_type", task) if isinstance(task, str) else None
        own = listed if isinstance(listed, list) else _get(c.profile, "compliance", "declared_fields")
        declared = items(own)[:2]
        knowledge["fields_read"] = [declared, [*declared, UNDECLARED_FIELD], []][kind]

    return edit


def _amounts(ctx: DimContext) -> list[tuple[str, Edit]]:
    """Row 0 is the clean action's amount: where the matrix lists its money-moving task types, an
    action of one states a small amount below the high-value threshold (without one it is denied
    amount_missing) and any other states none (with one it is denied amount_on_non_money_action)."""

    def clean(action: JsonDict, c: DimContext) -> None:
        if action.get("action_type") in c.money_tasks:
            action["amount"] = {"value_minor": 1, "currency": c.clean_currency}
        else:
            action.pop("amount", None)

    choices: list[tuple[str, Edit]] = [("clean" if ctx.money_tasks else "absent", clean)]
    for currency, values in ctx.money.items():
        choices += [(f"{currency}:{v}", _set("amount", {"value_minor": v, "currency": currency})) for v in values]
    choices.append(("XTS:100", _set("amount", {"value_minor": 100, "currency": "XTS"})))
    return choices


def _delegation() -> list[tuple[str, Edit]]:
    def chain(extra: int, widened: bool = False) -> Edit:
        def edit(action: JsonDict, c: DimContext) -> None:
            depth = _get(c.profile, "delegation", "max_depth")
            hops = (depth if isinstance(depth, int) else 1) + extra
            scope = list(items(branch(action, "authorization_context").get("agent_scope")))
            links: list[JsonDict] = [
                {"agent_id": f"agent-{i}", "capabilities": list(scope)} for i in range(max(hops, 1) + 1)
            ]
            if widened:
                links[-1]["capabilities"] = [*scope, "analysis.widened"]
            action["delegation_chain"] = links

        return edit

    return [
        ("none", _drop("delegation_chain")),
        ("max_depth", chain(0)),
        ("max_depth+1", chain(1)),
        ("widened", chain(0, widened=True)),
    ]


def _clock(ctx: DimContext) -> list[tuple[str, Edit]]:
    def created(offset: int) -> Edit:
        def edit(action: JsonDict, c: DimContext) -> None:
            action["created_at"] = iso(c.now_seconds + offset)

        return edit

    def stale(extra_days: int) -> Edit:
        def edit(action: JsonDict, c: DimContext) -> None:
            day = c.slot.get("validated_epoch_day")
            age = _get(c.profile, "freshness", "max_age_days")
            if isinstance(day, int) and isinstance(age, int):
                seconds = (day + age + extra_days) * _DAY + 36000
                c.now = iso(seconds)
                action["created_at"] = iso(seconds - 60)

        return edit

    def window(bound: str, offset: int) -> Edit:
        """The decision at the unit's temporal bound (KCP temporal, inclusive) plus OFFSET s."""

        def edit(action: JsonDict, c: DimContext) -> None:
            edge = _get(c.profile, "temporal", f"{bound}_epoch_seconds")
            if isinstance(edge, int) and not isinstance(edge, bool):
                c.now = iso(edge + offset)
                action["created_at"] = iso(edge + offset - 60)

        return edit

    return [
        ("fresh", _noop),
        ("max_age", created(-ctx.max_age)),
        ("max_age+1", created(-ctx.max_age - 1)),
        ("skew", created(ctx.max_skew)),
        ("skew+1", created(ctx.max_skew + 1)),
        ("unit_stale_edge", stale(0)),
        ("unit_stale+1", stale(1)),
        ("window_from-1", window("from", -1)),
        ("window_from", window("from", 0)),
        ("window_until", window("until", 0)),
        ("window_until+1", window("until", 1)),
    ]


def _set(path: str, value: object) -> Edit:
    def edit(action: JsonDict, c: DimContext) -> None:
        *parents, last = path.split(".")
        branch(action, *parents)[last] = value

    return edit


def _drop(path: str) -> Edit:
    def edit(action: JsonDict, c: DimContext) -> None:
        node: object = action
        *parents, last = path.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)

    return edit


def _get(node: object, *keys: str) -> object:
    """NODE[k1][k2]..., None where a level is missing or not a mapping (profiles hold nulls)."""
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _noop(action: JsonDict, c: DimContext) -> None:
    return None


def iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
