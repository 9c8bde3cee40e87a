"""Which task types move money, and the controls a money threshold requires per task type.

The matrix may list its money-moving task types (``parameters.money_moving_task_types``): then
only an action of one is a value transfer, and an amount on an action of any other type is
``DENY amount_on_non_money_action``, so an agent can neither move money under a moneyless type
nor dodge the money controls by naming another type. Unlisted, any amount makes a value transfer.
Per task type it may set the controls the ``value_transfer`` and ``high_value`` findings require
(``parameters.money_controls_by_task_type``), replacing the defaults for that type only; ``none``
says "no control" explicitly, an empty list is refused (policies/kcp/evaluators/financial.rego,
docs/budgets.md). Here: the checks a schema cannot make and the controls named, which
kcp_opa.compile.resolution resolves against what the desk records (their normalised form, which
the bundle carries, is kcp_opa.declare.parameters').
"""

from __future__ import annotations

from typing import Final

from kcp_opa.core.jsonread import JsonObject, items, mapping, strings
from kcp_opa.declare.diagnostics import Findings, YamlPath, did_you_mean

#: The bundle's value when the matrix lists no money-moving task types (today's rule: any amount).
UNDECLARED = "undeclared"
#: A declared control set that requires no control.
NO_CONTROL: Final = "none"
MOVING, CONTROLS = "money_moving_task_types", "money_controls_by_task_type"


def check(params: JsonObject, task_types: JsonObject, findings: Findings) -> None:
    """Every listed task type is the matrix's; controls are set only for a type that can move
    money, and never as an empty list (which would read as "no control" by accident)."""
    listed = params.get(MOVING)
    moving = set(strings(listed)) if isinstance(listed, list) else None
    for position, task in enumerate(items(listed)):
        if isinstance(task, str) and task not in task_types:
            findings.error(
                "money_task_type_unknown",
                f"money-moving task type {task!r} is not in the matrix{did_you_mean(task, list(task_types))}: "
                "list the matrix's task types that move money",
                ("parameters", MOVING, position),
            )
    for task, entry in mapping(params.get(CONTROLS)).items():
        here: YamlPath = ("parameters", CONTROLS, task)
        if task not in task_types:
            findings.error(
                "money_task_type_unknown",
                f"controls for task type {task!r}, which the matrix does not list"
                f"{did_you_mean(str(task), list(task_types))}",
                here,
            )
        elif moving is not None and task not in moving:
            findings.error(
                "money_controls_for_moneyless_task",
                f"controls for task type {task!r}, which money_moving_task_types does not list: no action of it "
                "is a value transfer, so they would never apply; list it there or remove them",
                here,
            )
        for kind, value in mapping(entry).items():
            if isinstance(value, list) and not value:
                findings.error(
                    "money_controls_empty",
                    f"an empty {kind} control list would require no control by accident: write {NO_CONTROL!r} "
                    "to require none, or list the controls",
                    (*here, kind),
                )
