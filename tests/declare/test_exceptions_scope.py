"""An exception's scope is an object or the exception is refused (kcp_opa/declare/exceptionfile.py):
read as empty, a scope names no tenant, unit, agent or task type, and the policy would apply the
waiver to every action."""

from __future__ import annotations

import pytest

from kcp_opa.core.errors import ValidationFailedError
from kcp_opa.declare.exceptionfile import GrantedException

GRANTED = {
    "id": "exc_1",
    "scope": {"tenant_id": "acme", "task_type": "refund"},
    "waives": ["budget_exceeded"],
    "reason": "quarter end",
    "ticket": "OPS-1",
    "grantor": "ops_olga",
    "issued_at": "2026-12-01T00:00:00Z",
    "expires_at": "2026-12-02T00:00:00Z",
    "issuer": "exceptions-desk",
}


def test_a_scoped_exception_keeps_its_scope() -> None:
    granted = GrantedException.from_dict(GRANTED)
    assert dict(granted.scope) == {"tenant_id": "acme", "task_type": "refund"}
    assert granted.to_input()["scope"] == {"tenant_id": "acme", "task_type": "refund"}


@pytest.mark.parametrize(
    "scope", [["tenant_id", "acme"], "acme", None, 7], ids=["a list", "a string", "null", "a number"]
)
def test_a_scope_that_is_not_an_object_is_refused_not_an_exception_for_every_action(scope: object) -> None:
    """Before: the scope read as {} and the exception covered every action."""
    with pytest.raises(ValidationFailedError, match=r"exc_1.*scope is .*not an object"):
        GrantedException.from_dict({**GRANTED, "scope": scope})
