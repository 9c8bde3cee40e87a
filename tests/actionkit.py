"""The clean actions tests start from: decision cases (fixtures/cases/*.yaml) and the KYA example.

Each is an action whose decision the case suite (or the contract) pins on both engines, so a test
starts from an action known to get that decision, and no test keeps its own copy of a clean
action that could drift from the deployment it is sent to. Every call returns a fresh deep copy;
``with_`` derives a variant without touching its argument.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kcp_opa.authoring.cases import load_cases

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = FIXTURES / "cases"


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


#: A ``with_`` value that deletes the key at its path (``None`` stays a value a test may send).
DROP: Final = _Drop()


@functools.cache
def _actions(file: str) -> dict[str, Mapping[str, Any]]:
    return {case.case_id: case.action for case in load_cases(CASES / file)}


def case_action(file: str, case_id: str) -> dict[str, Any]:
    """The action a decision case sends (its ``base_action`` merged with its own), as a fresh copy."""
    return copy.deepcopy(dict(_actions(file)[case_id]))


def with_(action: Mapping[str, Any], paths: Mapping[str, Any] | None = None, /, **fields: Any) -> dict[str, Any]:
    """A deep copy of ``action`` with top-level ``fields``, then dotted ``paths``, set (``DROP`` deletes).

    A dotted path sets one key inside a block and keeps the rest of it, so a test names only the
    fact it changes. A missing parent is an error rather than created: a typo must not pass as an
    attack on a block the action never had.
    """
    out = copy.deepcopy(dict(action))
    for path, value in {**fields, **(paths or {})}.items():
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node[part]
        if value is DROP:
            del node[last]
        else:
            node[last] = copy.deepcopy(value)
    return out


def support_read() -> dict[str, Any]:
    """support-desk: a support agent reads declared fields of a customer in its tenant (ALLOW)."""
    return case_action("support-desk.yaml", "sd-read-clean")


def support_answer() -> dict[str, Any]:
    """support-desk: an answer from the FAQ unit, no amount (ALLOW)."""
    return case_action("support-desk.yaml", "sd-answer-from-faq")


def support_refund() -> dict[str, Any]:
    """support-desk: a refund that states no amount yet (DENY amount_missing); tests add one."""
    return case_action("support-desk.yaml", "sd-refund-without-amount")


def support_send() -> dict[str, Any]:
    """support-desk: the support agent sends a customer email (USER_CONFIRMATION)."""
    return case_action("support-desk.yaml", "sd-send-by-support-agent")


def finance_payment() -> dict[str, Any]:
    """finance: the KYA supplier payment, the contract's worked example (HUMAN_APPROVAL)."""
    return dict(json.loads((FIXTURES / "kya-supplier-payment-action.json").read_text()))


def finance_bound_payment() -> dict[str, Any]:
    """finance: a supplier payment bound to the treasury unit (the KYA example, bound to KCP)."""
    return case_action("finance.yaml", "fin-supplier-payment-kcp-bound")
