"""The delegation matrix's parameters as one typed document: read once, defaults applied once.

:meth:`MatrixParameters.from_dict` reads either form, the matrix's ``parameters`` block as
declared or the normalised form a compiled bundle carries (``kcp_data/matrix/parameters``), and
:meth:`MatrixParameters.to_dict` gives back the bundle's form, so reading a bundle's parameters
and writing them again changes no byte. It is strict: a present field of the wrong type is a
:class:`ParametersError`, never read as absent (a budget read as absent goes uncounted, an
exception lifetime read as absent admits the default). Absent (or null) fields take the
defaults here, and only here; ``budgets``/``velocity`` stay checked JSON objects, which is
how the counters and the policies read them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from kcp_opa.core.errors import KcpOpaError
from kcp_opa.core.jsonread import JsonDict, JsonObject, Strict
from kcp_opa.declare.money import CONTROLS, MOVING, NO_CONTROL, UNDECLARED

DEFAULT_APPROVER_ROLE = "compliance_officer"
DEFAULT_SENDER_ROLES = ("support_agent",)
DEFAULT_RECEIPT_TTL_SECONDS = 300
# Missing context and action freshness (docs/fail-closed.md): every task type is knowledge-bound
# unless the matrix lists the ones that are; an action created more than a day before the
# decision is action_stale, more than 15 minutes after it clock_skew.
DEFAULT_MAX_ACTION_AGE_SECONDS = 86400
DEFAULT_MAX_FUTURE_SKEW_SECONDS = 900
#: The longest an exception may run, issued to expiry (kcp_opa.declare.exceptionfile): 30 days.
DEFAULT_MAX_LIFETIME_SECONDS = 30 * 86400
DEFAULT_RATE_LIMIT_OUTCOME = "DENY"
DEFAULT_VELOCITY_OUTCOME = "HUMAN_APPROVAL"
ALL: Final = "all"

#: A task type's control set for a money threshold: sorted controls, or ``none`` said explicitly.
ControlSet = tuple[str, ...] | Literal["none"]


class ParametersError(KcpOpaError):
    """A matrix ``parameters`` field is present with the wrong type: refused, never read as absent."""


@dataclass(frozen=True)
class ApproverRoles:
    """The role an approver must hold: per task type, else ``default``."""

    default: str = DEFAULT_APPROVER_ROLE
    by_task_type: Mapping[str, str] | None = None

    def for_task(self, task_type: str) -> str:
        return (self.by_task_type or {}).get(task_type, self.default)

    def every(self) -> set[str]:
        """Every role the matrix asks an approver to hold."""
        return {self.default, *(self.by_task_type or {}).values()}


@dataclass(frozen=True)
class ContextLimits:
    """Missing context and action freshness (docs/fail-closed.md)."""

    knowledge_bound_task_types: tuple[str, ...] | Literal["all"] = ALL
    max_action_age_seconds: int = DEFAULT_MAX_ACTION_AGE_SECONDS
    max_future_skew_seconds: int = DEFAULT_MAX_FUTURE_SKEW_SECONDS
    #: The target types outside every tenant, as declared (None: not declared).
    external_target_types: tuple[str, ...] | None = None

    def knowledge_bound(self, task_type: str) -> bool:
        return self.knowledge_bound_task_types == ALL or task_type in self.knowledge_bound_task_types


@dataclass(frozen=True)
class MatrixParameters:
    """Thresholds, approver and sender roles, receipt lifetime, freshness, exception lifetime,
    budgets, velocity, rate-limit outcome and money controls, with every default filled in."""

    high_value_minor: Mapping[str, int]
    confirmation_minor: Mapping[str, int]
    approver_roles: ApproverRoles
    sender_roles: tuple[str, ...]
    receipt_ttl_seconds: int
    context: ContextLimits
    max_exception_lifetime_seconds: int
    #: Normalised budget and velocity rules (sorted by id, ``description`` dropped).
    budgets: tuple[JsonObject, ...]
    velocity: tuple[JsonObject, ...]
    rate_limit_outcome: str
    #: The money-moving task types, sorted (None: undeclared, any amount is a value transfer).
    money_moving_task_types: tuple[str, ...] | None
    money_controls_by_task_type: Mapping[str, Mapping[str, ControlSet]]

    @classmethod
    def from_dict(cls, raw: object, where: str = "parameters") -> MatrixParameters:
        """The parameters declared (or compiled) in ``raw``; None reads as none declared."""
        given = Strict(raw, ParametersError, where)
        money, roles = given.part("money"), given.part("approver_roles")
        context, exceptions = given.part("context"), given.part("exceptions")
        return cls(
            high_value_minor=money.integer_map("high_value_minor"),
            confirmation_minor=money.integer_map("confirmation_minor"),
            approver_roles=ApproverRoles(roles.text("default", DEFAULT_APPROVER_ROLE), roles.text_map("by_task_type")),
            sender_roles=tuple(sorted(set(given.strings("sender_roles", DEFAULT_SENDER_ROLES)))),
            receipt_ttl_seconds=given.integer("receipt_ttl_seconds", DEFAULT_RECEIPT_TTL_SECONDS),
            context=_context(context),
            max_exception_lifetime_seconds=exceptions.integer("max_lifetime_seconds", DEFAULT_MAX_LIFETIME_SECONDS),
            budgets=tuple(_budgets(given)),
            velocity=tuple(
                sorted(
                    ({"outcome": DEFAULT_VELOCITY_OUTCOME, **_rule(rule)} for rule in given.parts("velocity")),
                    key=lambda rule: str(rule["id"]),
                )
            ),
            rate_limit_outcome=given.part("rate_limits").text("outcome", DEFAULT_RATE_LIMIT_OUTCOME),
            money_moving_task_types=_moving(given),
            money_controls_by_task_type=_controls(given.part(CONTROLS)),
        )

    def named_controls(self) -> Iterator[tuple[tuple[str | int, ...], str]]:
        """(matrix path, control) for every control ``money_controls_by_task_type`` names."""
        for task, by_kind in self.money_controls_by_task_type.items():
            for kind, controls in by_kind.items():
                for position, control in enumerate(() if controls == NO_CONTROL else controls):
                    yield ("parameters", CONTROLS, task, kind, position), control

    def to_dict(self) -> JsonDict:
        """The form the bundle carries (``kcp_data/matrix/parameters``), key for key."""
        context: JsonDict = {
            "knowledge_bound_task_types": _listing(self.context.knowledge_bound_task_types),
            "max_action_age_seconds": self.context.max_action_age_seconds,
            "max_future_skew_seconds": self.context.max_future_skew_seconds,
        }
        if self.context.external_target_types is not None:
            context["external_target_types"] = list(self.context.external_target_types)
        return {
            "money": {
                "high_value_minor": dict(self.high_value_minor),
                "confirmation_minor": dict(self.confirmation_minor),
            },
            "approver_roles": {
                "default": self.approver_roles.default,
                "by_task_type": dict(self.approver_roles.by_task_type or {}),
            },
            "sender_roles": list(self.sender_roles),
            "receipt_ttl_seconds": self.receipt_ttl_seconds,
            "context": context,
            "exceptions": {"max_lifetime_seconds": self.max_exception_lifetime_seconds},
            "budgets": [dict(rule) for rule in self.budgets],
            "velocity": [dict(rule) for rule in self.velocity],
            "rate_limits": {"outcome": self.rate_limit_outcome},
            MOVING: UNDECLARED if self.money_moving_task_types is None else list(self.money_moving_task_types),
            CONTROLS: {
                task: {kind: _listing(controls) for kind, controls in by_kind.items()}
                for task, by_kind in self.money_controls_by_task_type.items()
            },
        }


def compiled_parameters(data: JsonObject) -> MatrixParameters:
    """The parameters a compiled bundle's data document carries (``kcp_data/matrix/parameters``),
    read with :meth:`MatrixParameters.from_dict`; a part that is not an object is refused."""
    matrix = Strict(data, ParametersError).part("kcp_data").part("matrix")
    return MatrixParameters.from_dict(matrix.get("parameters"), "kcp_data/matrix/parameters")


def _listing(value: tuple[str, ...] | str) -> object:
    return value if isinstance(value, str) else list(value)


def _context(context: Strict) -> ContextLimits:
    bound, external = context.get("knowledge_bound_task_types", ALL), context.get("external_target_types")
    return ContextLimits(
        knowledge_bound_task_types=(
            ALL if bound == ALL else tuple(sorted(set(context.strings("knowledge_bound_task_types"))))
        ),
        max_action_age_seconds=context.integer("max_action_age_seconds", DEFAULT_MAX_ACTION_AGE_SECONDS),
        max_future_skew_seconds=context.integer("max_future_skew_seconds", DEFAULT_MAX_FUTURE_SKEW_SECONDS),
        external_target_types=None if external is None else tuple(context.strings("external_target_types")),
    )


def _rule(rule: Strict) -> JsonDict:
    """A budget or velocity rule as the bundle carries it: a string ``id``, no ``description``."""
    rule.text("id")
    return {key: value for key, value in rule.raw.items() if key != "description"}


def _budgets(given: Strict) -> list[JsonDict]:
    """Each budget over its task types, sorted (a budget naming none counts ``all``; null is refused)."""
    out: list[JsonDict] = []
    for rule in given.parts("budgets"):
        listed = rule.raw.get("task_types", ALL)
        out.append({**_rule(rule), "task_types": ALL if listed == ALL else sorted(rule.strings("task_types", None))})
    return sorted(out, key=lambda rule: str(rule["id"]))


def _moving(given: Strict) -> tuple[str, ...] | None:
    if given.get(MOVING, UNDECLARED) == UNDECLARED:
        return None
    return tuple(sorted(set(given.strings(MOVING))))


def _controls(declared: Strict) -> dict[str, dict[str, ControlSet]]:
    out: dict[str, dict[str, ControlSet]] = {}
    for task in sorted(declared.raw):
        entry = declared.part(task)
        out[task] = {
            kind: NO_CONTROL if entry.raw[kind] == NO_CONTROL else tuple(sorted(set(entry.strings(kind, None))))
            for kind in sorted(entry.raw)
        }
    return out
